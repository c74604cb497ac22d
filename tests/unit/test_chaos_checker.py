"""The chaos checker judges: each defect it looks for, planted in clean outputs, is reported.

Without these, a checker that always said "ok" would make the chaos runs tests that cannot fail.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from tests.chaos.checker import Verdict, judge
from tests.chaos.effects import arguments_digest
from tests.chaos.executors import (
    BATCH_RUNNING,
    ExecutionVerdict,
    Executors,
    judge_executions,
    peak_running,
    status_id_of,
)
from tests.chaos.faults import Fault, FaultKind
from tests.chaos.workload import Expect, Fate, Plan

Rec = tuple[int, float, dict[str, Any]]
_USER = {"dispatched": "dispatched", "user_stop": "cancelled"}


def _plan() -> Plan:
    plan = Plan.generate(seed=3, count=60)
    for turn in plan.turns:
        turn.acked = True
    return plan


def _proposals(plan: Plan) -> list[Rec]:
    """The proposal of every call of a confirming turn."""
    return [
        (0, 1.0, {"tenant": t.tenant, "turn_id": t.turn_id, "call_id": c})
        for t in plan.turns
        if t.fate.confirming
        for c in t.call_ids
    ]


def _clean(plan: Plan) -> tuple[list[Rec], list[Rec], list[Rec], list[Rec], list[str]]:
    """The outputs a correct processor would write for the plan."""
    dispatch: list[Rec] = []
    ledger: list[Rec] = []
    status: list[Rec] = []
    audit: list[Rec] = []
    cancels: list[str] = []
    reason_of = {
        Fate.NORMAL: "dispatched",
        Fate.LATE_BINDING: "dispatched",
        Fate.CANCEL_BEFORE_TERMINAL: "user_stop",
        Fate.CANCEL_BETWEEN_TERMINALS: "user_stop",
        Fate.TRUNCATED_CLOSED: "incomplete",
        Fate.SCHEMA_INVALID: "schema_invalid",
        Fate.CONFIRMED: "dispatched",
        Fate.DENIED: "confirmation_denied",
        Fate.CANCEL_BEFORE_CONFIRM: "user_stop",
    }
    arguments = plan.arguments()
    for turn in plan.turns:
        cancelling = (Fate.CANCEL_BEFORE_TERMINAL, Fate.CANCEL_BETWEEN_TERMINALS)
        if turn.fate in (*cancelling, Fate.CANCEL_BEFORE_CONFIRM):
            cancels.append(f"chaos-cancel-{turn.turn_id}")
            audit.append((0, 1.0, {"command_id": cancels[-1], "outcome": "applied"}))
        if turn.fate is Fate.TRUNCATED_OPEN:
            continue
        for call in turn.call_ids:
            k = {"tenant": turn.tenant, "turn_id": turn.turn_id, "call_id": call}
            reason = reason_of[turn.fate]
            state = {"dispatched": "dispatched", "user_stop": "cancelled"}.get(reason, "failed")
            ledger.append((0, 1.0, {**k, "state": state, "terminal_reason": reason}))
            status.append((0, 1.0, {**k, "state": _USER.get(reason, "failed")}))
            if state == "dispatched":
                args = arguments[(turn.tenant, turn.turn_id, call)]
                dispatch_id = f"d-{turn.turn_id}-{call}"
                dispatch.append((0, 1.0, {**k, "arguments": args, "dispatch_id": dispatch_id}))
    return dispatch, ledger, status, audit, cancels


def _first(plan: Plan, expect: Expect) -> tuple[str, str, str]:
    return next(k for k, e in sorted(plan.expectations().items()) if e is expect)


def test_clean_outputs_pass() -> None:
    plan = _plan()
    dispatch, ledger, status, audit, cancels = _clean(plan)
    verdict = judge(plan, [], cancels, dispatch, ledger, audit, status, proposals=_proposals(plan))
    assert verdict.ok, verdict.summary()
    assert verdict.dispatched == verdict.must_dispatch > 0
    assert verdict.expired == [] and verdict.proposals_missing == 0


def test_a_transaction_left_open_fails_the_run() -> None:
    """A hanging transaction holds every read_committed reader of its partition: whatever the
    outputs read before it say, the run fails and names it."""
    plan = _plan()
    dispatch, ledger, status, audit, cancels = _clean(plan)
    verdict = judge(plan, [], cancels, dispatch, ledger, audit, status, proposals=_proposals(plan))
    verdict.open_transactions = [("x.dispatch-3", 1000, 42)]
    assert not verdict.ok
    assert verdict.summary()["open_transactions"] == [("x.dispatch-3", 1000, 42)]


@pytest.mark.parametrize(
    "defect",
    [
        "lost",
        "duplicated",
        "unsafe",
        "wrong_arguments",
        "status",
        "reason",
        "unaudited",
        "ledger_without_dispatch",
        "dispatch_without_ledger",
        "proposal_lost",
        "proposal_timeout",
    ],
)
def test_each_planted_defect_is_reported(defect: str) -> None:
    plan = _plan()
    dispatch, ledger, status, audit, cancels = _clean(plan)
    once = _first(plan, Expect.ONCE)
    never = next(k for (_, _, r) in ledger if r["state"] == "cancelled" for k in [_key(r)])
    proposals = _proposals(plan)
    timeouts: list[tuple[str, str, str]] = []

    def is_once(r: Rec) -> bool:
        return _key(r[2]) == once

    if defect == "lost":
        dispatch = [r for r in dispatch if not is_once(r)]
        ledger = [r for r in ledger if not is_once(r)]
        status = [r for r in status if not is_once(r)]
    elif defect == "duplicated":
        dispatch.append(next(r for r in dispatch if is_once(r)))
    elif defect == "unsafe":
        dispatch.append((0, 1.0, {**_fields(never), "arguments": {}}))
    elif defect == "wrong_arguments":
        dispatch = [
            (p, t, {**r, "arguments": {"city": "x"}}) if is_once((p, t, r)) else (p, t, r)
            for p, t, r in dispatch
        ]
    elif defect == "status":
        status.append((0, 2.0, {**_fields(never), "state": "dispatched"}))
    elif defect == "reason":
        ledger.append((0, 2.0, {**_fields(never), "state": "failed", "terminal_reason": "x"}))
        status = [r for r in status if _key(r[2]) != never]
        status.append((0, 2.0, {**_fields(never), "state": "failed"}))
    elif defect == "unaudited":
        audit = audit[1:]
    elif defect == "ledger_without_dispatch":  # one transaction wrote both: one is gone
        dispatch = [r for r in dispatch if not is_once(r)]
    elif defect == "dispatch_without_ledger":
        ledger = [
            (p, t, {**r, "state": "failed", "terminal_reason": "dispatched"})
            if is_once((p, t, r))
            else (p, t, r)
            for p, t, r in ledger
        ]
    elif defect == "proposal_lost":  # the gateway saw it, the topic no longer holds it
        proposals = proposals[1:]
    elif defect == "proposal_timeout":
        timeouts.append(_key(proposals[0][2]))
    verdict = judge(
        plan,
        [],
        cancels,
        dispatch,
        ledger,
        audit,
        status,
        proposals=proposals,
        proposal_timeouts=timeouts,
    )
    assert not verdict.ok
    summary = verdict.summary()
    field = {
        "lost": "lost",
        "duplicated": "duplicated",
        "unsafe": "unsafe",
        "wrong_arguments": "wrong_arguments",
        "status": "status_mismatch",
        "reason": "wrong_reason",
        "unaudited": "cancels_unaudited",
        "ledger_without_dispatch": "ledger_mismatch",
        "dispatch_without_ledger": "ledger_mismatch",
        "proposal_lost": "proposals_missing",
        "proposal_timeout": "proposals_missing",
    }[defect]
    assert summary[field] >= 1, summary
    if defect not in ("ledger_without_dispatch", "dispatch_without_ledger"):
        assert summary[field] == 1, summary
    if defect == "lost":  # the report says what the ledger held of it (here: nothing)
        assert [d["ledger"] for d in summary["lost_details"]] == [[]]
    if defect == "status":  # the report says where the records are, to find them in the log
        (detail,) = summary["status_details"]
        assert detail["call"] == never and "dispatched" in [s[3] for s in detail["status"]]


def test_a_duplicate_dispatch_id_is_counted_on_the_topic() -> None:
    plan = _plan()
    dispatch, ledger, status, audit, cancels = _clean(plan)
    dispatch.append(dispatch[0])  # the same record twice: an aborted batch made visible
    verdict = judge(plan, [], cancels, dispatch, ledger, audit, status)
    assert not verdict.ok
    assert verdict.duplicate_dispatch_ids == 1 and len(verdict.duplicated) == 1


WAIT = 30.0  # the worker's binding wait (Limits.binding_wait_seconds)
FAULTS = [Fault(FaultKind.KILL, 10.0, 0, happened_at=1.0, back_at=2.0)]


def _denied(plan: Plan, fate: Fate) -> tuple[tuple[str, str, str], Verdict]:
    """The outputs of a run with a fault in which every call of the first ``fate`` turn ended
    ``permission_denied`` instead of being dispatched (the worker gave up on its binding)."""
    dispatch, ledger, status, audit, cancels = _clean(plan)
    turn = next(t for t in plan.turns if t.fate is fate)
    calls = {(turn.tenant, turn.turn_id, c) for c in turn.call_ids}

    def mine(r: Rec) -> bool:
        return _key(r[2]) in calls

    dispatch = [r for r in dispatch if not mine(r)]
    ledger = [r for r in ledger if not mine(r)]
    status = [r for r in status if not mine(r)]
    for k in sorted(calls):
        ledger.append(
            (0, 2.0, {**_fields(k), "state": "failed", "terminal_reason": "permission_denied"})
        )
        status.append((0, 2.0, {**_fields(k), "state": "failed"}))
    verdict = judge(
        plan,
        FAULTS,
        cancels,
        dispatch,
        ledger,
        audit,
        status,
        proposals=_proposals(plan),
        binding_wait=WAIT,
    )
    return min(calls), verdict


@pytest.mark.parametrize("fate", [Fate.NORMAL, Fate.CONFIRMED, Fate.LATE_BINDING])
def test_a_binding_forgotten_under_a_fault_is_lost_not_expired(fate: Fate) -> None:
    """A call that had to dispatch and ended permission_denied in a run with faults, whose
    binding was written in time (a late-bound turn bound 1 s after its stream): lost."""
    plan = _plan()
    for turn in plan.turns:
        if turn.fate is Fate.LATE_BINDING:
            turn.stream_at, turn.bound_at = 100.0, 101.0
    call, verdict = _denied(plan, fate)
    assert not verdict.ok
    assert call in verdict.lost and verdict.expired == [], verdict.summary()


def test_a_late_bound_turn_whose_binding_arrived_after_the_wait_is_expired() -> None:
    plan = _plan()
    turn = next(t for t in plan.turns if t.fate is Fate.LATE_BINDING)
    turn.stream_at, turn.bound_at = 100.0, 100.0 + WAIT + 5  # the bind waited out a fault
    call, verdict = _denied(plan, Fate.LATE_BINDING)
    assert verdict.ok, verdict.summary()
    assert call in verdict.expired and verdict.lost == [] and verdict.wrong_reason == []


def _key(r: dict[str, Any]) -> tuple[str, str, str]:
    return (r["tenant"], r["turn_id"], r["call_id"])


def _fields(k: tuple[str, str, str]) -> dict[str, str]:
    return {"tenant": k[0], "turn_id": k[1], "call_id": k[2]}


# ------------------------------------------------------------------ the executors' verdict

GROUP = "g"


def _executions() -> tuple[list[dict[str, Any]], ...]:
    """Three dispatches, run and reported as a correct executor group would: the first
    succeeded, the second was interrupted after its side effect (unknown), the third refused."""
    dispatch, results, entries, effects, status = [], [], [], [], []
    outcomes = ["succeeded", "unknown", "refused"]
    for n, outcome in enumerate(outcomes):
        key = {
            "tenant": "t",
            "turn_id": f"u{n}",
            "response_id": "r",
            "item_id": "i",
            "call_id": "c",
        }
        arguments = {"n": n, "city": "Oslo"}
        dispatch.append({**key, "dispatch_id": f"d{n}", "arguments": arguments})
        reason = "user_stop" if outcome == "refused" else None
        result = {**key, "dispatch_id": f"d{n}", "executor_group": GROUP, "outcome": outcome}
        results.append({**result, "reason": reason})
        if outcome != "refused":  # a refusal is the first entry; a claim comes before a run
            entries.append({"group": GROUP, "dispatch_id": f"d{n}", "state": "claimed"})
        entries.append({"group": GROUP, "dispatch_id": f"d{n}", "state": outcome})
        for entry in entries[-2:]:
            entry.setdefault("_time", 100.0 + n + 0.1 * (entry["state"] != "claimed"))
        if outcome != "refused":
            effects.append(
                {"dispatch_id": f"d{n}", "pid": 1, "arguments": arguments_digest(arguments)}
            )
        status_id = status_id_of({**result, "reason": reason}, GROUP)
        if status_id is not None:
            status.append({**key, "status_id": status_id})
    return dispatch, results, entries, effects, status


def _judge(parts: tuple[list[dict[str, Any]], ...]) -> ExecutionVerdict:
    return judge_executions(*parts, GROUP)


def test_clean_executions_are_ok() -> None:
    verdict = _judge(_executions())
    assert verdict.ok, verdict.summary()
    assert verdict.outcomes == {"succeeded": 1, "unknown": 1, "refused": 1}
    assert len(verdict.status_ids) == 2  # unknown and refused write a status; succeeded none


@pytest.mark.parametrize(
    ("plant", "finding"),
    [
        (lambda d, r, e, x, s: x.append(dict(x[0])), "executed_twice"),
        (lambda d, r, e, x, s: x.append({**x[0], "dispatch_id": "d9"}), "executed_undispatched"),
        (lambda d, r, e, x, s: x[0].update(arguments="0" * 64), "wrong_arguments"),
        (lambda d, r, e, x, s: r.pop(0), "unreported"),
        (lambda d, r, e, x, s: r.append(dict(r[1])), "reported_twice"),
        (lambda d, r, e, x, s: x.pop(0), "outcome_wrong"),  # succeeded without its effect
        (lambda d, r, e, x, s: x.append({**x[0], "dispatch_id": "d2"}), "outcome_wrong"),
        (lambda d, r, e, x, s: e.pop(3), "claims_unended"),  # d1 claimed, never ended
        (lambda d, r, e, x, s: s.pop(), "status_missing"),
    ],
)
def test_each_execution_defect_is_reported(plant: Any, finding: str) -> None:
    parts = _executions()
    plant(*parts)
    verdict = _judge(parts)
    assert not verdict.ok
    assert verdict.summary()[finding] >= 1, verdict.summary()


def test_a_call_cancelled_before_its_claim_must_not_run() -> None:
    parts = _executions()
    # d2 was cancelled before the group's first entry of it (its refusal, at 102.1): fenced
    verdict = judge_executions(*parts, GROUP, {("t", "u2"): 101.5})
    assert verdict.ok and verdict.fenced == 1, verdict.summary()
    # a cancellation after d0's claim (at 100.0): running it was allowed
    verdict = judge_executions(*parts, GROUP, {("t", "u0"): 100.05})
    assert verdict.ok and verdict.fenced == 0, verdict.summary()
    # d0 ran although its turn was cancelled before its claim
    verdict = judge_executions(*parts, GROUP, {("t", "u0"): 99.5})
    assert not verdict.ok and verdict.ran_after_cancel == ["d0"], verdict.summary()


def _batch_killed() -> tuple[tuple[list[dict[str, Any]], ...], Fault]:
    """A batch of five claims of member ``x0-1`` (pid 11) committed at 100.0; three of their
    handlers ran (side effects at 100.1, returning at 100.4) when the member was killed at
    100.2; ``x1-1`` took the partition over and reported all five ``unknown``."""
    dispatch, results, entries, effects, status = [], [], [], [], []
    for n in range(5):
        key = {"tenant": "t", "turn_id": f"u{n}", "response_id": "r", "item_id": "i"}
        key["call_id"] = "c"
        arguments = {"n": n}
        dispatch.append({**key, "dispatch_id": f"d{n}", "arguments": arguments})
        claim = {"group": GROUP, "dispatch_id": f"d{n}", "executor_id": "x0-1", "ts": 100.0}
        entries.append({**claim, "state": "claimed", "_time": 100.0})
        entries.append({**claim, "state": "unknown", "executor_id": "x1-1", "ts": 112.0})
        result = {**key, "dispatch_id": f"d{n}", "executor_group": GROUP, "outcome": "unknown"}
        result.update(reason="executor_interrupted", executor_id="x1-1", ts=112.0)
        results.append(result)
        status.append({**key, "status_id": status_id_of(result, GROUP)})
        if n < 3:
            digest = arguments_digest(arguments)
            effects.append(
                {"dispatch_id": f"d{n}", "pid": 11, "arguments": digest, "at": 100.1, "ends": 100.4}
            )
    kill = Fault(FaultKind.KILL, 40.0, 0, happened_at=100.2, worker="x0-1", role="executor")
    kill.pid = 11
    return (dispatch, results, entries, effects, status), kill


def test_a_kill_is_told_with_the_batch_of_claims_it_landed_on() -> None:
    parts, kill = _batch_killed()
    verdict = judge_executions(*parts, GROUP, None, [kill])
    assert verdict.ok, verdict.summary()
    assert verdict.at_faults == [
        {
            "kind": "kill",
            "member": "x0-1",
            "at": 40.0,
            "claims_open": 5,
            "in_flight": 3,
            "running": 3,
            "claimed_not_started": 2,
            "ended": {"unknown (executor_interrupted)": 5},
        }
    ]
    assert verdict.peak_running == 3
    # every call of the batch is judged: one claim left open, one unreported, one run again
    d, r, e, x, s = parts
    e.pop(3)  # d1's end
    r.pop(4)  # d4's result
    x.append({**x[2], "pid": 12, "at": 113.0, "ends": 113.1})  # d2 run again by the new owner
    verdict = judge_executions(d, r, e, x, s, GROUP, None, [kill])
    assert (verdict.claims_unended, verdict.unreported, verdict.executed_twice) == (
        ["d1"],
        ["d4"],
        ["d2"],
    )
    assert verdict.at_faults[0]["ended"] == {
        "unknown (executor_interrupted)": 4,
        "unreported": 1,
    }


def test_a_member_faulted_again_holds_none_of_what_the_last_fault_left() -> None:
    """A stopped member keeps its id and pid: the batch another member reported ``unknown``
    after the first fault is not held at the second (a term, nothing claimed since)."""
    parts, stop = _batch_killed()
    stop.kind = FaultKind.STOP
    term = Fault(FaultKind.TERM, 60.0, 0, happened_at=120.0, worker="x0-1", role="executor")
    term.pid = 11
    verdict = judge_executions(*parts, GROUP, None, [stop, term])
    assert verdict.ok, verdict.summary()
    assert [(f["kind"], f["claims_open"], f["in_flight"]) for f in verdict.at_faults] == [
        ("stop", 5, 3),
        ("term", 0, 0),
    ]


def test_peak_running_counts_one_process_s_handlers_at_once() -> None:
    effects = [
        {"pid": 1, "at": 0.0, "ends": 0.5},
        {"pid": 1, "at": 0.1, "ends": 0.2},
        {"pid": 1, "at": 0.2, "ends": 0.3},  # begins as the second returns: not at once
        {"pid": 2, "at": 0.15, "ends": 0.4},  # another process: not counted with pid 1
    ]
    assert peak_running(effects) == 2
    effects.append({"pid": 1, "at": 0.25, "ends": 0.6})
    assert peak_running(effects) == 3


def test_a_kill_waits_for_a_member_inside_a_batch_of_handlers(tmp_path: Path) -> None:
    """The kill's target is the member running BATCH_RUNNING handlers, not the first one seen
    running any, and handlers that began before the wait count."""
    now = time.time()
    lines = [{"dispatch_id": "a", "pid": 101, "at": now, "ends": now + 30}]
    lines += [
        {"dispatch_id": f"b{n}", "pid": 202, "at": now, "ends": now + 30}
        for n in range(BATCH_RUNNING)
    ]
    lines.append({"dispatch_id": "c", "pid": 202, "at": now - 1, "ends": now - 0.5})  # returned
    effects = tmp_path / "effects.jsonl"
    effects.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    executors = Executors(cast(Any, SimpleNamespace(prefix="p.")), effects)
    members = [cast(Any, SimpleNamespace(proc=SimpleNamespace(pid=p))) for p in (101, 202)]
    assert asyncio.run(executors.inside_handler(members, timeout=1.0)) == 1


def test_a_call_reported_twice_is_told_with_each_outcome_and_its_writer() -> None:
    """A zombie member's late ``succeeded`` after the new owner's ``unknown`` (chaos seed 22 on
    three brokers): the finding names both results and the members that wrote them."""
    parts, kill = _batch_killed()
    _, results, _, _, _ = parts
    results.append({**results[0], "outcome": "succeeded", "reason": None, "executor_id": "x0-1"})
    verdict = judge_executions(*parts, GROUP, None, [kill])
    assert verdict.reported_twice == [
        "d0: unknown (executor_interrupted) by x1-1, succeeded (None) by x0-1"
    ]
    assert not verdict.ok
    # the first result's status is still the group's: the worker checker leaves it alone
    # (it counted it a status mismatch of the worker's when only the last result was looked at)
    assert status_id_of(results[0], GROUP) in verdict.status_ids
    assert verdict.status_missing == []
