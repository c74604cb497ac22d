"""An executor whose transaction the coordinator ended, with no rebalance, keeps executing.

The chaos runs on three brokers found executors that stopped executing after a whole-cluster
``kill -9`` or a rolling restart and stayed alive (docs/reliability.md, "Executors stalled after
brokers restarted"). The cause: a transaction left open across the outage outlives the
transaction timeout, and the coordinator aborts it and bumps the producer epoch, which fences
the executor's producer (aiokafka: ``ProducerFenced``). The executor took every fence for
"another member owns this partition now" and paused the partition until a rebalance gave it
back; but nothing else owned it and no rebalance came (the restarted group coordinator still
knew the members), so the partition stayed paused for good, and a call whose end was being
recorded kept its claim. On one broker the outage also expired the members' sessions, so a
rebalance hid it.

Both ways in are driven here on a real broker, with one member and no rebalance:

* the outcome's commit stalls past the transaction timeout (what an outage does to it): the
  commit must be bounded and retried with a new producer, whatever the coordinator did;
* the partition's producer id is fenced by InitProducerId from outside, as the coordinator does
  on a timeout, while the executor is idle: the next transaction is refused as fenced and the
  executor must take the partition again (after one session timeout, when no rebalance said
  another member owns it) and report every call.

A third way in, found by chaos seed 4 on three brokers: the whole cluster goes while a handler
runs, so the call's end (its outcome, after the claim) cannot be written, and the member keeps
the partition (no rebalance follows). The end was dropped with "it will be reported unknown" by a
next owner that never came: the claim stayed open and the call unreported for good. It is now
kept and written before anything else of the partition, also with no record arriving; an end that
cannot be written for several rounds gives the partition up, and the take reports it ``unknown``.

And whatever wait may still hang: a loop that makes no progress for
``executor_stall_timeout_seconds`` ends with one error line and :class:`ExecutorStalled`
(``processor executor run`` exits 1), never alive and silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError

from processor.executor.client import ExecutorClient, ExecutorStalled
from tests.integration.conftest import Runtime, turn_started, wait_until
from tests.integration.executor_harness import (
    Executor,
    Recorder,
    group_of,
    make_dispatch,
    results,
    write_dispatch,
)

pytestmark = [pytest.mark.integration, pytest.mark.partitions(1)]

REPORTED_WITHIN = 45.0
_KEPT = "could not record the end of claimed calls yet"  # the executor's error line


async def _reported(runtime: Runtime, dispatch_ids: set[str], executor: Executor) -> set[str]:
    """The ids still without a result after ``REPORTED_WITHIN`` seconds (empty: all reported)."""
    missing = set(dispatch_ids)
    deadline = time.monotonic() + REPORTED_WITHIN
    while missing and time.monotonic() < deadline:
        task = executor.task
        assert task is not None
        if task.done():
            task.result()  # raise what went wrong
            break
        missing -= {r.dispatch_id for r in await results(runtime.settings)}
        await asyncio.sleep(0.5)
    return missing


async def _send(runtime: Runtime, n: int, start: int = 0) -> set[str]:
    dispatches = [make_dispatch("acme", f"turn-{i}", f"call-{i}") for i in range(start, start + n)]
    await runtime.control(*(turn_started("acme", d.turn_id) for d in dispatches))
    await write_dispatch(runtime, *dispatches)
    return {d.dispatch_id for d in dispatches}


async def test_a_commit_stalled_past_the_transaction_timeout_is_retried(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    stall = runtime.settings.transaction_timeout_ms / 1000 + 4.0  # and the abort interval (2 s)
    stalled: list[str] = []
    armed = False
    real = AIOKafkaProducer.commit_transaction

    async def commit(producer: AIOKafkaProducer) -> None:
        # the executor's producers are the only transactional ones in this process: once armed,
        # the next commit stalls (whichever producer the partition has then), the retry does not
        nonlocal armed
        if armed:
            armed = False
            stalled.append("commit")
            await asyncio.sleep(stall)  # an outage: the coordinator times the transaction out
        await real(producer)

    monkeypatch.setattr(AIOKafkaProducer, "commit_transaction", commit)
    executor = Executor(runtime.settings, Recorder().handlers, group=group_of(runtime))
    await executor.start()
    try:
        first = await _send(runtime, 2)
        assert not await _reported(runtime, first, executor)
        armed = True  # the next transaction: the claim of the next call
        later = await _send(runtime, 3, start=2)
        missing = await _reported(runtime, later, executor)
        assert stalled, "the stalled commit never ran"
        assert not missing, (
            f"{len(missing)} of 3 calls unreported {REPORTED_WITHIN:.0f} s after a stalled "
            f"commit; owned partitions {executor.client.owned_partitions()}"
        )
    finally:
        await executor.stop()


async def test_a_fence_without_a_rebalance_is_taken_back(runtime: Runtime) -> None:
    executor = Executor(runtime.settings, Recorder().handlers, group=group_of(runtime))
    await executor.start()
    try:
        first = await _send(runtime, 2)
        assert not await _reported(runtime, first, executor)
        # InitProducerId of the partition's transactional id: the epoch moves on, as when the
        # coordinator aborts a transaction that outlived its timeout; no member joins or leaves
        fencer = AIOKafkaProducer(
            **runtime.settings.kafka_client_kwargs(),
            transactional_id=f"{executor.client.group}.executor.0",
        )
        await fencer.start()
        await fencer.stop()
        later = await _send(runtime, 3, start=2)
        missing = await _reported(runtime, later, executor)
        assert not missing, (
            f"{len(missing)} of 3 calls unreported {REPORTED_WITHIN:.0f} s after a fence that "
            f"no rebalance followed; owned partitions {executor.client.owned_partitions()}"
        )
        assert executor.client.owned_partitions() == [0]
        # each call ran once: the fenced claim was never committed, so it ran after the take
        recorded: dict[str, Any] = {}
        for r in await results(runtime.settings):
            recorded.setdefault(r.dispatch_id, []).append(r.outcome.value)
        assert all(v == ["succeeded"] for v in recorded.values()), recorded
    finally:
        await executor.stop()


class _OutcomesFail(ExecutorClient):
    """Transactions that write a ``succeeded`` result fail while ``failing`` is set (what a
    broker outage does to them; the broker itself stays up for the rest): the writer's one
    attempt, wrapped."""

    failing = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        attempt = self.writer.one_transaction

        async def failing(owned: Any, producer: Any, outputs: list[Any], offset: int | None) -> None:
            if self.failing and any(
                topic == self.topics.results and b'"outcome":"succeeded"' in value
                for topic, _key, value, _headers, _partition in outputs
            ):
                raise KafkaTimeoutError("injected: the cluster is gone")
            await attempt(owned, producer, outputs, offset)

        self.writer.one_transaction = failing  # type: ignore[method-assign]


async def _outcomes(runtime: Runtime) -> dict[str, list[tuple[str, str | None]]]:
    recorded: dict[str, list[tuple[str, str | None]]] = {}
    for r in await results(runtime.settings):
        recorded.setdefault(r.dispatch_id, []).append((r.outcome.value, r.reason))
    return recorded


@contextlib.asynccontextmanager
async def _failing_outcomes(runtime: Runtime) -> AsyncIterator[tuple[Recorder, Executor, str]]:
    """A running executor whose outcomes' transactions fail, and the one call it claimed."""
    recorder = Recorder()
    executor = Executor(
        runtime.settings, recorder.handlers, group=group_of(runtime), client_cls=_OutcomesFail
    )
    await executor.start()
    try:
        [claimed] = await _send(runtime, 1)
        yield recorder, executor, claimed
    finally:
        await executor.stop()


async def test_an_end_that_could_not_be_written_is_written_later_without_a_rebalance(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="processor.executor.client")
    async with _failing_outcomes(runtime) as (recorder, executor, claimed):

        async def kept() -> bool:  # the executor says so when it keeps an end to write later
            return any(r.getMessage().startswith(_KEPT) for r in caplog.records)

        await wait_until(kept, timeout=60, what="the end kept after its transaction failed")
        assert recorder.dispatch_ids == [claimed]  # the handler ran; its end is unwritten
        executor.client.failing = False  # type: ignore[attr-defined]  # the cluster is back
        missing = await _reported(runtime, {claimed}, executor)  # no new record comes
        assert not missing, "the kept end was never written"
        assert (await _outcomes(runtime))[claimed] == [("succeeded", None)]
        assert executor.client.owned_partitions() == [0]
        later = await _send(runtime, 2, start=1)
        assert not await _reported(runtime, later, executor)
        assert len(recorder.dispatch_ids) == 3  # each ran once


async def test_an_end_that_can_never_be_written_gives_the_partition_up_and_is_unknown(
    runtime: Runtime,
) -> None:
    async with _failing_outcomes(runtime) as (recorder, executor, claimed):
        missing = await _reported(runtime, {claimed}, executor)
        assert not missing, "the claim stayed open and the call unreported"
        # the partition was taken again (no rebalance), and the take reported it from its claim
        assert (await _outcomes(runtime))[claimed] == [("unknown", "executor_interrupted")]
        assert recorder.dispatch_ids == [claimed]  # run once, never again
        assert executor.client.owned_partitions() == [0]


class _HangingFence(ExecutorClient):
    """A fence read (a control partition's barrier) that never comes back (a wait on the
    broker without a bound): the gate's sync, replaced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

        async def hang(partitions: list[int]) -> Any:
            await asyncio.Event().wait()

        self.gate.synced = hang  # type: ignore[method-assign]


async def test_a_stalled_loop_exits_loudly_instead_of_staying_silent(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    settings = runtime.settings.model_copy(update={"executor_stall_timeout_seconds": 3.0})
    executor = Executor(
        settings, Recorder().handlers, group=group_of(runtime), client_cls=_HangingFence
    )
    await executor.start()
    try:
        await _send(runtime, 1)
        task = executor.task
        assert task is not None
        done, _ = await asyncio.wait({task}, timeout=30)
        assert done, "the executor stayed alive and silent"
        with pytest.raises(ExecutorStalled) as stalled:
            task.result()
        assert "dispatch partition 0" in stalled.value.step
        lines = [r for r in caplog.records if "executor stalled" in r.getMessage()]
        assert len(lines) == 1 and lines[0].levelname == "ERROR", lines
    finally:
        await asyncio.wait_for(executor.client.stop(), 30)
