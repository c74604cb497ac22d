"""User-visible status, asserted apart from action safety: what the user is told, and whether a
retry is offered. ``preparing`` is a cue, never an action."""

from __future__ import annotations

from processor.core.events import Proposal, ResponseStatus, Status, TenantStopped, UserState
from tests.unit.scenario import Call, Run, turn_cancelled, turn_started

WEATHER = '{"city": "Paris"}'


def states(run: Run, call_id: str = "call_0") -> list[tuple[UserState, bool]]:
    return [(s.state, s.retry_possible) for s in run.statuses(call_id)]


def test_preparing_then_dispatched() -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream(WEATHER))
    assert states(run) == [(UserState.PREPARING, False), (UserState.DISPATCHED, False)]
    assert run.statuses("call_0")[0].tool == "get_weather"


def test_preparing_is_emitted_once_and_is_not_an_action() -> None:
    run, call = Run(), Call()
    events = call.stream(WEATHER, pieces=6)
    run.feed(turn_started(), *events[:-1])
    assert states(run) == [(UserState.PREPARING, False)]
    assert run.dispatches == []


def test_awaiting_confirmation_is_told() -> None:
    run, call = Run(), Call()
    run.feed(
        turn_started(), *call.stream('{"date": "2026-12-24", "party_size": 2}', tool="book_slot")
    )
    assert states(run)[-1] == (UserState.AWAITING_CONFIRMATION, False)
    assert len(run.of(Proposal)) == 1


def test_malformed_offers_retry() -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream('{"city": ]'))
    assert states(run)[-1] == (UserState.FAILED, True)


def test_user_stop_is_cancelled_without_retry() -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream(WEATHER)[:2], turn_cancelled())
    [*_, last] = run.statuses("call_0")
    assert (last.state, last.retry_possible) == (UserState.CANCELLED, False)
    assert "request" in last.message.lower() or "stopped" in last.message.lower()


def test_connection_lost_offers_retry() -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream(WEATHER)[:2], turn_cancelled(reason="connection_lost"))
    assert states(run)[-1] == (UserState.CANCELLED, True)


def test_tenant_stop_tells_a_truthful_handoff() -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream(WEATHER)[:2])
    run.feed(
        TenantStopped(tenant="acme", command_id="s", issued_by="ops", issued_at=1.0, reason="x")
    )
    [*_, last] = run.statuses("call_0")
    assert (last.state, last.retry_possible) == (UserState.CANCELLED, False)
    assert "person" in last.message


def test_response_truncated_offers_retry() -> None:
    run, call = Run(), Call()
    run.feed(
        turn_started(), *call.stream(WEATHER)[:2], call.response_ended(ResponseStatus.INCOMPLETE)
    )
    assert states(run)[-1] == (UserState.CANCELLED, True)


def test_statuses_never_carry_argument_values() -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), *call.stream('{"city": "TOPSECRET", "bad": 1}'))
    for status in run.of(Status):
        assert "TOPSECRET" not in status.model_dump_json()
