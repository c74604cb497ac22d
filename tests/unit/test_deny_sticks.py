"""A denial sticks to its call key from whenever it is committed (issue 38, item 1).

Before the call exists, while it streams, while it waits for its response, its binding or a
confirmation: the call never dispatches and is never proposed again, whatever confirmation comes
later, across a restore from the changelog, and for tools with and without confirmation.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import Audit, CallDenied, InputEvent, Proposal
from processor.core.policy import Limits
from processor.core.states import CallState
from tests.unit.scenario import Call, Run, registry, turn_started

BOOK = '{"date": "2026-12-24", "party_size": 4}'
WEATHER = '{"city": "Oslo"}'


def _events(call: Call, tool: str) -> list[InputEvent]:
    return call.stream(BOOK if tool == "book_slot" else WEATHER, tool=tool)


def _restored(run: Run) -> Run:
    """A new Assembler restored from everything ``run``'s Assembler wrote to its changelog."""
    store = {c.key: c.value for c in run.assembler.drain_changes()}
    fresh = Assembler(registry(), Limits(), verifier=AllowUnsigned())
    for key, value in store.items():
        fresh.restore(key, value)
    return Run(assembler=fresh, outputs=list(run.outputs), now=run.now)


# where the denial lands among the call's events: before anything, after the start, mid-stream,
# after the terminal (validated, waiting for the response's end), after the response's end
_POSITIONS = [0, 1, 2, -2, -1]


@pytest.mark.parametrize("tool", ["book_slot", "get_weather"])
@pytest.mark.parametrize("position", _POSITIONS)
@pytest.mark.parametrize("restart", [False, True])
def test_a_denial_committed_before_the_terminal_always_wins(
    tool: str, position: int, restart: bool
) -> None:
    call = Call()
    events = _events(call, tool)
    cut = position if position >= 0 else len(events) + position
    if tool == "get_weather" and position == -1:
        cut = len(events) - 1  # the call dispatches at the response's end: deny before it
    run = Run(assembler=Assembler(registry(), Limits(), verifier=AllowUnsigned()))
    run.feed(turn_started(), *events[:cut], call.deny())
    if restart:
        run = _restored(run)
    run.feed(*events[cut:])
    for proposal in run.of(Proposal):  # a confirmation of whatever was proposed
        run.feed(call.confirm(proposal.args_digest, cid="conf-late"))
    run.feed(*events)  # a reconnect replay of the whole call
    assert run.dispatches == []
    assert run.assembler.call_state(call.key) is CallState.FAILED  # as a denial after the proposal
    assert run.ledger("call_0").terminal_reason == "confirmation_denied"
    deny_audits = [a for a in run.of(Audit) if a.command_type == "call.denied"]
    assert [a.outcome.value for a in deny_audits] == ["applied"]


def test_a_denial_before_the_binding_holds() -> None:
    call = Call()
    run = Run(assembler=Assembler(registry(), Limits(), verifier=AllowUnsigned()))
    run.feed(call.deny(), *_events(call, "get_weather"), turn_started())
    assert run.dispatches == []
    assert run.ledger("call_0").terminal_reason == "confirmation_denied"


def test_a_denial_names_one_call_only() -> None:
    denied, other = Call(), Call(call_id="call_1", item_id="item-1")
    run = Run(assembler=Assembler(registry(), Limits(), verifier=AllowUnsigned()))
    run.feed(turn_started(), denied.deny())
    run.feed(*_events(denied, "get_weather")[:-1], *_events(other, "get_weather"))
    assert [d.call_id for d in run.dispatches] == ["call_1"]


def test_a_denial_from_another_actor_than_the_bound_one_is_rejected() -> None:
    call = Call()
    run = Run(assembler=Assembler(registry(), Limits(), verifier=AllowUnsigned()))
    run.feed(turn_started(), call.deny(actor="mallory"), *_events(call, "get_weather"))
    assert [d.call_id for d in run.dispatches] == ["call_0"]
    assert [a.rejection for a in run.of(Audit)] == ["wrong_actor"]


def test_past_the_bound_a_denial_cancels_the_turn_and_is_never_dropped() -> None:
    limits = Limits(max_denials_per_turn=2)
    run = Run(assembler=Assembler(registry(), limits, verifier=AllowUnsigned()))
    calls = [Call(call_id=f"call_{i}", item_id=f"item-{i}") for i in range(4)]
    deny: Callable[[Call, int], CallDenied] = lambda c, i: c.deny(cid=f"deny-{i}")  # noqa: E731
    run.feed(turn_started(), *_events(calls[3], "get_weather")[:2])
    run.feed(*(deny(c, i) for i, c in enumerate(calls[:3])))
    for c in calls:
        run.feed(*_events(c, "get_weather"))
    assert run.dispatches == []
    assert run.ledger("call_3").terminal_reason == "turn_cancelled"
    assert run.ledger("call_2").terminal_reason == "turn_cancelled"


def test_denials_survive_the_turn_records_bound() -> None:
    """The binding bound forgets the oldest turn without open calls, never one with denials."""
    limits = Limits(max_turns=2, max_turns_per_tenant=2)
    run = Run(assembler=Assembler(registry(), limits, verifier=AllowUnsigned()))
    call = Call()
    run.feed(turn_started(), call.deny())
    run.feed(turn_started("turn-2"), turn_started("turn-3"))  # no room but by forgetting one
    run.feed(*_events(call, "get_weather"))
    assert run.dispatches == []
