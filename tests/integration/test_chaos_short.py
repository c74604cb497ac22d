"""The chaos suite's short run, in ``make test``: the seeded load with worker faults, judged.

Two workers, six partitions, 300 turns written over 50 s through the real adapters, and three
worker faults during the load: SIGKILL, SIGTERM, and SIGSTOP past the session and transaction
timeouts (a zombie whose producer must be fenced). On the shared broker, so no broker fault here:
the long runs (``make chaos``) add ``kill -9`` of a broker of their own. See
``tests/chaos/__init__`` for the fates and ``tests/chaos/checker.py`` for what is judged.

The runs are driven side by side with the other selected slow scenarios
(``tests/side_by_side.py``): each test judges its own run's report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.chaos.faults import FaultKind
from tests.chaos.run import Options, Report, run
from tests.chaos.workload import WEIGHTS
from tests.side_by_side import SideBySide

pytestmark = pytest.mark.integration


async def _workers(workdir: Path, bootstrap: Callable[[], str]) -> Report:
    return await run(
        Options(
            seed=7,
            turns=300,
            duration=50.0,
            faults=3,
            kinds=[FaultKind.KILL, FaultKind.TERM, FaultKind.STOP],
            bootstrap=bootstrap(),
            workdir=workdir,
        )
    )


@pytest.mark.timeout(420)  # the first marked test waits for every selected scenario
@pytest.mark.side_by_side(scenario=_workers)
def test_short_chaos_run_loses_duplicates_and_leaks_nothing(side_by_side: SideBySide) -> None:
    report, tmp_path = side_by_side.value, side_by_side.workdir
    summary = report.verdict.summary()

    assert report.verdict.ok, str(summary)  # whole, with the details of what failed
    # nothing was excused: a late-bound call may expire only when its binding reached the log
    # after the binding wait (30 s), which no worker fault delays
    assert report.verdict.expired == [], summary
    assert report.verdict.must_dispatch > 100, summary  # the load was real
    assert report.verdict.ledger_reasons.get("user_stop", 0) > 50, summary  # cancels were too
    assert set(report.fates) == set(WEIGHTS), report.fates  # every fate a plan draws
    assert sorted(str(f.kind) for f in report.faults) == ["kill", "stop", "term"]
    assert all(f.happened_at > 0 and f.back_at >= f.happened_at for f in report.faults)
    # every fault was followed by dispatches again (the group recovered), whatever it took
    assert all(r["seconds"] is not None for r in report.verdict.recovery), report.verdict.recovery
    assert report.unexpected_exits == []

    # the workers' own logs: no processor error, and nothing the fence left unhandled
    lines = [orjson.loads(line) for log in tmp_path.glob("w*.log") for line in _lines(log)]
    assert len({log.name for log in tmp_path.glob("w*.log")}) >= 4  # restarts happened
    unhandled = [r["msg"][:120] for r in lines if "never retrieved" in r.get("msg", "")]
    assert unhandled == []
    errors = [
        (r["logger"], r["msg"][:120])
        for r in lines
        if r.get("level") in ("error", "critical") and r.get("logger", "").startswith("processor")
    ]
    assert errors == []


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.startswith(b"{")]


async def _executors(workdir: Path, bootstrap: Callable[[], str]) -> Report:
    return await run(
        Options(
            seed=8,  # its executor faults: term, kill, kill during the load; the stop last
            turns=150,
            duration=30.0,
            faults=0,  # the workers are left alone: the first run faults them
            bootstrap=bootstrap(),
            workdir=workdir,
            executors=2,
            executor_faults=4,
        )
    )


@pytest.mark.timeout(420)
@pytest.mark.side_by_side(scenario=_executors)
def test_short_chaos_run_with_executors_runs_each_dispatch_at_most_once(
    side_by_side: SideBySide,
) -> None:
    """Two executors of one group take the dispatches of the seeded load while they are
    killed (inside a handler, between its side effect and its outcome), stopped past their
    session timeout and terminated: no dispatch runs twice, every one is reported, and the
    one a kill interrupted is reported ``unknown``, never run again (tests.chaos.executors)."""
    report, tmp_path = side_by_side.value, side_by_side.workdir
    assert report.verdict.ok, report.verdict.summary()
    assert report.executions is not None
    summary = report.executions.summary()
    assert report.executions.ok, summary
    # cancel_after_end turns race the worker: their calls may be dispatched too
    assert summary["dispatched"] >= report.verdict.must_dispatch > 50, summary
    assert report.fates.get("cancel_after_end", 0) >= 5, report.fates
    # none of the calls whose cancellation was committed before the group claimed them ran.
    # How many there are is a race with the executors (none, when they are quick): that the
    # fence refuses such a call is shown deterministically in test_executor_fence.py
    # (test_control_written_before_execution_refuses_the_call), not counted here
    assert summary["ran_after_cancel"] == 0, summary
    assert summary["unreported"] == 0 and summary["executed_twice"] == 0, summary
    # a kill landed inside a handler: reported unknown by the member that took over
    assert summary["outcomes"].get("unknown", 0) >= 1, summary
    # every call not refused ran to its end, or is unknown because a kill (or a stop past the
    # session timeout) landed while it ran: handlers run side by side, so a kill interrupts
    # every call in flight then, not one (issue 39)
    refused = summary["outcomes"].get("refused", 0)
    unknown = summary["outcomes"].get("unknown", 0)
    succeeded = summary["outcomes"].get("succeeded", 0)
    assert succeeded + unknown >= summary["dispatched"] - refused - 5, summary
    assert set(summary["unknown"]) <= {"executor_interrupted", "executor_stopped"}, summary
    kinds = sorted({str(f.kind) for f in report.faults if f.role == "executor"})
    assert kinds == ["kill", "stop", "term"], report.faults
    assert report.unexpected_exits == []
    lines = [orjson.loads(line) for log in tmp_path.glob("x*.log") for line in _lines(log)]
    errors = [
        (r["logger"], r["msg"][:120])
        for r in lines
        if r.get("level") in ("error", "critical") and r.get("logger", "").startswith("processor")
    ]
    assert errors == []


async def _mcp_executors(workdir: Path, bootstrap: Callable[[], str]) -> Report:
    return await run(
        Options(
            seed=8,
            turns=150,
            duration=30.0,
            faults=0,
            bootstrap=bootstrap(),
            workdir=workdir,
            executors=2,
            executor_faults=4,
            executors_mcp=True,
        )
    )


@pytest.mark.timeout(420)
@pytest.mark.side_by_side(scenario=_mcp_executors)
def test_short_chaos_run_with_mcp_executors_runs_each_dispatch_at_most_once(
    side_by_side: SideBySide,
) -> None:
    """The same run with `processor executor mcp` members (``--executors-mcp``): every handler
    is a ``tools/call`` on a stdio MCP server (tests.chaos.mcp_effects) whose side effect is
    the line the checker reads. Killed inside a call, stopped, terminated: no dispatch runs
    twice, every one is reported, a kill mid-call is ``unknown`` and never run again."""
    report, tmp_path = side_by_side.value, side_by_side.workdir
    assert report.verdict.ok, report.verdict.summary()
    assert report.executions is not None
    summary = report.executions.summary()
    assert report.executions.ok, summary
    assert summary["dispatched"] >= report.verdict.must_dispatch > 50, summary
    # no call ran after its cancellation; whether a cancellation lands between a dispatch and its
    # claim here is a race the MCP member often wins (a fast stdio server): the fence refusing
    # one is proven without a race in test_executor_mcp.py (the server never sees the call)
    assert summary["ran_after_cancel"] == 0, summary
    assert summary["unreported"] == 0 and summary["executed_twice"] == 0, summary
    assert summary["outcomes"].get("unknown", 0) >= 1, summary
    logs = [log.read_text() for log in tmp_path.glob("x*.log")]
    assert logs and any("MCP session open" in log for log in logs)  # `executor mcp` members
    assert report.unexpected_exits == []
