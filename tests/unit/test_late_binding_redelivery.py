"""A late-bound call whose response completed survives its fragments read again (chaos seed 5).

A call whose stream (its terminal and its response's ``response.ended completed``) is read
before its turn's ``turn.started`` waits as a ``terminal_candidate``. Its fragments may be read
again before the binding comes: a worker that restores the partition from its changelog and
resumes from input offsets behind it, or a gateway's reconnect replay. Those events are
duplicates of a call that did end (ARCHITECTURE.md invariants 4 and 9): the binding must still
validate and dispatch the call, once. Before the fix, the response's end (recorded as the reason
``incomplete`` for the calls still open when it came) refused them and cancelled the waiting
call ``incomplete``: the three calls of ``hooli/s5-t17`` in the seed 5 chaos run.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import Dispatch, InputEvent, ResponseStatus
from processor.core.policy import Limits
from processor.core.states import CallState
from tests.unit.scenario import Call, Run, registry, turn_started

TEXTS = ['{"city": "Paris"}', '{"city": "Lima"}', '{"city": "Oslo"}']


def _calls() -> list[Call]:
    return [Call(call_id=f"call-{i}", item_id=f"item-{i}") for i in range(len(TEXTS))]


def _streams(calls: list[Call]) -> list[list[InputEvent]]:
    """Each call's start, deltas and end (no response end)."""
    return [c.stream(t, pieces=4, complete=False) for c, t in zip(calls, TEXTS, strict=True)]


def _restored(first: Assembler) -> Assembler:
    second = Assembler(registry(), Limits(), verifier=AllowUnsigned())
    for change in first.drain_changes():
        assert second.restore(change.key, change.value) is None
    return second


def test_a_fragment_read_again_while_the_call_awaits_its_binding_is_a_duplicate() -> None:
    call = Call()
    stream = call.stream('{"city": "Paris"}')  # start, deltas, end, response completed
    for again in stream[:-1]:
        run = Run()
        run.feed(*stream)
        assert run.assembler.call_state(call.key) is CallState.TERMINAL_CANDIDATE
        run.feed(again)
        assert run.assembler.call_state(call.key) is CallState.TERMINAL_CANDIDATE, again.type
        run.feed(turn_started())
        assert [d.arguments for d in run.dispatches] == [{"city": "Paris"}], again.type


def test_seed5_restored_late_bound_calls_read_again_with_their_binding_dispatch() -> None:
    """Seed 5's shape: three calls and the response's end committed with the calls waiting for
    their binding (control's end 5 when they were read); the worker restores the partition and
    reads the fragments again (control's end now 7), then the ``turn.started`` (control offset
    5), in one batch, 28 s later: within the binding wait."""
    calls = _calls()
    streams = _streams(calls)
    fragments = [e for s in streams for e in s] + [calls[0].done()]
    first = Assembler(registry(), Limits(), verifier=AllowUnsigned())
    first.advance_control(5, 100.0)
    for event in fragments:
        first.handle(event, 100.0, barrier=5)
    assert {first.call_state(c.key) for c in calls} == {CallState.TERMINAL_CANDIDATE}
    second = _restored(first)
    run = Run(assembler=second, now=128.0)
    for event in fragments:
        run.outputs += second.handle(event, 128.0, barrier=7)
    run.feed(turn_started())
    run.outputs += second.advance_control(6, 128.0)
    assert run.dispatches == []  # held until control is applied up to the later barrier
    run.outputs += second.advance_control(8, 128.0)
    assert sorted(d.call_id for d in run.dispatches) == [c.call_id for c in calls]
    assert {run.ledger(c.call_id).terminal_reason for c in calls} == {"dispatched"}


def test_a_different_delta_after_the_terminal_still_fails_the_waiting_call() -> None:
    run, call = Run(), Call()
    run.feed(*call.stream('{"city": "Paris"}'))
    run.feed(call.delta(2, "something else"))
    run.feed(turn_started())
    assert run.dispatches == []
    assert run.ledger("call_0").terminal_reason == "sequence_gap"


def test_a_voided_response_still_refuses_a_call_read_again() -> None:
    run, call = Run(), Call()
    stream = call.stream('{"city": "Paris"}', complete=False)
    run.feed(*stream, call.response_ended(ResponseStatus.INCOMPLETE))
    run.feed(*stream, turn_started())
    assert run.dispatches == []
    assert run.ledger("call_0").terminal_reason == "incomplete"


@settings(max_examples=200, deadline=None)
@given(
    again=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5)), max_size=12),
    restore=st.booleans(),
)
def test_any_redelivery_before_the_binding_dispatches_each_call_once(
    again: list[tuple[int, int]], restore: bool
) -> None:
    """Any fragments of the calls read again (after a restore or not), in any order, between
    the response's completed end and the binding: each call dispatches once, its arguments
    whole."""
    calls = _calls()
    streams = _streams(calls)
    first = Assembler(registry(), Limits(), verifier=AllowUnsigned())
    for event in [e for s in streams for e in s] + [calls[0].done()]:
        first.handle(event, 100.0)
    run = Run(assembler=_restored(first) if restore else first, now=101.0)
    run.feed(*(streams[i][j % len(streams[i])] for i, j in again))
    run.feed(turn_started())
    dispatched: dict[str, Dispatch] = {d.call_id: d for d in run.dispatches}
    assert len(run.dispatches) == len(calls)
    for c, text in zip(calls, TEXTS, strict=True):
        assert dispatched[c.call_id].arguments == json.loads(text)
