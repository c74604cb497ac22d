"""The outcome fold (issue 40, item 1): one turn's ``status``, ``ledger``, ``results`` and
``audit`` records folded into each call's settled outcome, pure and table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from processor.agent.follower import FollowedTurn, OutcomeFollower
from processor.agent.outcomes import OutcomeKind, TurnOutcomes, decode_outcome_record
from processor.core.events import (
    Audit,
    CallDelta,
    CallEnded,
    CallKey,
    CallStarted,
    Ledger,
    Status,
    encode,
)
from processor.executor.records import ExecutionOutcome, ExecutionResult
from processor.settings import Settings

KEY = CallKey(tenant="acme", turn_id="t-1", response_id="r-1", item_id="0", call_id="c-1")


def ledger(
    key: CallKey = KEY, state: str = "dispatched", reason: str = "dispatched", **kw: Any
) -> Ledger:
    return Ledger(
        **key.model_dump(),
        ledger_id="l-" + key.call_id,
        tool="get_weather",
        state=state,
        terminal_reason=reason,
        fragment_count=2,
        duplicate_count=0,
        bytes=20,
        dispatch_decision="dispatched" if state == "dispatched" else "not_dispatched",
        dispatch_id="d-1" if state == "dispatched" else None,
        ts=1.0,
        **kw,
    )


def result(
    key: CallKey = KEY, outcome: ExecutionOutcome = ExecutionOutcome.SUCCEEDED, **kw: Any
) -> ExecutionResult:
    fields: dict[str, Any] = {
        "result_id": "res-1",
        "dispatch_id": "d-1",
        "tool": "get_weather",
        "tool_version": "1",
        "executor_group": kw.pop("group", "g-1"),
        "executor_id": "e-1",
        "outcome": outcome,
        "ts": 2.0,
    }
    return ExecutionResult(**key.model_dump(), **{**fields, **kw})


def status(key: CallKey = KEY, state: str = "preparing") -> Status:
    return Status(
        **key.model_dump(),
        status_id="s-" + state,
        tool="get_weather",
        state=state,
        retry_possible=False,
        message="m",
        ts=1.0,
    )


def fold(**kw: Any) -> TurnOutcomes:
    turn = TurnOutcomes("acme", "t-1", **kw)
    turn.expect(KEY, called_as="get_weather", provider="anthropic")
    return turn


@pytest.mark.parametrize(
    ("records", "kind", "reason"),
    [
        ([ledger(), result()], OutcomeKind.RAN, None),
        ([ledger(), result(outcome=ExecutionOutcome.FAILED, reason="card_declined")],
         OutcomeKind.FAILED, "card_declined"),
        ([ledger(), result(outcome=ExecutionOutcome.REFUSED, reason="turn_cancelled",
                           blocked_by="cmd-9")], OutcomeKind.REFUSED, "turn_cancelled"),
        ([ledger(), result(outcome=ExecutionOutcome.UNKNOWN, reason="executor_stopped")],
         OutcomeKind.UNKNOWN, "executor_stopped"),
        ([ledger(state="cancelled", reason="user_stop")], OutcomeKind.CANCELLED, "user_stop"),
        ([ledger(state="cancelled", reason="response_failed", provider_reason="refusal")],
         OutcomeKind.VOIDED, "response_failed"),
        ([ledger(state="failed", reason="schema_invalid")], OutcomeKind.REJECTED, "schema_invalid"),
        ([ledger(state="failed", reason="confirmation_denied")], OutcomeKind.CANCELLED,
         "confirmation_denied"),
        ([status(), ledger()], OutcomeKind.OPEN, None),
        # a result read before the ledger (two topics, read independently) settles all the same
        ([result(), ledger()], OutcomeKind.RAN, None),
    ],
)  # fmt: skip
def test_each_record_sequence_settles_as_the_table_says(
    records: list[Any], kind: OutcomeKind, reason: str | None
) -> None:
    turn = fold()
    for record in records:
        turn.apply(record)
    [outcome] = turn.outcomes()
    assert (outcome.kind, outcome.reason) == (kind, reason)
    assert outcome.called_as == "get_weather"


def test_a_call_that_will_never_run_settles_at_the_workers_decision_and_stays_settled() -> None:
    turn = fold()
    assert not turn.all_settled()
    assert turn.apply(ledger(state="cancelled", reason="tool_disabled"))
    assert turn.all_settled()
    assert not turn.apply(result())  # settled is absorbing
    assert turn.outcomes()[0].kind is OutcomeKind.CANCELLED
    assert turn.outcomes()[0].liftable


def test_dispatched_is_decided_but_not_settled() -> None:
    turn = fold()
    turn.apply(status(state="dispatched"))
    assert turn.all_settled(decided=True) and not turn.all_settled()
    [outcome] = turn.outcomes()
    assert (outcome.kind, outcome.stage) == (OutcomeKind.OPEN, "dispatched")


def test_another_tenants_records_never_touch_this_turn() -> None:
    """Issue 40, item 4: the same turn id under another tenant is another turn."""
    turn = fold()
    other = KEY.model_copy(update={"tenant": "globex"})
    assert not turn.apply(ledger(other))
    assert not turn.apply(result(other, output={"secret": "globex's"}))
    [outcome] = turn.outcomes()
    assert outcome.kind is OutcomeKind.OPEN and outcome.output is None
    with pytest.raises(ValueError, match="another turn"):
        turn.expect(other)


def test_only_the_named_executor_groups_result_counts() -> None:
    turn = fold(executor_group="g-2")
    assert not turn.apply(result(group="g-1"))
    assert turn.apply(result(group="g-2", output={"ref": "B"}))
    assert turn.outcomes()[0].output == {"ref": "B"}


def test_a_refused_binding_settles_every_undecided_call_rejected() -> None:
    turn = fold(binding_command_id="t-1.started")
    audit = Audit(
        audit_id="a-1",
        command_id="t-1.started",
        command_type="turn.started",
        issued_by="gateway",
        tenant="acme",
        reason="",
        outcome="rejected",
        rejection="actor_rebind",
        ts=1.0,
    )
    assert turn.apply(audit)
    [outcome] = turn.outcomes()
    assert (outcome.kind, outcome.reason, outcome.detail) == (
        OutcomeKind.REJECTED,
        "turn_binding_refused",
        "actor_rebind",
    )
    assert turn.binding_refused == "actor_rebind"


def test_records_are_decoded_strictly_and_anything_else_is_none() -> None:
    assert decode_outcome_record("ledger", encode(ledger())) == ledger()
    assert decode_outcome_record("results", encode(result())) == result()
    assert decode_outcome_record("results", encode(ledger())) is None  # wrong type
    assert decode_outcome_record("results", b"{not json") is None
    assert decode_outcome_record("results", None) is None
    assert decode_outcome_record("dispatch", encode(ledger())) is None


def test_what_the_reader_does_not_know_is_never_told_as_not_run() -> None:
    """A ledger state this version does not know leaves the call open; a results outcome it
    does not know is ``unknown`` (it may have acted)."""
    turn = fold()
    assert not turn.apply(ledger(state="parked", reason="something_new"))
    assert turn.outcomes()[0].kind is OutcomeKind.OPEN
    odd = result().model_copy(update={"outcome": "interrupted"})  # a newer executor's outcome
    assert turn.apply(odd)
    assert turn.outcomes()[0].kind is OutcomeKind.UNKNOWN


def test_expect_takes_a_tees_call_started_events_or_keys_and_refuses_bare_call_ids() -> None:
    """A bare call id is not a call's identity (never key by call id alone): refused, rather
    than ignored and waited out at the bound."""
    followed = FollowedTurn(TurnOutcomes("acme", "t-1"), OutcomeFollower(Settings()))
    base = {**KEY.model_dump(), "provider": "anthropic", "ts": 1.0}
    events = [
        CallStarted(**base, event_id="e-0", tool="get_weather", actor="user-1"),
        CallDelta(**base, event_id="e-1", seq=1, delta="{}"),
        CallEnded(**base, event_id="e-2", seq=2, terminal_event_id="t-2"),
    ]
    followed.expect(events)  # the deltas and ends a tee also publishes are skipped
    [outcome] = followed.report().outcomes
    assert (outcome.key.call_id, outcome.called_as, outcome.kind) == (
        "c-1",
        "get_weather",
        OutcomeKind.OPEN,
    )
    with pytest.raises(TypeError, match="CallKeys"):
        followed.expect(["c-1"])
