"""Whatever the Assembler forgot stays closed under any ``ts`` the decoder accepts.

Issue 30 item 3: the cutoff that makes fragments of forgotten calls stale
(``meta:evicted_before``) was the call's end in worker time, but it is compared with the event's
own ``ts``, which the decoder accepts up to the clock-skew allowance ahead of the worker. A call
whose events were stamped a little ahead, forgotten early by the count bound under another
tenant's flood, opened again on a byte-identical replay of its events and was dispatched a
second time with the same ``dispatch_id``; a quarantined response forgotten the same way let a
replayed call of it through. Now the cutoff is the latest ``ts`` the forgotten call's own events
carried, and a turn or response goes only once every event it could have had is stale.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import (
    Audit,
    DeadLetter,
    Dispatch,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    encode,
)
from processor.core.outputs import RecordSource
from processor.core.policy import Limits
from tests.unit.changelog_store import drain, restored
from tests.unit.scenario import Call, registry, turn_started
from tests.unit.worker_feed import SKEW, feed


def _flood(assembler: Assembler, now: float, count: int) -> None:
    """Another tenant's calls, each dispatched at once: they push the count bound (then the
    worker's tick, which forgets the turns and responses the bound made stale)."""
    for i in range(count):
        turn = f"g{now}-{i}"
        call = Call(tenant="globex", turn_id=turn, response_id=f"r{turn}", call_id="c", ts=now)
        assembler.handle(turn_started(turn, tenant="globex"), now)
        feed(assembler, call.stream('{"city": "Rome"}'), now)
    assembler.tick(now)


def _dispatches(out: list[object]) -> list[Dispatch]:
    return [o for o in out if isinstance(o, Dispatch)]


def _replay_after_eviction(ahead: float, replay_at: float) -> tuple[int, list[object]]:
    """acme's call, stamped ``ahead`` seconds past the worker's clock, dispatched at 100;
    globex's flood makes the count bound forget it; then its events again, byte for byte."""
    assembler = Assembler(registry(), Limits(max_inert_calls=4), verifier=AllowUnsigned())
    call = Call(ts=100.0 + ahead)
    events = [turn_started(), *call.stream('{"city": "Oslo"}')]  # the turn's binding too
    first = _dispatches(feed(assembler, events, 100.0))
    assert len(first) == 1
    for step in range(4):
        _flood(assembler, 101.0 + step, 3)
    assert call.key.as_tuple not in assembler.inert  # forgotten early, by the count bound
    again = feed(assembler, events, replay_at)
    return len(_dispatches(again)), again


def test_a_replay_of_a_call_stamped_ahead_does_not_dispatch_it_again() -> None:
    dispatched, out = _replay_after_eviction(ahead=30.0, replay_at=106.0)
    assert dispatched == 0
    assert {o.reason for o in out if isinstance(o, DeadLetter)} == {"stale_event"}  # fragments


@settings(max_examples=60, deadline=None)
@given(
    ahead=st.floats(min_value=0.0, max_value=SKEW),
    later=st.floats(min_value=1.0, max_value=3600.0),
)
def test_no_accepted_stamp_reopens_a_forgotten_call(ahead: float, later: float) -> None:
    """Any ``ts`` the decoder accepted for the call's events, any time the replay comes."""
    replay_at = 104.0 + later
    dispatched, _ = _replay_after_eviction(ahead, replay_at)
    assert dispatched == 0


def test_the_cutoff_survives_a_restore() -> None:
    assembler = Assembler(registry(), Limits(max_inert_calls=4), verifier=AllowUnsigned())
    call = Call(ts=130.0)
    events = [turn_started(), *call.stream('{"city": "Oslo"}')]
    assert len(_dispatches(feed(assembler, events, 100.0))) == 1
    store: dict[str, bytes | None] = {}
    drain(assembler, store, [])
    for step in range(4):
        _flood(assembler, 101.0 + step, 3)
    drain(assembler, store, [])
    again = restored(store)
    assert again.stale_before("acme") == assembler.stale_before("acme") >= 130.0
    assert _dispatches(feed(again, events, 110.0)) == []


def test_a_forgotten_quarantine_does_not_let_a_replayed_call_through() -> None:
    assembler = Assembler(registry(), Limits(max_inert_calls=4), verifier=AllowUnsigned())
    call = Call(ts=130.0)  # stamped 30 s ahead of the worker
    quarantine = ResponseQuarantined(
        command_id="q1", issued_by="ops", issued_at=100.0, reason="bad output",
        tenant=call.tenant, turn_id=call.turn_id, response_id=call.response_id,
    )  # fmt: skip
    events = [turn_started(), *call.stream('{"city": "Oslo"}')]
    assembler.handle(quarantine, 100.0)
    assert _dispatches(feed(assembler, events, 100.5)) == []  # refused: quarantined
    for step in range(4):
        _flood(assembler, 101.0 + step, 3)
    assert call.key.as_tuple not in assembler.inert
    assert _dispatches(feed(assembler, events, 110.0)) == []


def test_a_command_id_is_remembered_until_its_replay_is_stale() -> None:
    """The same class for replay protection: a command id seen at t was forgotten at
    t + retention, but its ``issued_at`` may be up to the skew past t, so a byte-identical
    replay right after passed the stale check and was applied again (here: an old resume
    un-stopping a tenant stopped since)."""
    asm = Assembler(registry(), Limits(retention_seconds=3600), verifier=AllowUnsigned())
    resume = TenantResumed(
        command_id="resume-1", issued_by="ops", issued_at=150.0, expires_at=10_000.0,
        tenant="acme", reason="ok",
    )  # fmt: skip
    stop = TenantStopped(
        command_id="stop-1", issued_by="ops", issued_at=200.0, expires_at=10_000.0,
        tenant="acme", reason="incident",
    )  # fmt: skip
    for event, now in ((resume, 100.0), (stop, 200.0)):
        [audit] = asm.handle(event, now)
        assert isinstance(audit, Audit) and audit.rejection is None
    later = 100.0 + 3600 + 1
    asm.tick(later)
    [again] = asm.handle(encode(resume), later, source=RecordSource("control", 0, 9))
    assert isinstance(again, Audit) and again.rejection == "replayed"
    assert "acme" in asm.control.stopped_tenants
