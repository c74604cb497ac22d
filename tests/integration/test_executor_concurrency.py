"""Many calls in flight, on a real broker (issue 39).

An executor runs up to ``max_in_flight`` handlers at once, across its partitions and within one;
a slow or hung handler holds up no other call; the bound is never exceeded, and while it is
reached the consumer is paused, not the loop. Claims are batched (one fence, one transaction per
partition for the calls of a fetch) but only for calls that can start now: an executor killed
in the middle of a batch of handlers leaves exactly the started calls claimed, and the next
owner reports exactly those ``unknown`` and runs the others, each once.

Overlap is asserted by the concurrency the handlers observe, never by elapsed time.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from processor.executor.handlers import Call, Handlers
from processor.kafka.partitioner import partition_for
from tests.integration.conftest import REPO_ROOT, Runtime, turn_started, wait_until
from tests.integration.executor_harness import (
    Executor,
    Recorder,
    group_of,
    ledger,
    make_dispatch,
    results,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = pytest.mark.integration

# Handlers of the executor subprocess of the kill test: book_slot never returns.
crash_handlers = Handlers()


@crash_handlers.tool("book_slot", requires_confirmation=False)
async def _hang(call: Call) -> Mapping[str, Any]:
    print(f"HANDLER-STARTED {call.dispatch_id}", flush=True)
    await asyncio.Event().wait()
    return {}


class Overlap:
    """Handlers that record how many calls run at once, overall and per dispatch partition."""

    def __init__(self, partitions: int, seconds: float, tool: str = "get_weather") -> None:
        self.partitions = partitions
        self.seconds = seconds
        self.running: Counter[int] = Counter()
        self.now = 0
        self.most = 0
        self.most_in_partition = 0
        self.ran: Counter[str] = Counter()
        self.handlers = Handlers()
        self.handlers.register(tool, self.handle, requires_confirmation=False)

    async def handle(self, call: Call) -> Mapping[str, Any]:
        partition = partition_for(call.key.turn_key.encode(), self.partitions)
        self.ran[call.dispatch_id] += 1
        self.now += 1
        self.running[partition] += 1
        self.most = max(self.most, self.now)
        self.most_in_partition = max(self.most_in_partition, self.running[partition])
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.now -= 1
            self.running[partition] -= 1
        return {"ok": True}


async def _send(runtime: Runtime, turns: list[str], calls_per_turn: int = 1) -> list[str]:
    dispatches = [
        make_dispatch("acme", turn, f"call_{i}") for turn in turns for i in range(calls_per_turn)
    ]
    await runtime.control(*(turn_started("acme", turn) for turn in turns))
    await write_dispatch(runtime, *dispatches)
    return [d.dispatch_id for d in dispatches]


@pytest.mark.partitions(2)
async def test_handlers_overlap_across_partitions_and_within_one(runtime: Runtime) -> None:
    """20 calls with a 0.5 s handler: they run side by side, also on one partition."""
    rt = runtime
    overlap = Overlap(rt.partitions, 0.5)
    ids = await _send(rt, [f"t{i}" for i in range(20)])
    executor = Executor(rt.settings, overlap.handlers, group=group_of(rt))
    async with running(executor):
        got = await wait_results(rt.settings, 20, timeout=90)
    assert {r.dispatch_id for r in got} == set(ids)
    assert all(r.outcome.value == "succeeded" for r in got)
    assert set(overlap.ran) == set(ids) and max(overlap.ran.values()) == 1
    # one at a time before: the loop awaited each handler in turn
    assert overlap.most >= 5, overlap.most
    assert overlap.most_in_partition >= 2, overlap.most_in_partition
    assert executor.client.in_flight.peak >= overlap.most


@pytest.mark.partitions(2)
async def test_the_in_flight_bound_is_never_exceeded_and_pauses_the_consumer(
    runtime: Runtime,
) -> None:
    rt = runtime
    overlap = Overlap(rt.partitions, 0.3)
    ids = await _send(rt, [f"b{i}" for i in range(15)])
    # a poll brings one record: with the 3 slots and the claim-ahead taken, the backlog fills
    # to its high mark (4 polls' worth) and the partition is paused
    executor = Executor(
        rt.settings, overlap.handlers, group=group_of(rt), max_in_flight=3, batch_size=1
    )
    paused_while_full: list[bool] = []
    async with running(executor) as ex:
        client = ex.client

        async def done() -> bool:
            if client.in_flight.running == 3:
                # the back-pressure: the consumer is paused, the loop goes on
                paused_while_full.append(bool(client.paused_partitions()))
                assert client.seconds_since_progress() < 5
            return len(await results(rt.settings)) >= 15

        await wait_until(done, timeout=90, interval=0.1, what="15 results")
        peak = client.in_flight.peak
    assert overlap.most == 3 and peak == 3, (overlap.most, peak)  # reached, never exceeded
    assert set(overlap.ran) == set(ids) and max(overlap.ran.values()) == 1
    assert paused_while_full and any(paused_while_full), paused_while_full


@pytest.mark.partitions(1)
async def test_a_hung_handler_holds_up_no_other_call(runtime: Runtime) -> None:
    """The first call of a partition hangs; the ten after it on the same partition (the same
    turn) run and are recorded meanwhile."""
    rt = runtime
    gate = asyncio.Event()
    hung = Recorder("book_slot", gate=gate)
    fast = Overlap(rt.partitions, 0.0)
    handlers = fast.handlers
    handlers.register("book_slot", hung.handle, requires_confirmation=False)
    stuck = make_dispatch("acme", "h", "call_stuck", tool="book_slot")
    await rt.control(turn_started("acme", "h"))
    await write_dispatch(rt, stuck)
    async with running(Executor(rt.settings, handlers, group=group_of(rt))):
        await wait_until(
            lambda: _true(hung.dispatch_ids == [stuck.dispatch_id]),
            timeout=60,
            what="the stuck handler running",
        )
        others = [make_dispatch("acme", "h", f"call_{i}") for i in range(10)]
        await write_dispatch(rt, *others)
        got = await wait_results(rt.settings, 10, timeout=60)
        assert not gate.is_set()
        assert {r.dispatch_id for r in got} == {d.dispatch_id for d in others}
        gate.set()
        await wait_results(rt.settings, 11, timeout=60)


@pytest.mark.partitions(1)
async def test_a_batch_killed_mid_handlers_reports_exactly_the_started_calls_unknown(
    runtime: Runtime, tmp_path: Path
) -> None:
    """A subprocess executor with 4 slots and a claim-ahead of 1 (``--claim-ahead``) claims a
    batch of the 10 waiting calls and starts 4; the fifth waits for a slot. SIGKILL while all 4
    handlers run. The next owner reports exactly those 5 claims ``unknown`` (never run again:
    the one that waited may not have run, but no owner can know) and runs the 5 it never
    claimed, once each."""
    rt = runtime
    group = group_of(rt)
    dispatches = [make_dispatch("acme", "k", f"call_{i}", tool="book_slot") for i in range(10)]
    await rt.control(turn_started("acme", "k"))
    await write_dispatch(rt, *dispatches)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
    env.update(rt.env_settings)
    log_path = tmp_path / "executor.log"
    started: set[str] = set()
    claims: set[str] = set()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "processor.executor",
                "run",
                "--handlers",
                "tests.integration.test_executor_concurrency:crash_handlers",
                "--group",
                group,
                "--max-in-flight",
                "4",
                "--claim-ahead",
                "1",
                "--allow-unsigned-operators",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:

            async def claimed() -> bool:
                if proc.poll() is not None:
                    raise AssertionError(log_path.read_text())
                text = log_path.read_text(errors="replace")
                started.clear()
                started.update(
                    line.split()[1] for line in text.splitlines() if "HANDLER-STARTED" in line
                )
                claims.clear()
                claims.update(e.dispatch_id for e in await ledger(rt) if e.state == "claimed")
                return len(started) == 4 and len(claims) == 5 and started < claims

            await wait_until(claimed, timeout=120, what="5 claims committed, 4 handlers running")
            await asyncio.sleep(1.0)  # nothing more is claimed while the 4 slots are taken
            assert {e.dispatch_id for e in await ledger(rt)} == claims
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)

    recorder = Recorder()
    async with running(Executor(rt.settings, recorder.handlers, group=group)):
        got = await wait_results(rt.settings, 10, timeout=90)
    by_id = {r.dispatch_id: (r.outcome.value, r.reason) for r in got}
    assert len(got) == 10  # each reported once
    assert {i for i, o in by_id.items() if o == ("unknown", "executor_interrupted")} == claims
    rest = {d.dispatch_id for d in dispatches} - claims
    assert {i for i, o in by_id.items() if o == ("succeeded", None)} == rest
    assert sorted(recorder.dispatch_ids) == sorted(rest)  # never re-run, the others once


async def _true(value: bool) -> bool:
    return value


@pytest.mark.partitions(1)
async def test_in_order_calls_of_one_turn_run_one_at_a_time_in_dispatch_order(
    runtime: Runtime,
) -> None:
    """A tool registered ``in_order``: the calls of one turn run one after the other, in
    dispatch order; calls of different turns still overlap."""
    rt = runtime
    spans: dict[str, list[tuple[int, float, float]]] = {}
    now = {"running": 0, "most": 0}
    handlers = Handlers()

    @handlers.tool("book_slot", requires_confirmation=False, in_order=True)
    async def book(call: Call) -> Mapping[str, Any]:
        began = asyncio.get_running_loop().time()
        now["running"] += 1
        now["most"] = max(now["most"], now["running"])
        try:
            await asyncio.sleep(0.2)
        finally:
            now["running"] -= 1
        index = int(call.key.call_id.removeprefix("call_"))
        spans.setdefault(call.key.turn_id, []).append(
            (index, began, asyncio.get_running_loop().time())
        )
        return {"ok": True}

    turns = ("o1", "o2", "o3")
    await rt.control(*(turn_started("acme", turn) for turn in turns))
    # interleaved: o1 call_0, o2 call_0, o3 call_0, o1 call_1, ... on one partition
    await write_dispatch(
        rt,
        *(
            make_dispatch("acme", turn, f"call_{i}", tool="book_slot")
            for i in range(4)
            for turn in turns
        ),
    )
    async with running(Executor(rt.settings, handlers, group=group_of(rt))):
        got = await wait_results(rt.settings, 12, timeout=90)
    assert all(r.outcome.value == "succeeded" for r in got)
    for turn in turns:
        ran = spans[turn]
        assert [index for index, _, _ in ran] == [0, 1, 2, 3], (turn, ran)  # dispatch order
        for (_, _, ended), (_, began, _) in itertools.pairwise(ran):
            assert began >= ended, (turn, ran)  # one at a time
    assert now["most"] >= 2  # the turns' calls overlapped one another
