"""The Assembler's state and the indexes over it: every field, declared once. No IO.

Owns the fields of one partition's Assembler (``__init__``: buffers, inert calls, control state,
the open-buffer indexes, the awaiting/held sets, the counters), the upkeep of the open-buffer
indexes (``count`` / ``uncount`` / ``enter_awaiting``) and the marking of changed state keys
(``mark``, ``touch``, ``mark_texts``) that :mod:`processor.core.changelog` drains. Also the
state-key helpers shared by the rule modules (``_call_state_key``, ``_text_key``,
``_parse_text_key``) and ``declaration_of`` (a buffer's tool in the registry).

Must not decide anything: no event handling, no terminal transitions, no outputs. The fields are
declared here only; each is changed by the rule module that owns its rule.

The parts. The Assembler is built h11-style: this one state object, and rule modules of plain
functions that take it explicitly as their first argument (``terminate(state, buf, ...)``,
``try_validate(state, buf, text, now, out)``), so a call's arguments can be followed from the
record to the dispatch through named functions. Each module imports only the ones before it in
this order, which is the order a call's rules depend on each other (no import cycles):

1. ``assembly_state``: the fields, the indexes and the dirty keys (this module);
2. ``forgetting``: ending a call (``terminate``, ``stop``) and forgetting (``forget``);
3. ``changelog``: ``drain_changes`` and ``restore``;
4. ``gating``: response verdicts, the control barrier, ``try_release`` and ``dispatch``;
5. ``binding``: turn bindings, admission (``capacity_refusal``) and ``try_validate``;
6. ``control_commands``: cancellation, confirmation, denial, operator commands;
7. ``fragments``: ``on_fragment``, the per-delta path;
8. ``expiry``: the four expiry rules ``tick`` applies;
9. ``assembler``: the facade (``Assembler``): the verbs ``handle``, ``tick``,
   ``advance_control``, ``drain_changes`` / ``restore``, and the read-only figures.

The state stays one object rather than one per part because it is genuinely shared: every rule
reads and writes the same buffers, indexes and dirty-key set; the rules, not the data, are what
the parts separate. The per-delta path stays one attribute lookup on ``state``."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from processor.core.authn import CommandVerifier, NoKeyring
from processor.core.buffer import CallBuffer
from processor.core.control import ControlState
from processor.core.events import CallKey, decode_key, encode_key, trusted_call_key
from processor.core.inert import CallTuple, InertCall
from processor.core.policy import Limits
from processor.core.registry import Registry

__all__ = ["AssemblyState"]


class AssemblyState:
    """Owns the call buffers and control state of one partition (the fields and indexes)."""

    def __init__(
        self,
        registry: Registry,
        limits: Limits | None = None,
        *,
        verifier: CommandVerifier | None = None,
    ) -> None:
        self.registry = registry
        self.limits = limits or Limits()
        # never ``verifier or ...``: an empty keyring is falsy, and must not mean "unsigned ok"
        self.verifier: CommandVerifier = NoKeyring() if verifier is None else verifier
        self.calls: dict[CallKey, CallBuffer] = {}  # not yet terminal
        # the same buffers by key tuple: a tuple hashes and compares in C, a CallKey model in
        # Python, and the per-delta path looks a call up by the event's ids without a model
        self.live: dict[CallTuple, CallBuffer] = {}
        # terminal calls, compact (processor.core.inert), until retention or the count bound
        self.inert: dict[CallTuple, InertCall] = {}
        self.control = ControlState()
        self.dirty: set[str] = set()
        self.fresh: set[str] = set()  # text keys first written since the last drain
        # fragment events of a tenant dated at or before its cutoff are stale: the count bound
        # forgot a call of that tenant whose events carried ts up to it. Per tenant, so a tenant
        # stamping its own flood ahead of the clock cannot make another tenant's events stale.
        # Kept in the order they last moved (pruned from the front once retention covers them).
        self.stale_cutoffs: dict[str, float] = {}
        self.stale_moved: set[str] = set()  # tenants whose turns and responses to look at
        # the same for every tenant: only from a changelog written before cutoffs were per
        # tenant, or when more tenants hold a cutoff than the count bound allows (folded)
        self.evicted_before = 0.0
        # indexes over the open buffers only, so no hot path walks the inert ones
        self.active: dict[CallTuple, CallBuffer] = {}
        # (max bytes, max deltas) per declared tool name as written (None: no tool yet), for
        # the limits and registry they were computed from
        self.bounds: dict[str | tuple[str, str] | None, tuple[int, int]] = {}
        self.bounds_limits: Limits | None = None
        self.bounds_registry: Registry | None = None
        self.active_by_turn: dict[tuple[str, str], dict[CallKey, CallBuffer]] = {}
        self.open_per_tenant: dict[str, int] = {}
        self.open_total = 0
        # the byte_count of the buffers in ``active``, kept as they change (a gauge the worker
        # reads every iteration: a sum over 10,000 open buffers would cost it milliseconds)
        self.buffered_bytes = 0
        self.evictions = 0  # open buffers failed to admit another tenant's call (fair share)
        self.turn_evictions = 0  # turn records forgotten to make room (max_turns*)
        self.response_evictions = 0  # response records forgotten to make room (max_responses)
        self.ended: deque[tuple[float, CallTuple]] = deque()  # in order of ended_at
        self.ended_sorted = True
        self.restored_texts: dict[CallKey, dict[int, str]] = {}  # texts seen before their call
        # validated calls waiting for their response's end or for the control barrier
        self.awaiting: dict[CallKey, CallBuffer] = {}
        self.awaiting_rank: dict[CallKey, int] = {}  # order of entry, to release in that order
        self.awaiting_seq = 0
        # of those, the ones held by the barrier only: key → (barrier, order of entry); and
        # the same as a heap of (barrier, order, push, key), so advancing control finds the calls
        # it frees without a scan (entries whose key left or moved on are skipped when popped;
        # ``push`` is unique, so keys are never compared)
        self.barrier_held: dict[CallKey, tuple[int, int]] = {}
        self.held_heap: list[tuple[int, int, int, CallKey]] = []
        self.held_seq = 0
        self.held_pushes = 0
        self.recheck_awaiting = False  # after a restore: look at every awaiting call once
        self.control_position: int | None = None  # how far this partition's control is applied
        # terminal candidates waiting for their turn's binding while control is not yet applied
        # up to their barrier (the binding may be there): key → barrier, about in barrier order
        self.unbound_lagging: dict[CallKey, int] = {}
        self.late_events = 0  # events for absorbing calls, ignored (a delivery condition)
        self.duplicate_deltas = 0

    def count(self, buf: CallBuffer) -> None:
        """Index an open buffer and count it against the open-buffer limits until terminal."""
        buf.counted = True
        key = buf.key
        self.active[key.as_tuple] = buf
        self.active_by_turn.setdefault((key.tenant, key.turn_id), {})[key] = buf
        self.open_per_tenant[key.tenant] = self.open_per_tenant.get(key.tenant, 0) + 1
        self.open_total += 1
        self.buffered_bytes += buf.byte_count

    def enter_awaiting(self, buf: CallBuffer) -> None:
        """A validated call waits for its response's end or the barrier (released in order)."""
        self.awaiting[buf.key] = buf
        self.awaiting_seq += 1
        self.awaiting_rank[buf.key] = self.awaiting_seq

    def uncount(self, buf: CallBuffer) -> None:
        """Take a buffer out of every open-call index (it ended, or a restore replaces it)."""
        self.awaiting.pop(buf.key, None)
        self.awaiting_rank.pop(buf.key, None)
        self.barrier_held.pop(buf.key, None)
        self.unbound_lagging.pop(buf.key, None)
        if not buf.counted:
            return
        buf.counted = False
        key = buf.key
        del self.active[key.as_tuple]
        self.buffered_bytes -= buf.byte_count
        turn = self.active_by_turn[(key.tenant, key.turn_id)]
        del turn[key]
        if not turn:
            del self.active_by_turn[(key.tenant, key.turn_id)]
        self.open_total -= 1
        count = self.open_per_tenant[key.tenant] - 1
        if count > 0:
            self.open_per_tenant[key.tenant] = count
        else:
            del self.open_per_tenant[key.tenant]

    def turn_calls(self, tenant: str, turn_id: str) -> list[CallBuffer]:
        """The open buffers of one turn (a copy: callers terminate while iterating)."""
        return list(self.active_by_turn.get((tenant, turn_id), {}).values())

    def touch(self, buf: CallBuffer) -> None:
        self.mark(buf.state_key)

    def drop_text(self, buf: CallBuffer) -> None:
        self.mark_texts(buf, buf.drop_text())

    def mark_texts(self, buf: CallBuffer, positions: Iterable[int]) -> None:
        prefix = buf.text_key_prefix  # _text_key, inlined
        self.dirty.update([f"{prefix}{position}]" for position in positions])

    def mark(self, key: str) -> None:
        self.dirty.add(key)


def declaration_of(state: AssemblyState, buf: CallBuffer) -> Any:
    """The declaration ``buf``'s tool (in its namespace) resolves to in the registry, or None."""
    resolution = state.registry.resolve(buf.tool, buf.namespace) if buf.tool else None
    return resolution.declaration if resolution else None


_HORIZON_KEY = "meta:evicted_before"
_STALE_PREFIX = "meta:stale:"


def _stale_key(tenant: str) -> str:
    """The changelog key of one tenant's stale cutoff."""
    return _STALE_PREFIX + encode_key((tenant,))


def _call_state_key(key: CallTuple) -> str:
    return "call:" + encode_key(key)


def _text_key(buf: CallBuffer, position: int) -> str:
    """``"text:" + encode_key((*key, position))``, from the buffer's cached encoded key.

    Both forms of :func:`encode_key` end with ``]`` and write an int part as its digits, so
    appending the position to the encoded key gives the same text.
    """
    return f"{buf.text_key_prefix}{position}]"


def _parse_text_key(key: str) -> tuple[CallKey, int]:
    t, u, r, i, c, position = decode_key(key[5:])
    return _restored_key(t, u, r, i, c), int(position)


def _call_key(encoded: str) -> CallKey:
    t, u, r, i, c = decode_key(encoded)
    return _restored_key(t, u, r, i, c)


def _later(a: int | None, b: int | None) -> int | None:
    """The later of two barriers (None = no barrier)."""
    if a is None:
        return b
    return a if b is None else max(a, b)


def _restored_key(t: str, u: str, r: str, i: str, c: str) -> CallKey:
    """A call key read back from the changelog: it was validated when first seen."""
    return trusted_call_key(t, u, r, i, c)
