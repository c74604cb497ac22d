"""At most one execution per dispatch id per executor group, on a real broker.

Duplicated dispatch records, an executor restart with its group offsets rewound, a rebalance
between two members, and a crash (SIGKILL) in the middle of a handler: every dispatch runs at
most once, and the one the crash interrupted is reported ``unknown`` and never run again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from processor.executor.handlers import Call, Handlers
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

# Handlers for the executor subprocess of the crash test: book_slot never returns.
crash_handlers = Handlers()


@crash_handlers.tool("book_slot", requires_confirmation=False)
async def _hang(call: Call) -> Mapping[str, Any]:
    print(f"HANDLER-STARTED {call.dispatch_id}", flush=True)
    await asyncio.Event().wait()
    return {}


async def rewind_group(runtime: Runtime, group: str) -> None:
    """Set the (idle) group's committed offsets of dispatch back to 0, as a reset would."""
    consumer = AIOKafkaConsumer(
        group_id=group, enable_auto_commit=False, **runtime.settings.kafka_client_kwargs()
    )
    await consumer.start()
    try:
        tps = [TopicPartition(runtime.topics.dispatch, p) for p in range(runtime.partitions)]
        consumer.assign(tps)
        await consumer.commit(dict.fromkeys(tps, 0))
    finally:
        await consumer.stop()


@pytest.mark.partitions(3)
async def test_duplicates_restart_and_rewound_offsets_never_rerun(runtime: Runtime) -> None:
    rt = runtime
    group = group_of(rt)
    recorder = Recorder()
    turns = [f"t{i}" for i in range(6)]
    dispatches = [make_dispatch("acme", t, "call_0") for t in turns]
    for t in turns:
        await rt.control(turn_started("acme", t))
    await write_dispatch(rt, *dispatches)
    await write_dispatch(rt, dispatches[0], dispatches[3])  # duplicated records
    async with running(Executor(rt.settings, recorder.handlers, group=group)) as ex:
        await wait_results(rt.settings, 6)
        await wait_until(
            lambda: _done(ex.client.stats.duplicates >= 2), timeout=60, what="duplicates seen"
        )
    assert sorted(recorder.dispatch_ids) == sorted(d.dispatch_id for d in dispatches)

    # a new member of the same group, with the group's offsets rewound to 0 and the same
    # dispatch records written again: the ledger, restored from Kafka, says they ran
    await rewind_group(rt, group)
    await write_dispatch(rt, *dispatches)
    again = Recorder()
    async with running(Executor(rt.settings, again.handlers, group=group)) as ex:
        await wait_until(
            lambda: _done(ex.client.stats.duplicates >= 14),
            timeout=90,
            what="every record recognised as already run",
        )
    assert again.calls == []
    assert len(await results(rt.settings)) == 6

    # another executor group is independent: it runs each dispatch once for itself
    other = Recorder()
    async with running(Executor(rt.settings, other.handlers, group=group_of(rt, "other"))):
        await wait_results(rt.settings, 12)
    assert sorted(other.dispatch_ids) == sorted(d.dispatch_id for d in dispatches)


@pytest.mark.partitions(3)
async def test_rebalance_between_members_runs_each_dispatch_once(runtime: Runtime) -> None:
    rt = runtime
    group = group_of(rt)
    seen: Counter[str] = Counter()
    handlers = Handlers()

    async def slow(call: Call) -> None:
        seen[call.dispatch_id] += 1
        await asyncio.sleep(0.05)

    handlers.register("get_weather", slow, requires_confirmation=False)
    turns = [f"r{i}" for i in range(24)]
    for t in turns:
        await rt.control(turn_started("acme", t))
    dispatches = [make_dispatch("acme", t, "call_0") for t in turns]
    await write_dispatch(rt, *dispatches[:12])
    first = Executor(rt.settings, handlers, group=group, batch_size=2)
    await first.start()
    second = Executor(rt.settings, handlers, group=group, batch_size=2)
    try:
        await second.start(timeout=90)  # joins: a rebalance while the first one works
        await write_dispatch(rt, *dispatches[12:])
        await wait_until(lambda: _done(len(seen) >= 12), timeout=60, what="progress")
        await first.stop()  # leaves: a second rebalance
        await wait_results(rt.settings, 24, timeout=120)
    finally:
        await second.stop()
        await first.stop()
    assert set(seen) == {d.dispatch_id for d in dispatches}
    assert max(seen.values()) == 1
    got = await results(rt.settings)
    assert Counter(r.dispatch_id for r in got).most_common(1)[0][1] == 1


@pytest.mark.partitions(2)
async def test_crash_mid_handler_reports_unknown_and_never_reruns(
    runtime: Runtime, tmp_path: Path
) -> None:
    rt = runtime
    group = group_of(rt)
    d = make_dispatch("acme", "crash", "call_0", tool="book_slot")
    await rt.control(turn_started("acme", "crash"))
    await write_dispatch(rt, d)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
    env.update(rt.env_settings)
    log_path = tmp_path / "executor.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "processor.executor",
                "run",
                "--handlers",
                "tests.integration.test_executor_ledger:crash_handlers",
                "--group",
                group,
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
                started_ = "HANDLER-STARTED" in log_path.read_text(errors="replace")
                states = [e.state for e in await ledger(rt)]
                return started_ and states == ["claimed"]

            await wait_until(claimed, timeout=120, what="claim committed, handler running")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)

    recorder = Recorder()
    async with running(Executor(rt.settings, recorder.handlers, group=group)):
        [result] = await wait_results(rt.settings, 1)
    assert recorder.calls == []  # never run again
    assert (result.outcome, result.reason) == ("unknown", "executor_interrupted")
    assert [e.state for e in await ledger(rt)] == ["claimed", "unknown"]
    status = [s for s in await rt.read("status") if s["turn_id"] == "crash"]
    assert [(s["state"], s["retry_possible"]) for s in status] == [("failed", False)]
    assert "could not confirm" in status[0]["message"]
    assert b"party" not in orjson.dumps([r.model_dump() for r in await results(rt.settings)])


async def _done(value: bool) -> bool:
    return value


@pytest.mark.partitions(1)
async def test_a_failed_take_is_retried_and_nothing_is_lost(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: the first ledger restore of the partition times out on assignment."""
    import processor.executor.ownership as ownership_module

    rt = runtime
    real = ownership_module.restore_ledger_partition
    failures: Counter[int] = Counter()

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        partition = args[2]
        if failures[partition] == 0:
            failures[partition] += 1
            raise TimeoutError("injected: the ledger restore timed out")
        return await real(*args, **kwargs)

    monkeypatch.setattr(ownership_module, "restore_ledger_partition", flaky)
    recorder = Recorder()
    dispatch = make_dispatch("acme", "t-retake", "call_0")
    await rt.control(turn_started("acme", "t-retake"))
    await write_dispatch(rt, dispatch)
    async with running(Executor(rt.settings, recorder.handlers, group=group_of(rt))):
        await wait_results(rt.settings, 1)
    assert failures[0] == 1
    assert recorder.dispatch_ids == [dispatch.dispatch_id]


class _Panic(BaseException):
    """Stands for pyo3's PanicException (a Rust extension's panic), a BaseException."""


async def test_a_handler_that_panics_fails_its_call_and_the_executor_goes_on(
    runtime: Runtime,
) -> None:
    """A BaseException from a handler (a panic of a Rust extension it uses) went through the
    executor's ``except Exception`` and stopped it; every member reading the dispatch after it
    would stop too. It now fails that call (``handler_exception``) and runs the next."""
    rt = runtime
    ran: list[str] = []
    handlers = Handlers()

    @handlers.tool("get_weather", requires_confirmation=False)
    async def weather(call: Call) -> Mapping[str, Any]:
        ran.append(call.key.turn_id)
        if call.key.turn_id == "panics":
            raise _Panic("rust")
        return {"ok": True}

    for turn in ("panics", "fine"):
        await rt.control(turn_started("acme", turn))
    await write_dispatch(rt, make_dispatch("acme", "panics", "call_0"))
    await write_dispatch(rt, make_dispatch("acme", "fine", "call_0"))
    async with running(Executor(rt.settings, handlers, group=group_of(rt))):
        got = await wait_results(rt.settings, 2)
    by_turn = {r.key.turn_id: r for r in got}
    assert sorted(ran) == ["fine", "panics"]
    assert by_turn["panics"].outcome.value == "failed"
    assert (by_turn["panics"].reason, by_turn["panics"].detail) == ("handler_exception", "_Panic")
    assert by_turn["fine"].outcome.value == "succeeded"
