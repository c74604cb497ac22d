"""The binding wait counts what the worker has read, not only the clock (issue 31, seed 2).

An unbound terminal candidate fails closed (``permission_denied``) when its turn's binding does
not come within ``binding_wait_seconds``. When the runtime reads ``control`` apart from
fragments it gives ``tick`` control's end offset, read at the tick's time or later; the call
then fails only once control is applied up to an end read after its wait ran out, so a
``turn.started`` written before the wait ran out always binds it, however late the worker reads
it (a restart, a rebuild, a paused process, an outage). Without any control position (offline
replay, one ordered stream) the clock alone decides, as before.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import Dispatch, Ledger, OutputRecord
from processor.core.policy import Limits
from processor.core.states import CallState
from tests.unit.scenario import Call, registry, turn_started

WEATHER = '{"city": "Paris"}'
WAIT = Limits().binding_wait_seconds
T0 = 100.0  # the call's terminal is read (and finds its turn unbound) at this time


def fresh() -> Assembler:
    return Assembler(registry(), Limits(), verifier=AllowUnsigned())


def unbound(assembler: Assembler, call: Call, barrier: int | None = 0) -> list[OutputRecord]:
    out: list[OutputRecord] = []
    for event in call.stream(WEATHER):
        out += assembler.handle(event, T0, barrier=barrier)
    assert assembler.call_state(call.key) is CallState.TERMINAL_CANDIDATE
    return out


def reason(out: list[OutputRecord], call: Call) -> str | None:
    return next(
        (o.terminal_reason for o in out if isinstance(o, Ledger) and o.call_id == call.call_id),
        None,
    )


def test_a_binding_in_control_but_unread_when_the_wait_ran_out_still_binds() -> None:
    """The seed-2 loss: the worker is back after the wait, control holds the binding at offset
    0, unread. The tick reads control's end (1) and waits for control to be applied to it."""
    a, call = fresh(), Call()
    out = unbound(a, call)
    a.advance_control(0, T0)  # applied: nothing (the restored consumer's position)
    out += a.tick(T0 + WAIT + 60, control_end=1)
    assert a.call_state(call.key) is CallState.TERMINAL_CANDIDATE
    out += a.tick(T0 + WAIT + 61, control_end=1)  # again: still not applied that far
    assert a.call_state(call.key) is CallState.TERMINAL_CANDIDATE
    out += a.handle(turn_started(), T0 + WAIT + 62)
    out += a.advance_control(1, T0 + WAIT + 62)
    assert reason(out, call) == "dispatched"
    assert [o.call_id for o in out if isinstance(o, Dispatch)] == [call.call_id]


def test_the_wait_still_ends_once_control_is_applied_and_holds_no_binding() -> None:
    a, call = fresh(), Call()
    out = unbound(a, call)
    out += a.tick(T0 + WAIT + 1, control_end=3)  # three other records in control: read them
    assert a.call_state(call.key) is CallState.TERMINAL_CANDIDATE
    for offset, turn in enumerate(("t-a", "t-b", "t-c")):
        out += a.handle(turn_started(turn), T0 + WAIT + 2)
        out += a.advance_control(offset + 1, T0 + WAIT + 2)
    out += a.tick(T0 + WAIT + 3, control_end=5)  # the fence stays at the first end read
    assert reason(out, call) == "permission_denied"


def test_an_end_read_before_the_wait_ran_out_is_no_fence() -> None:
    """Ticks inside the wait set nothing: the fence is read after the wait ran out."""
    a, call = fresh(), Call()
    unbound(a, call)
    a.advance_control(0, T0)
    assert a.tick(T0 + WAIT / 2, control_end=0) == []
    out = a.tick(T0 + WAIT + 1, control_end=2)
    assert a.call_state(call.key) is CallState.TERMINAL_CANDIDATE
    out += a.advance_control(2, T0 + WAIT + 2)
    out += a.tick(T0 + WAIT + 2, control_end=2)
    assert reason(out, call) == "permission_denied"


def test_a_worker_that_cannot_read_controls_end_expires_nothing_for_want_of_a_binding() -> None:
    a, call = fresh(), Call()
    unbound(a, call)
    a.advance_control(0, T0)  # control is read apart from fragments
    assert a.tick(T0 + 10 * WAIT) == []
    assert a.call_state(call.key) is CallState.TERMINAL_CANDIDATE


def test_a_restored_worker_that_does_not_know_controls_position_waits() -> None:
    a, call = fresh(), Call()
    unbound(a, call)  # no position applied yet (the consumer's was unknown)
    assert a.tick(T0 + 10 * WAIT, control_end=4) == []
    assert a.call_state(call.key) is CallState.TERMINAL_CANDIDATE


def test_without_control_positions_the_clock_alone_decides() -> None:
    """Offline replay: one ordered stream, control applied as read; no end, no position."""
    a, call = fresh(), Call()
    out = unbound(a, call, barrier=None)
    assert a.tick(T0 + WAIT - 1) == []
    out += a.tick(T0 + WAIT + 1)
    assert reason(out, call) == "permission_denied"


@settings(max_examples=300, deadline=None)
@given(
    others=st.lists(st.floats(T0 - 5, T0 + 3 * WAIT), max_size=6),
    binding=st.none() | st.floats(T0 - 5, T0 + 3 * WAIT),
    steps=st.lists(
        st.tuples(st.sampled_from(["read", "tick"]), st.floats(0.0, WAIT / 2)), max_size=40
    ),
)
def test_a_binding_written_before_the_wait_ran_out_is_never_lost(
    others: list[float], binding: float | None, steps: list[tuple[str, float]]
) -> None:
    """Control's records (other turns' bindings, and maybe this call's) are written at random
    times; the worker reads them one by one and ticks, with control's end as written by then,
    in any order and pace. A binding written before the wait ran out always dispatches the
    call; once control is read to its end and the wait is over, the call is decided (without a
    binding: ``permission_denied``)."""
    written = sorted(
        [(w, f"other-{i}") for i, w in enumerate(others)]
        + ([(binding, "turn-1")] if binding is not None else [])
    )
    a, call = fresh(), Call()
    barrier = sum(1 for w, _ in written if w <= T0)
    out = unbound(a, call, barrier=barrier)
    now, applied = T0, 0

    def end_at(t: float) -> int:
        return sum(1 for w, _ in written if w <= t)

    def read_one(t: float) -> None:
        nonlocal applied
        _, turn = written[applied]
        out.extend(a.handle(turn_started(turn), t))
        applied += 1
        out.extend(a.advance_control(applied, t))

    a.advance_control(0, now)
    for action, gap in steps:
        now += gap
        if action == "read" and applied < end_at(now):
            read_one(now)
        elif action == "tick":
            out.extend(a.tick(now, control_end=end_at(now)))
    now = max(now, written[-1][0] if written else now) + WAIT + 1
    while applied < len(written):
        read_one(now)
    out.extend(a.tick(now, control_end=len(written)))
    outcome = reason(out, call)
    if binding is not None and binding <= T0 + WAIT:
        assert outcome == "dispatched"
    elif binding is None:
        assert outcome == "permission_denied"
    else:  # written after the wait ran out: either, but decided
        assert outcome in ("dispatched", "permission_denied")
    assert a.call_state(call.key) is not CallState.TERMINAL_CANDIDATE
