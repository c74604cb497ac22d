"""The chaos suite's executors: one executor group, every tool handled, faults of its own.

A long or short chaos run with ``executors > 0`` starts that many ``processor executor run``
members next to the workers (one group, ``--tools`` the run's registry), and applies seeded
SIGKILL, SIGTERM and SIGSTOP faults to them as it does to workers (:mod:`tests.chaos.faults`).

Each handler (:mod:`tests.chaos.effects`) has one side effect: a line appended to a file
(``CHAOS_EFFECTS``) with the dispatch id, the member's pid and a digest of the arguments the
handler was given, written before the handler sleeps 0-500 ms (the line says when, and when the
sleep ends). Members run up to ``executor_max_in_flight`` (64) handlers at once, and claim each
fetch's calls in one transaction, so a fault lands on a batch of claims: several claimed, some
running. Each fault waits until a member is running :data:`BATCH_RUNNING` handlers at once (or,
after :data:`PATIENCE` seconds, any) and signals that one, so a SIGKILL lands between their side
effects and their recorded outcomes: what the at-most-once ledger must report ``unknown`` and
never run again, every call of the batch; a SIGSTOP makes a zombie of a member holding a batch,
and a SIGTERM's release must wait for the batch or report what it cut ``unknown``.

What :func:`judge_executions` finds, from that file and the ``dispatch``, ``results`` and
``executions`` topics, read once every member has stopped:

* **executed_twice**: a dispatch id whose handler ran more than once (any member, any life);
* **executed_undispatched**: a side effect for a dispatch id no dispatch record holds;
* **wrong_arguments**: a handler given arguments other than its dispatch record's;
* **unreported**: a dispatch of a handled tool with no result once the run settled;
* **reported_twice**: more than one result for one dispatch id;
* **outcome_wrong**: a result the side effects contradict: ``succeeded`` without one, or
  ``refused`` / ``failed`` with one (``unknown`` is right either way);
* **claims_unended**: a ledger entry still ``claimed`` when the run ended (no member took the
  call's interrupted claim over and reported it);
* **status_missing**: a result other than ``succeeded`` without the user status the group
  writes with it, in the same transaction (what the user is told must be what happened);
* **ran_after_cancel**: a handler that ran although its turn's ``turn.cancelled`` (the
  ``cancel_after_end`` fate of :mod:`tests.chaos.workload`) was written before the group's
  claim of the call. After the claim is committed the fence reads ``control`` up to where it
  ends *then*, and runs the handler only if the call is still allowed, so a cancellation
  written before the claim must stop it. Record times are compared (the broker's append time
  of the cancellation, the member's create time of the claim, written before its commit; one
  machine's clock) with a 10 ms margin. ``fenced`` counts the dispatches whose cancellation
  came before the group's first ledger entry of them (a claim or a refusal): each of them had
  to be refused, which shows the fence was put to the test.

Counted, not judged: results by outcome and refusal reasons (a fence that cannot read control
up to its barrier in time refuses, failing closed; under broker faults that is correct); the
most handlers one member ran at once (``peak_running``, from the side effects' times); and, for
each executor fault, what the faulted member held when the signal landed (``at_faults``): its
claims committed without an end (``claims_open``), the calls it had run with no outcome of its
yet (``in_flight``: side effect written, result not), those whose handler had not even returned
(``running``), the claims it had not started (``claimed_not_started``), and how the calls it
held ended (``ended``: outcome and reason, whoever reported them). The judged findings above
cover each of them: a batch of claims is restored and reported as one call is.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from processor.core.events import CallKey, stable_id
from processor.kafka.tail import read_records
from processor.settings import Settings
from tests.chaos.checker import read_topic
from tests.chaos.effects import arguments_digest
from tests.chaos.faults import Fault
from tests.integration.conftest import REPO_ROOT, Runtime, WorkerProcess

GROUP_SUFFIX = "chaos-executors"
CLOCK_MARGIN = 0.01  # seconds: record times of two topics, compared (one machine's clock)
BATCH_RUNNING = 4  # an executor fault waits for a member running this many handlers at once ...
PATIENCE = 6.0  # ... for at most this long (seconds), then takes one running any
KILL_MARGIN = 0.05  # seconds: a handler counts as running if its sleep ends later than this


@dataclass
class Executors:
    """The run's executor members: spawned, restarted, faulted like workers (``Cluster``)."""

    runtime: Runtime
    effects: Path
    group: str = ""
    generation: int = 0
    mcp: bool = False  # members run `processor executor mcp` on tests.chaos.mcp_effects

    @property
    def mcp_tools(self) -> Path:
        """The MCP members' registry: the run's, each tool pinned to the server's definition."""
        return self.runtime.tmp_path / "mcp-tools.yaml"

    def _mcp_command(self) -> str:
        return f"{sys.executable} -m tests.chaos.mcp_effects"

    async def prepare_mcp(self) -> None:
        """Write :attr:`mcp_tools` from the server's own listing (its definition digests)."""
        import yaml

        from processor.core.mcp_pins import McpPin
        from processor.mcp.connection import McpConnection, ServerSpec

        run_tools = self.runtime.env_settings["PROCESSOR_TOOLS_FILE"]
        env = {"CHAOS_TOOLS": run_tools, "CHAOS_EFFECTS": os.devnull}
        spec = ServerSpec(command=self._mcp_command(), env=env, cwd=str(REPO_ROOT))
        async with McpConnection(spec) as connection:
            digests = {d.name: d.digest for d in await connection.list_tools()}
            server = connection.server_name or ""
        doc = yaml.safe_load(Path(run_tools).read_text())
        for entry in doc["tools"]:
            pin = McpPin(
                server=server,
                digest=digests[entry["name"]],
                destructive=bool(entry.get("requires_confirmation", False)),
            )
            entry["mcp"] = pin.as_document()
        self.mcp_tools.write_text(yaml.safe_dump(doc, sort_keys=False))

    def __post_init__(self) -> None:
        self.group = f"{self.runtime.prefix}{GROUP_SUFFIX}"

    def spawn(self, slot: int, env: Mapping[str, str]) -> WorkerProcess:
        self.generation += 1
        name = f"x{slot}-{self.generation}"
        full = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
        full.update(self.runtime.env_settings)
        full.update(env)
        full["CHAOS_EFFECTS"] = str(self.effects)
        full["CHAOS_TOOLS"] = self.runtime.env_settings["PROCESSOR_TOOLS_FILE"]
        command: tuple[str, ...] = (
            "processor.executor",
            "run",
            "--handlers",
            "tests.chaos.effects:handlers",
            "--group",
            self.group,
            "--executor-id",
            name,
            "--tools",
            self.runtime.env_settings["PROCESSOR_TOOLS_FILE"],
            "--allow-unsigned-operators",  # the chaos load's operators do not sign
        )
        if self.mcp:  # the same group, its handler a tools/call on a stdio MCP server
            command = (
                "processor.cli",
                "executor",
                "mcp",
                "--server-command",
                self._mcp_command(),
                "--server-env",
                "CHAOS_EFFECTS",
                "--server-env",
                "CHAOS_TOOLS",
                "--call-timeout",
                "30",
                *command[4:],  # --group … --allow-unsigned-operators
            )
            command = tuple(str(self.mcp_tools) if c == full["CHAOS_TOOLS"] else c for c in command)
        member = WorkerProcess(name, full, self.runtime.tmp_path / f"{name}.log", command)
        self.runtime.workers.append(member)  # closed with the runtime, as workers are
        return member

    async def inside_handler(
        self, members: list[WorkerProcess], timeout: float = 10.0
    ) -> int | None:
        """The slot of a member inside a batch of handlers: the first seen running
        :data:`BATCH_RUNNING` or more at once (side effect written, sleep not over for another
        :data:`KILL_MARGIN`), or, after :data:`PATIENCE` seconds, the first running any. None
        after ``timeout`` (no member had anything to run: the planned one is killed all the
        same)."""
        pids = {member.proc.pid: slot for slot, member in enumerate(members)}
        ends: dict[int, list[float]] = {}  # pid → when each of its handlers seen will return
        size = self.effects.stat().st_size if self.effects.exists() else 0
        read_from = max(0, size - 256 * 1024)  # the handlers that began before this call too
        skip_partial = read_from > 0
        loop = asyncio.get_running_loop()
        begun = loop.time()
        while loop.time() < begun + timeout:
            if self.effects.exists():
                with self.effects.open("rb") as f:  # only what was appended since (whole lines)
                    f.seek(read_from)
                    new = f.read()
                whole = new[: new.rfind(b"\n") + 1]
                read_from += len(whole)
                lines = whole.splitlines()
                if skip_partial and lines:  # the first line read may be the tail of one
                    lines, skip_partial = lines[1:], False
                for line in lines:
                    effect = orjson.loads(line)
                    ends.setdefault(effect["pid"], []).append(effect["ends"])
            now = time.time()
            running = {
                pid: len([e for e in ends.get(pid, ()) if e > now + KILL_MARGIN]) for pid in pids
            }
            pid, most = max(running.items(), key=lambda item: item[1], default=(0, 0))
            if most >= BATCH_RUNNING or (most and loop.time() >= begun + PATIENCE):
                return pids[pid]
            await asyncio.sleep(0.003)
        return None


@dataclass
class ExecutionVerdict:
    dispatched: int = 0
    executed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    refusals: dict[str, int] = field(default_factory=dict)  # refused results by code
    unknown: dict[str, int] = field(default_factory=dict)  # unknown results by reason
    executed_twice: list[str] = field(default_factory=list)
    executed_undispatched: list[str] = field(default_factory=list)
    wrong_arguments: list[str] = field(default_factory=list)
    unreported: list[str] = field(default_factory=list)
    reported_twice: list[str] = field(default_factory=list)
    outcome_wrong: list[str] = field(default_factory=list)
    claims_unended: list[str] = field(default_factory=list)
    status_missing: list[str] = field(default_factory=list)
    ran_after_cancel: list[str] = field(default_factory=list)
    fenced: int = 0  # dispatches cancelled before the group's first entry of them: never run
    max_in_flight: int = 0  # the members' executor_max_in_flight
    peak_running: int = 0  # the most handlers one member ran at once (side effects' times)
    at_faults: list[dict[str, Any]] = field(default_factory=list)  # see the module docstring
    status_ids: frozenset[str] = frozenset()  # the group's status records (the checker skips)

    @property
    def ok(self) -> bool:
        return not (
            self.executed_twice
            or self.executed_undispatched
            or self.wrong_arguments
            or self.unreported
            or self.reported_twice
            or self.outcome_wrong
            or self.claims_unended
            or self.status_missing
            or self.ran_after_cancel
        )

    def summary(self) -> dict[str, Any]:
        return {
            "dispatched": self.dispatched,
            "executed": self.executed,
            "outcomes": self.outcomes,
            "refusals": self.refusals,
            "unknown": self.unknown,
            "executed_twice": len(self.executed_twice),
            "executed_undispatched": len(self.executed_undispatched),
            "wrong_arguments": len(self.wrong_arguments),
            "unreported": len(self.unreported),
            "reported_twice": len(self.reported_twice),
            "outcome_wrong": len(self.outcome_wrong),
            "claims_unended": len(self.claims_unended),
            "status_missing": len(self.status_missing),
            "ran_after_cancel": len(self.ran_after_cancel),
            "fenced": self.fenced,
            "max_in_flight": self.max_in_flight,
            "peak_running": self.peak_running,
            "at_faults": self.at_faults,
            "examples": {
                name: getattr(self, name)[:3]
                for name in (
                    "executed_twice",
                    "executed_undispatched",
                    "wrong_arguments",
                    "unreported",
                    "reported_twice",
                    "outcome_wrong",
                    "claims_unended",
                    "status_missing",
                    "ran_after_cancel",
                )
                if getattr(self, name)
            },
        }


def read_effects(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def status_id_of(result: dict[str, Any], group: str) -> str | None:
    """The id of the user status an executor writes with a result (None for ``succeeded``):
    ``stable_id("status", call key, "executor", group, why)``, why being ``unknown``, the
    refusal code, or the failure code (``failed`` without one)."""
    why = {
        "unknown": "unknown",
        "refused": result.get("reason"),
        "failed": result.get("reason") or "failed",
    }.get(result["outcome"])
    if why is None:
        return None
    key = CallKey(**{f: result[f] for f in CallKey.model_fields})
    return stable_id("status", key.encoded(), "executor", group, why)


def judge_executions(
    dispatch: list[dict[str, Any]],
    results: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    effects: list[dict[str, Any]],
    status: list[dict[str, Any]],
    group: str,
    cancelled_at: Mapping[tuple[str, str], float] | None = None,
    faults: Sequence[Fault] = (),
) -> ExecutionVerdict:
    """``entries`` (the ``executions`` ledger) carry their record time as ``_time`` (seconds)
    when ``cancelled_at`` (turn key → earliest ``turn.cancelled`` record time) is given.
    ``faults``: the executor faults applied (member, pid, signal time), for ``at_faults``."""
    verdict = ExecutionVerdict()
    arguments = {d["dispatch_id"]: arguments_digest(d["arguments"]) for d in dispatch}
    verdict.dispatched = len(arguments)
    ran = Counter(e["dispatch_id"] for e in effects)
    verdict.executed = len(ran)
    verdict.executed_twice = sorted(i for i, n in ran.items() if n > 1)
    verdict.executed_undispatched = sorted(i for i in ran if i not in arguments)
    verdict.wrong_arguments = sorted(
        {
            e["dispatch_id"]
            for e in effects
            if e["dispatch_id"] in arguments and e["arguments"] != arguments[e["dispatch_id"]]
        }
    )
    mine = [r for r in results if r.get("executor_group") == group]
    reported = Counter(r["dispatch_id"] for r in mine)
    verdict.reported_twice = sorted(  # each with its outcomes and who wrote them, in log order
        f"{i}: "
        + ", ".join(
            f"{r['outcome']} ({r.get('reason')}) by {r.get('executor_id')}"
            for r in mine
            if r["dispatch_id"] == i
        )
        for i, n in reported.items()
        if n > 1
    )
    verdict.unreported = sorted(i for i in arguments if i not in reported)
    verdict.outcomes = dict(Counter(r["outcome"] for r in mine))
    verdict.refusals = dict(
        Counter(str(r.get("reason")) for r in mine if r["outcome"] == "refused")
    )
    verdict.unknown = dict(Counter(str(r.get("reason")) for r in mine if r["outcome"] == "unknown"))
    for r in mine:
        effect = r["dispatch_id"] in ran
        if (r["outcome"] == "succeeded" and not effect) or (
            r["outcome"] in ("refused", "failed") and effect
        ):
            verdict.outcome_wrong.append(f"{r['dispatch_id']}: {r['outcome']}, effect={effect}")
    last: dict[str, str] = {}  # the ledger is compacted by [group, dispatch id]: the last wins
    for entry in entries:
        if entry.get("group") == group:
            last[entry["dispatch_id"]] = entry["state"]
    verdict.claims_unended = sorted(i for i, state in last.items() if state == "claimed")
    written = {s["status_id"] for s in status}
    # every result's status, not the last per dispatch: a dispatch reported twice (unknown,
    # then a zombie's succeeded) has the first one's status on the topic, the group's own
    expected = [(r["dispatch_id"], status_id_of(r, group)) for r in mine]
    verdict.status_ids = frozenset(i for _, i in expected if i is not None)
    verdict.status_missing = sorted({d for d, i in expected if i is not None and i not in written})
    first: dict[str, float] = {}  # the group's first ledger entry of each dispatch (claim/refusal)
    claimed: dict[str, float] = {}
    for entry in entries:
        if entry.get("group") == group and cancelled_at:
            i, at = entry["dispatch_id"], entry["_time"]
            first[i] = min(first.get(i, math.inf), at)
            if entry["state"] == "claimed":
                claimed[i] = min(claimed.get(i, math.inf), at)
    for d in dispatch:
        cancelled = (cancelled_at or {}).get((d["tenant"], d["turn_id"]))
        i = d["dispatch_id"]
        if cancelled is None:
            continue
        if cancelled < first.get(i, -math.inf) - CLOCK_MARGIN:
            verdict.fenced += 1
        if i in ran and cancelled < claimed.get(i, math.inf) - CLOCK_MARGIN:
            verdict.ran_after_cancel.append(i)
    verdict.peak_running = peak_running(effects)
    final = {r["dispatch_id"]: f"{r['outcome']} ({r.get('reason')})" for r in mine}
    verdict.at_faults = [
        held_at(fault, entries, mine, effects, group, final)
        for fault in faults
        if fault.role == "executor"
    ]
    return verdict


def peak_running(effects: list[dict[str, Any]]) -> int:
    """The most handlers one process ran at once: side effect (``at``) to return (``ends``)."""
    peak = 0
    for pid in {e["pid"] for e in effects}:
        edges = sorted(
            (t, step)
            for e in effects
            if e["pid"] == pid and "at" in e
            for t, step in ((e["at"], 1), (e["ends"], -1))
        )  # at equal times the return (-1) sorts first: back to back is not at once
        running = 0
        for _, step in edges:
            running += step
            peak = max(peak, running)
    return peak


def held_at(
    fault: Fault,
    entries: list[dict[str, Any]],
    results: list[dict[str, Any]],
    effects: list[dict[str, Any]],
    group: str,
    final: Mapping[str, str],
) -> dict[str, Any]:
    """What the faulted member held when the signal landed (``fault.happened_at``), by the
    times its records carry (``ts``, taken before their transaction commits) and its side
    effects' (``at``, ``ends``); only committed records are read, so a claim whose commit the
    signal stopped was never one.

    A call another member ended or reported before the signal is not held, though this member
    claimed or ran it: a member stopped (SIGSTOP) keeps its id and pid, and the calls it held at
    that stop, reported ``unknown`` by the next owner, were counted again at its next fault
    (seed 23: a term on a member holding 4 calls was told as 18, 14 of them ``unknown``)."""
    t, member = fault.happened_at, fault.worker
    claimed: set[str] = set()
    ended: set[str] = set()
    for e in entries:
        if e.get("group") != group or e["ts"] >= t:
            continue
        if e["state"] != "claimed":  # ended by any member
            ended.add(e["dispatch_id"])
        elif e.get("executor_id") == member:
            claimed.add(e["dispatch_id"])
    claims_open = claimed - ended
    reported = {r["dispatch_id"] for r in results if r["ts"] < t}  # by any member
    mine = [e for e in effects if e["pid"] == fault.pid and e.get("at", math.inf) < t]
    in_flight = {e["dispatch_id"] for e in mine} - reported
    running = {e["dispatch_id"] for e in mine if e["ends"] > t} - reported
    held = claims_open | in_flight
    return {
        "kind": str(fault.kind),
        "member": member,
        "at": round(fault.at, 1),
        "claims_open": len(claims_open),
        "in_flight": len(in_flight),
        "running": len(running),
        "claimed_not_started": len(claims_open - {e["dispatch_id"] for e in mine}),
        "ended": dict(Counter(final.get(i, "unreported") for i in held)),
    }


async def check_executions(
    settings: Settings, effects: Path, group: str, faults: Sequence[Fault] = ()
) -> ExecutionVerdict:
    dispatch = [value for _, _, value in await read_topic(settings, "dispatch")]
    cancelled_at: dict[tuple[str, str], float] = {}
    async for r in read_records(settings, settings.topics.control):
        value = orjson.loads(r.value)
        if value.get("type") == "turn.cancelled":
            turn = (value["tenant"], value["turn_id"])
            cancelled_at[turn] = min(cancelled_at.get(turn, math.inf), r.timestamp / 1000)
    results = [orjson.loads(r.value) async for r in read_records(settings, settings.topics.results)]
    entries = [
        {**orjson.loads(r.value), "_time": r.timestamp / 1000}
        async for r in read_records(settings, settings.topics.executions)
    ]
    status = [value for _, _, value in await read_topic(settings, "status")]
    verdict = judge_executions(
        dispatch, results, entries, read_effects(effects), status, group, cancelled_at, faults
    )
    verdict.max_in_flight = settings.executor_max_in_flight
    return verdict


async def settle_executions(settings: Settings, group: str, timeout: float) -> None:
    """Wait until every dispatch id has a result of the group (or the timeout: the verdict
    then names what is unreported)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        dispatched = {v["dispatch_id"] for _, _, v in await read_topic(settings, "dispatch")}
        reported = set()
        async for r in read_records(settings, settings.topics.results):
            value = orjson.loads(r.value)
            if value.get("executor_group") == group:
                reported.add(value["dispatch_id"])
        if dispatched <= reported:
            return
        await asyncio.sleep(2)
