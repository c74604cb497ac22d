"""Response-level verdicts (ARCHITECTURE.md invariant 10): a call acts only if its response
completed normally; every other ending makes it inert, with the provider's reason recorded.
"""

from __future__ import annotations

import pytest

from processor.core.assembler import Assembler
from processor.core.events import Audit, Proposal, ResponseStatus
from processor.core.policy import Limits
from processor.core.states import CallState
from tests.unit.scenario import TOOLS, Call, Run, registry, turn_started

WEATHER = '{"city": "Paris"}'
BOOKING = '{"date": "2026-12-24", "party_size": 2}'
VOIDING = [s for s in ResponseStatus if s is not ResponseStatus.COMPLETED]
EXPECTED_REASON = {
    ResponseStatus.INCOMPLETE: "incomplete",
    ResponseStatus.FAILED: "response_failed",
    ResponseStatus.ERROR: "response_failed",
    ResponseStatus.CANCELLED: "response_failed",
    ResponseStatus.NOT_CHOSEN: "alternative_not_chosen",
}


def test_a_validated_call_waits_for_its_response_to_complete() -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream(WEATHER, complete=False))
    assert run.dispatches == []
    assert run.assembler.call_state(call.key) is CallState.AWAITING_RESPONSE
    run.feed(call.done())
    assert [d.arguments for d in run.dispatches] == [{"city": "Paris"}]
    run.feed(call.done())  # the provider's end, redelivered: nothing more
    assert len(run.dispatches) == 1


@pytest.mark.parametrize("status", VOIDING, ids=lambda s: s.value)
def test_every_other_verdict_voids_the_validated_call(status: ResponseStatus) -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream(WEATHER, complete=False))
    run.feed(call.response_ended(status))
    assert run.dispatches == []
    ledger = run.ledger("call_0")
    assert ledger.terminal_reason == EXPECTED_REASON[status]
    assert ledger.provider_reason == status.value  # the builder's reason is the status word
    [final] = [s for s in run.statuses("call_0") if s.state.value in ("cancelled", "failed")]
    assert final.provider_reason == status.value
    [audit] = run.of(Audit)[-1:]
    assert audit.command_type == "response.ended" and audit.issued_by == "provider:test"
    assert [k.call_id for k in audit.affected] == ["call_0"]
    run.feed(call.done())  # a later "completed" revives nothing
    assert run.dispatches == []


def test_the_providers_reason_reaches_the_ledger() -> None:
    from processor.core.events import ResponseEnded

    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream(WEATHER, complete=False))
    refusal = ResponseEnded(
        event_id="e",
        tenant="acme",
        turn_id="turn-1",
        response_id="resp-1",
        provider="anthropic",
        ts=100.0,
        status=ResponseStatus.FAILED,
        reason="refusal",
    )
    run.feed(refusal)
    assert run.ledger("call_0").provider_reason == "refusal"
    assert run.dispatches == []


def test_a_voiding_verdict_after_completion_still_voids_a_pending_confirmation() -> None:
    run, call = Run(), Call(call_id="p")
    run.feed(turn_started(), *call.stream(BOOKING, tool="book_slot"))
    assert run.assembler.call_state(call.key) is CallState.VALIDATED  # proposed
    run.feed(call.response_ended(ResponseStatus.FAILED))  # two provider finals disagree
    assert run.ledger("p").terminal_reason == "response_failed"
    [proposal] = run.of(Proposal)
    run.feed(call.confirm(proposal.args_digest))
    assert run.dispatches == []


def test_a_call_end_tool_acts_at_its_own_end() -> None:
    doc = {"tools": [dict(TOOLS["tools"][0], dispatch_on="call_end")]}
    run, call = Run(Assembler(registry(doc), Limits())), Call()
    run.feed(turn_started(), *call.stream(WEATHER, complete=False))
    assert len(run.dispatches) == 1  # no wait for the response
    run.feed(call.response_ended(ResponseStatus.FAILED))  # too late to stop it: the opt-in
    assert len(run.dispatches) == 1


def test_dispatch_on_must_be_a_known_choice() -> None:
    from processor.core.errors import RegistryError

    doc = {"tools": [dict(TOOLS["tools"][0], dispatch_on="whenever")]}
    with pytest.raises(RegistryError, match="dispatch_on"):
        registry(doc)


def test_a_response_that_never_ends_times_out_inert() -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream(WEATHER, complete=False))
    run.tick(100.0 + run.assembler.limits.response_wait_seconds - 1)
    assert run.assembler.call_state(call.key) is CallState.AWAITING_RESPONSE
    run.tick(100.0 + run.assembler.limits.response_wait_seconds + 1)
    assert run.ledger("call_0").terminal_reason == "response_timeout"
    run.feed(call.done())
    assert run.dispatches == []


def test_late_binding_after_the_response_completed_dispatches() -> None:
    run, call = Run(), Call()
    run.feed(*call.stream(WEATHER))  # terminal and response end before turn.started
    assert run.assembler.call_state(call.key) is CallState.TERMINAL_CANDIDATE
    run.feed(turn_started())
    assert len(run.dispatches) == 1


def test_a_voided_response_voids_a_call_still_waiting_for_its_binding() -> None:
    run, call = Run(), Call()
    run.feed(*call.stream(WEATHER, complete=False), call.response_ended(ResponseStatus.FAILED))
    run.feed(turn_started())
    assert run.dispatches == []
    assert run.ledger("call_0").terminal_reason == "response_failed"


def test_calls_of_one_response_are_released_in_terminal_order() -> None:
    run = Run()
    a, b = Call(call_id="a", item_id="0"), Call(call_id="b", item_id="1")
    ea, eb = a.stream(WEATHER, complete=False), b.stream('{"city": "Lima"}', complete=False)
    run.feed(turn_started(), *ea[:-1], *eb, ea[-1], a.done())
    assert [d.call_id for d in run.dispatches] == ["b", "a"]


def test_awaiting_response_survives_a_restore() -> None:
    call = Call()
    first = Assembler(registry(), Limits())
    for event in (turn_started(), *call.stream(WEATHER, complete=False)):
        first.handle(event, 100.0)
    second = Assembler(registry(), Limits())
    for change in first.drain_changes():
        second.restore(change.key, change.value)
    assert second.call_state(call.key) is CallState.AWAITING_RESPONSE
    out = second.handle(call.done(), 100.0)
    assert [o.type for o in out].count("dispatch") == 1
