"""Property tests of the Assembler.

(a) Any JSON object, any chunking: the dispatched arguments equal the object.
(b) A stateful test that interleaves, duplicates, reorders, conflicts, cancels, stops, expires,
    ends responses (normally or with a voiding verdict) and restarts (restore from the
    changelog) calls against a small reference model, checking the invariants of
    ARCHITECTURE.md §4 after every step.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import (
    Audit,
    Dispatch,
    Ledger,
    Proposal,
    ResponseStatus,
    Status,
    TenantResumed,
    TenantStopped,
)
from processor.core.policy import Limits
from processor.core.registry import Registry
from tests.unit.scenario import Call, turn_cancelled, turn_started

ANY_OBJECT = Registry.from_document(
    {
        "tools": [
            {"name": "t", "parameters": {"type": "object"}},
            {
                "name": "c",
                "parameters": {"type": "object"},
                "requires_confirmation": True,
                "confirmation_ttl_seconds": 120,
            },
        ]
    }
)
SAFE_INT = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
# I-JSON text: no surrogates and no noncharacters (RFC 7493 §2.1; refused, tests/unit/test_jsonscan)
CHARS = st.characters(
    exclude_categories=("Cs",),
    exclude_characters=[c for c in map(chr, range(0x110000)) if 0xFDD0 <= ord(c) <= 0xFDEF
                        or ord(c) & 0xFFFE == 0xFFFE],
)  # fmt: skip
SCALARS = st.none() | st.booleans() | SAFE_INT | FINITE | st.text(CHARS)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(CHARS, max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
OBJECTS = st.dictionaries(st.text(CHARS, max_size=8), JSON, max_size=6)


def chunk(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a] or [""]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(OBJECTS, st.lists(st.integers(min_value=0, max_value=10_000), max_size=30), st.booleans())
def test_any_object_any_chunking_assembles_the_object(
    obj: dict[str, Any], cuts: list[int], ascii_escapes: bool
) -> None:
    text = json.dumps(obj, ensure_ascii=True) if ascii_escapes else orjson.dumps(obj).decode()
    pieces = chunk(text, cuts)
    assembler, call = Assembler(ANY_OBJECT, Limits(max_depth=64)), Call()
    outputs = assembler.handle(turn_started(), 100.0)
    outputs += assembler.handle(call.start("t"), 100.0)
    for seq, piece in enumerate(pieces, start=1):
        outputs += assembler.handle(call.delta(seq, piece), 100.0)
    assert not [o for o in outputs if isinstance(o, Dispatch)]
    outputs += assembler.handle(call.end(len(pieces) + 1), 100.0)
    assert not [o for o in outputs if isinstance(o, Dispatch)]  # until the response completes
    outputs += assembler.handle(call.done(), 100.0)
    [dispatch] = [o for o in outputs if isinstance(o, Dispatch)]
    assert dispatch.arguments == obj


# --------------------------------------------------------------------------- stateful model

TENANTS = ("acme", "globex")
TURNS = ("turn-1", "turn-2")
WINDOW = 4


@dataclass
class Slot:
    """One call of the model: its script, what was sent, and what must come of it."""

    call: Call
    pieces: list[str]
    obj: dict[str, Any]
    started: bool = False
    sent: set[int] = field(default_factory=set)  # delta positions sent
    ended: bool = False
    touched: bool = False
    fate: str = "open"  # open | validated | proposed | dead | dispatched
    tool: str = "t"
    proposed_at: float = 0.0
    validated_at: float = 0.0

    @property
    def response(self) -> tuple[str, str, str]:
        return (self.call.tenant, self.call.turn_id, self.call.response_id)


class AssemblerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.limits = Limits(
            idle_timeout_seconds=50.0, max_reorder_window=WINDOW, response_wait_seconds=120.0
        )
        self.responses: dict[tuple[str, str, str], bool] = {}  # ended: completed normally?
        self.assembler = Assembler(ANY_OBJECT, self.limits, verifier=AllowUnsigned())
        self.changelog: dict[str, bytes | None] = {}
        self.now = 100.0
        self.slots: list[Slot] = []
        self.dispatched: dict[tuple[str, ...], Dispatch] = {}
        self.cancelled_turns: set[tuple[str, str]] = set()
        self.stopped: set[str] = set()
        self.outputs: list[Any] = []
        self.commands = 0
        self.proposals: dict[tuple[str, ...], Proposal] = {}

    @initialize(
        objs=st.lists(OBJECTS, min_size=1, max_size=5),
        cuts=st.lists(st.integers(0, 999), max_size=6),
    )
    def setup(self, objs: list[dict[str, Any]], cuts: list[int]) -> None:
        for tenant in TENANTS:
            for turn in TURNS:
                self._feed(turn_started(turn, tenant=tenant))
        for i, obj in enumerate(objs):
            marker = {"secret": f"S3CR3T-{i}", **obj}
            text = orjson.dumps(marker).decode()
            call = Call(
                call_id=f"call_{i % 2}",  # positional ids repeat across turns, as some providers do
                tenant=TENANTS[i % 2],
                turn_id=TURNS[(i // 2) % 2],
                response_id=f"r{i // 4}",
                item_id=str(i),
            )
            self.slots.append(Slot(call, chunk(text, cuts), marker, tool="tc"[i % 2]))

    # -- helpers -------------------------------------------------------------------------

    def _feed(self, event: Any) -> None:
        out = self.assembler.handle(event, self.now)
        self.outputs += out
        for record in out:
            if isinstance(record, Proposal):
                self.proposals[record.key.as_tuple] = record
            if isinstance(record, Dispatch):
                key = record.key.as_tuple
                assert key not in self.dispatched, "dispatched twice"
                self.dispatched[key] = record

    def _refused(self, slot: Slot) -> bool:
        c = slot.call
        if slot.response in self.responses:
            return True  # a call event after its response ended is refused
        return (c.tenant, c.turn_id) in self.cancelled_turns or c.tenant in self.stopped

    def _touch(self, slot: Slot) -> None:
        slot.touched = True
        if slot.fate == "open" and self._refused(slot):
            slot.fate = "dead"

    def _kill(self, slot: Slot) -> None:
        if slot.fate in ("open", "validated", "proposed"):
            slot.fate = "dead"

    def _release(self, slot: Slot) -> None:
        """The response completed and the slot is validated: it acts (or is proposed)."""
        if slot.fate == "validated":
            if slot.tool == "c":
                slot.fate, slot.proposed_at = "proposed", self.now
            else:
                slot.fate = "dispatched"

    # -- rules ---------------------------------------------------------------------------

    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        self._start(data.draw(st.sampled_from(self.slots)))

    def _start(self, slot: Slot) -> None:
        self._touch(slot)
        slot.started = True
        self._feed(slot.call.start(slot.tool))

    @rule(data=st.data())
    def send_delta(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(self.slots))
        unsent = [p for p in range(1, len(slot.pieces) + 1) if p not in slot.sent]
        if not unsent or slot.ended:
            return
        contiguous = next(p for p in range(1, len(slot.pieces) + 2) if p not in slot.sent)
        # stay inside the reordering window, so every gap can still be filled
        seq = data.draw(st.sampled_from([p for p in unsent if p < contiguous + WINDOW]))
        self._touch(slot)
        slot.sent.add(seq)
        self._feed(slot.call.delta(seq, slot.pieces[seq - 1]))

    @rule(data=st.data())
    def duplicate_delta(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(self.slots))
        if slot.sent:
            seq = data.draw(st.sampled_from(sorted(slot.sent)))
            self._touch(slot)
            self._feed(slot.call.delta(seq, slot.pieces[seq - 1]))

    @rule(data=st.data())
    def conflicting_delta(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(self.slots))
        if slot.sent and not slot.ended:
            seq = data.draw(st.sampled_from(sorted(slot.sent)))
            self._touch(slot)
            if slot.fate == "open":
                slot.fate = "dead"
            self._feed(slot.call.delta(seq, slot.pieces[seq - 1] + " "))

    @rule(data=st.data())
    def end(self, data: st.DataObject) -> None:
        self._end(data.draw(st.sampled_from(self.slots)))

    def _end(self, slot: Slot) -> None:
        self._touch(slot)
        if slot.fate == "open" and not slot.ended:
            complete = slot.started and slot.sent == set(range(1, len(slot.pieces) + 1))
            if not complete or slot.response in self.responses:
                slot.fate = "dead"  # a call event after its response ended is refused
            else:
                slot.fate, slot.validated_at = "validated", self.now
        slot.ended = True
        self._feed(slot.call.end(len(slot.pieces) + 1))

    @rule(data=st.data(), status=st.sampled_from(list(ResponseStatus)))
    def end_response(self, data: st.DataObject, status: ResponseStatus) -> None:
        """The provider's verdict on one response (normal, or refused / cut / failed ...)."""
        slot = data.draw(st.sampled_from(self.slots))
        completed = status is ResponseStatus.COMPLETED
        first = slot.response not in self.responses
        if first:
            self.responses[slot.response] = completed
        elif self.responses[slot.response] and not completed:
            self.responses[slot.response] = False  # a later voiding verdict still voids
        else:
            completed = self.responses[slot.response]
        for other in self.slots:
            if other.response != slot.response:
                continue
            if completed and other.ended:
                self._release(other)
            elif completed or other.fate in ("open", "validated", "proposed"):
                self._kill(other)  # still open when the response ended, or voided
        self._feed(slot.call.response_ended(status))

    @rule(data=st.data())
    def whole_call(self, data: st.DataObject) -> None:
        """A call sent start to end in one go (the common case), in order."""
        slot = data.draw(st.sampled_from(self.slots))
        self._start(slot)
        for seq in range(1, len(slot.pieces) + 1):
            if seq not in slot.sent and not slot.ended:
                self._touch(slot)
                slot.sent.add(seq)
                self._feed(slot.call.delta(seq, slot.pieces[seq - 1]))
        self._end(slot)

    @rule(tenant=st.sampled_from(TENANTS), turn=st.sampled_from(TURNS))
    def cancel_turn(self, tenant: str, turn: str) -> None:
        self.cancelled_turns.add((tenant, turn))
        for slot in self.slots:
            if (slot.call.tenant, slot.call.turn_id) == (tenant, turn):
                self._kill(slot)
        self._feed(turn_cancelled(turn, tenant=tenant, reason="user_stop"))

    def _command_id(self, kind: str) -> str:
        self.commands += 1
        return f"{kind}-{self.commands}"

    @rule(tenant=st.sampled_from(TENANTS))
    def stop_tenant(self, tenant: str) -> None:
        self.stopped.add(tenant)
        for slot in self.slots:
            if slot.call.tenant == tenant and slot.touched:
                self._kill(slot)
        self._feed(
            TenantStopped(
                tenant=tenant,
                command_id=self._command_id("stop"),
                issued_by="ops",
                issued_at=self.now,
            )
        )

    @precondition(lambda self: bool(self.stopped))
    @rule(data=st.data())
    def resume_tenant(self, data: st.DataObject) -> None:
        tenant = data.draw(st.sampled_from(sorted(self.stopped)))
        self.stopped.discard(tenant)
        self._feed(
            TenantResumed(
                tenant=tenant,
                command_id=self._command_id("resume"),
                issued_by="ops",
                issued_at=self.now,
            )
        )

    @rule()
    def idle_expiry(self) -> None:
        self.now += self.limits.idle_timeout_seconds + 1
        for slot in self.slots:
            if slot.touched and slot.fate == "open":
                slot.fate = "dead"
            if slot.fate == "proposed" and self.now > slot.proposed_at + 120:
                slot.fate = "dead"
            if slot.fate == "validated" and self.now > slot.validated_at + 120:
                slot.fate = "dead"  # its response never ended: response_timeout
        self.outputs += self.assembler.tick(self.now)

    @rule(data=st.data(), right=st.booleans(), actor=st.sampled_from(["alice", "alice", "mallory"]))
    def confirm(self, data: st.DataObject, right: bool, actor: str) -> None:
        proposed = [s for s in self.slots if s.fate == "proposed"]
        slot = data.draw(st.sampled_from(proposed or self.slots))
        proposal = self.proposals.get(slot.call.key.as_tuple)
        digest = proposal.args_digest if proposal and right else "sha256:" + "0" * 64
        if slot.fate == "proposed" and right and actor == "alice":
            slot.fate = "dispatched"
        self._feed(slot.call.confirm(digest, actor=actor, cid=self._command_id("confirm")))

    @rule(data=st.data(), actor=st.sampled_from(["alice", "alice", "mallory"]))
    def deny(self, data: st.DataObject, actor: str) -> None:
        """A denial, at any time in a call's life (issue 38): from the bound actor it sticks to
        the call key, whatever comes after; another actor's changes nothing."""
        slot = data.draw(st.sampled_from(self.slots))
        if actor == "alice" and slot.fate != "dispatched":
            slot.fate = "dead"
        self._feed(slot.call.deny(actor=actor, cid=self._command_id("deny")))

    @rule()
    def restart(self) -> None:
        """A crash after a commit: a new Assembler restored from the changelog alone."""
        for change in self.assembler.drain_changes():
            self.changelog[change.key] = change.value
        fresh = Assembler(ANY_OBJECT, self.limits, verifier=AllowUnsigned())
        for key, value in self.changelog.items():
            fresh.restore(key, value)
        self.assembler = fresh

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def dispatches_match_the_model(self) -> None:
        expected = {s.call.key.as_tuple: s for s in self.slots if s.fate == "dispatched"}
        assert set(self.dispatched) == set(expected)
        for key, dispatch in self.dispatched.items():
            assert dispatch.arguments == expected[key].obj
            assert dispatch.call_id == key[4] and dispatch.turn_id == key[1]

    @invariant()
    def records_never_carry_argument_values(self) -> None:
        for record in self.outputs:
            if isinstance(record, Ledger | Audit | Status):
                assert "S3CR3T" not in record.model_dump_json()

    @invariant()
    def buffers_are_bounded(self) -> None:
        assert self.assembler.open_buffers <= self.limits.max_open_buffers
        open_keys = {k.as_tuple for k, b in self.assembler.calls.items() if b.open}
        assert self.assembler.open_buffers == len(open_keys)
        held = sum(b.byte_count for k, b in self.assembler.calls.items() if b.open)
        assert self.assembler.buffered_bytes == held  # kept as buffers change, not summed
        for slot in self.slots:
            if slot.fate in ("dead", "dispatched"):
                assert slot.call.key.as_tuple not in open_keys


AssemblerMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestAssemblerMachine = AssemblerMachine.TestCase
