"""Chaos seed 19 on purpose: an aborted transaction left open on ``dispatch`` must stay aborted.

What seed 19 left behind (docs/reliability.md, "Seed 19"): the coordinator completed the abort of
a worker transaction without writing the abort marker on ``dispatch-3`` (the broker was still
fenced after a restart: no leader endpoint, so the partition was skipped). The partition kept an
open transaction of the worker's producer id, and the next commit of that producer id on it, the
worker's own, made the aborted dispatch record visible next to the new one.

The broker's skip depends on a race (a timed-out transaction aborted in the seconds the restarted
broker is still fenced; tried here with a 3 s transaction timeout and a `kill -9`: the broker
skipped the marker, but then lost and reloaded its coordinator partition and wrote it). So the
test builds that state directly, on a broker of its own, with partition verification off
(``transaction.partition.verification.enable=false``, KIP-890's check that a partition was added
to the transaction):

1. a producer with the worker's transactional id for partition 0 adds ``status-0`` to its
   transaction as usual, and writes a dispatch record to ``dispatch-0`` without telling the
   coordinator (aiokafka's transaction manager is told the partition is already added), then
   aborts. The coordinator completes the abort with a marker on ``status-0`` only: what it does
   when it skips a partition. ``dispatch-0`` keeps an open transaction of that producer id, the
   aborted dispatch inside, exactly what seed 19 left;
2. the broker is killed (``kill -9``) and restarted on the same data: the open transaction
   survives it (the partition's producer state is rebuilt from the log);
3. a worker takes partition 0 (its InitProducerId bumps the same producer id's epoch) and a turn
   is dispatched on partition 0.

The worker must abort the open transaction before its first commit, so ``dispatch`` holds the new
call's record only. Before the fix, the worker's commit marker made the aborted record visible.
The same is built for an executor (its transactional id for partition 0, a record left open on
``results-0``), which then runs the new call: ``results`` holds its result only.

The other side: on partition 1 the coordinator *committed* such a transaction without
``dispatch-1``'s marker (the same skip after ``PrepareCommit``). Its record belongs to a
committed transaction, whose input offsets are committed too, so aborting it would lose it: the
worker reads the coordinator's state before its ``InitProducerId`` and commits it instead.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import TopicPartition

from processor.core.events import Dispatch, encode
from processor.kafka import hanging
from processor.kafka.clients import admin_client, discard_producer
from processor.kafka.partitioner import partition_for
from processor.kafka.tail import read_records
from tests.chaos.faults import QUICK_START_JVM, Broker
from tests.integration.conftest import Runtime, call_events, free_port, turn_started, wait_until
from tests.integration.executor_harness import Executor, Recorder, running
from tests.side_by_side import SideBySide
from tests.txn_seams import cluster_client, producer_identity, write_unannounced

pytestmark = pytest.mark.integration

ABORTED_ID = "seed19-aborted-dispatch"
ABORTED_RESULT = b'{"type": "result", "dispatch_id": "seed19-aborted-result"}'
COMMITTED_ID = "seed19-committed-dispatch"
COMMITTED_DISPATCH = orjson.dumps(
    {"type": "dispatch", "dispatch_id": COMMITTED_ID, "turn_id": "t-c", "call_id": "c"}
)
# a turn whose key murmur2 puts on partition 0 of 2: its dispatch and result go there
TURN = next(f"t-{n}" for n in range(100) if partition_for(f"acme/t-{n}".encode(), 2) == 0)


@pytest.mark.timeout(420)  # the first marked test waits for every selected scenario
@pytest.mark.side_by_side(scenario=lambda workdir, bootstrap: _scenario(workdir))
def test_an_aborted_dispatch_left_open_on_its_partition_never_becomes_visible(
    side_by_side: SideBySide,
) -> None:
    """The scenario asserts as it goes (below), driven side by side with the other slow ones
    (a broker of its own, killed and restarted, and waits on the clock)."""
    assert side_by_side.value is None


async def _scenario(tmp_path: Path) -> None:
    broker = Broker(tmp_path / "broker", free_port(), free_port(), jvm_flags=QUICK_START_JVM)
    await broker.start()
    runtime = Runtime(broker.bootstrap, f"s19{uuid.uuid4().hex[:6]}.", tmp_path, 2)
    topics = runtime.topics
    dispatch_0 = TopicPartition(topics.dispatch, 0)
    dispatch_1 = TopicPartition(topics.dispatch, 1)
    try:
        await runtime.create_topics()
        async with admin_client(runtime.settings) as admin:
            [*responses] = await admin.alter_configs(
                [
                    ConfigResource(
                        ConfigResourceType.BROKER,
                        "1",
                        {"transaction.partition.verification.enable": "false"},
                    )
                ]
            )
        assert all(code == 0 for r in responses for code, *_ in r.resources)

        producer_id = await _leave_open(runtime, dispatch_0)
        assert await _open_of(runtime, producer_id, dispatch_0), "the open transaction was not made"
        group = f"{runtime.prefix}exec"
        results_0 = TopicPartition(topics.results, 0)
        executor_id = await _leave_open_raw(
            runtime, f"{group}.executor.0", topics.executions, results_0, ABORTED_RESULT
        )
        assert await _open_of(runtime, executor_id, results_0)
        # partition 1: a transaction the coordinator *committed* without dispatch-1's marker
        committed_id = await _leave_open_raw(
            runtime,
            runtime.settings.transactional_id(1),
            topics.status,
            dispatch_1,
            COMMITTED_DISPATCH,
            commit=True,
        )
        assert await _open_of(runtime, committed_id, dispatch_1)

        await broker.kill()  # kill -9, with the transactions open
        await broker.start()
        assert await _open_of(runtime, producer_id, dispatch_0), "it did not survive the restart"
        assert await _open_of(runtime, executor_id, results_0)

        worker = runtime.start_worker("w1")
        await worker.wait_ready(timeout=120)
        await runtime.control(turn_started("acme", TURN))
        await runtime.publish(call_events("acme", TURN, "call_1", '{"city": "Oslo"}'))

        async def new_dispatch() -> list[dict[str, Any]] | None:
            found = await runtime.dispatches()
            return found if any(d.get("call_id") == "call_1" for d in found) else None

        dispatched = await wait_until(new_dispatch, timeout=90, what="the new dispatch")
        ids = [d["dispatch_id"] for d in dispatched]
        # the same commit that shows the new record would show the aborted one (one marker)
        assert ABORTED_ID not in ids
        # the committed one is kept, once: it was committed, its input offsets with it
        assert ids.count(COMMITTED_ID) == 1
        assert [
            (d["turn_id"], d["call_id"]) for d in dispatched if d["dispatch_id"] != COMMITTED_ID
        ] == [(TURN, "call_1")]
        assert not await _open_of(runtime, producer_id, dispatch_0)
        assert not await _open_of(runtime, committed_id, dispatch_1)
        ended = {
            r["msg"]: r["partitions"]
            for r in worker.log_records()
            if r.get("msg", "").startswith("hanging transactions of our producer id")
        }
        assert ended == {
            "hanging transactions of our producer id aborted": [f"{topics.dispatch}-0"],
            "hanging transactions of our producer id committed": [f"{topics.dispatch}-1"],
        }, worker.log()[-3000:]
        assert "toolcall_hanging_transactions_ended_total" in await worker.metrics()

        # an executor runs the call; its commit on results-0 must not show the aborted result
        recorder = Recorder("get_weather")
        async with running(Executor(runtime.settings, recorder.handlers, group=group)):
            await wait_until(lambda: _results(runtime), timeout=90, what="the call's result")
        values = await _results(runtime)
        assert ABORTED_RESULT not in values
        assert [orjson.loads(v)["call_id"] for v in values] == ["call_1"]  # one result
        assert not await _open_of(runtime, executor_id, results_0)

        await _a_skipped_commit_is_swept(runtime)
    finally:
        await runtime.close()
        await broker.kill()  # thrown away with tmp_path: no clean stop to wait for


async def _leave_open(runtime: Runtime, dispatch_0: TopicPartition) -> int:
    """A transaction of the worker's producer id (partition 0) that the coordinator completes
    as aborted while ``dispatch-0`` keeps it open, holding a dispatch record. Its producer id."""
    settings = runtime.settings
    producer = AIOKafkaProducer(
        transactional_id=settings.transactional_id(0), **settings.kafka_client_kwargs()
    )
    await producer.start()
    try:
        producer_id: int = producer_identity(producer)[0]
        await producer.begin_transaction()
        await (await producer.send(runtime.topics.status, b"{}", key=b"acme/t-19", partition=0))
        # the coordinator never learns of dispatch-0: it will complete the abort without it
        write_unannounced(producer, dispatch_0)
        record = Dispatch(
            tenant="acme",
            turn_id=TURN,
            response_id="resp-1",
            item_id="call_1",
            call_id="call_1",
            dispatch_id=ABORTED_ID,
            tool="get_weather",
            tool_version="2",
            arguments={"city": "Oslo"},
            args_digest="d" * 16,
            actor="user-1",
            provider="test",
            terminal_event_id=f"acme.{TURN}.resp-1.call_1.t",
            ts=1.0,
        )
        await (await producer.send(dispatch_0.topic, encode(record), key=b"acme/t-19", partition=0))
        await producer.abort_transaction()
        return producer_id
    finally:
        await discard_producer(producer)


async def _leave_open_raw(
    runtime: Runtime,
    transactional_id: str,
    known: str,
    hidden: TopicPartition,
    value: bytes,
    *,
    commit: bool = False,
) -> int:
    """As :func:`_leave_open`, for any transactional id: a record on ``known`` (the hidden
    partition's number) that the coordinator knows of, and ``value`` left open on ``hidden``;
    the transaction is aborted, or with ``commit`` committed. The producer id."""
    producer = AIOKafkaProducer(
        transactional_id=transactional_id, **runtime.settings.kafka_client_kwargs()
    )
    await producer.start()
    try:
        producer_id: int = producer_identity(producer)[0]
        await producer.begin_transaction()
        where = hidden.partition
        await (await producer.send(known, b"{}", key=b"acme/t-19", partition=where))
        write_unannounced(producer, hidden)
        await (await producer.send(hidden.topic, value, key=b"acme/t-19", partition=where))
        if commit:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
        return producer_id
    finally:
        await discard_producer(producer)


async def _a_skipped_commit_is_swept(runtime: Runtime) -> None:
    """A commit that succeeded for its producer, the coordinator skipping one partition's marker
    (``ledger-1`` here), the producer living on: nothing would end that transaction but the same
    producer's next one there, and until then the record is invisible. The sweep a worker runs
    between its transactions (``hanging.end_skipped_commits``) commits it; with our producer's
    transaction still open (not ``CompleteCommit``) it leaves everything alone."""
    settings = runtime.settings
    hidden = TopicPartition(runtime.topics.ledger, 1)
    producer = AIOKafkaProducer(
        transactional_id=f"{runtime.prefix}sweep", **settings.kafka_client_kwargs()
    )
    await producer.start()
    try:
        pid: int = producer_identity(producer)[0]
        epoch: int = producer_identity(producer)[1]
        sweep = functools.partial(
            hanging.end_skipped_commits,
            producer.client,
            producer_id=pid,
            producer_epoch=epoch,
            transactional_id=f"{runtime.prefix}sweep",
            partitions=[hidden],
            owner="worker",
        )
        await producer.begin_transaction()
        await (await producer.send(runtime.topics.status, b"{}", key=b"acme/t-s", partition=1))
        write_unannounced(producer, hidden)
        await (await producer.send(hidden.topic, b"swept", key=b"acme/t-s", partition=1))
        assert await sweep() == []  # ours, in flight: not the sweep's
        await producer.commit_transaction()
        assert await _open_of(runtime, pid, hidden), "the coordinator wrote the marker after all"
        assert b"swept" not in await _values(runtime, hidden.topic)  # held behind the open txn
        [ended] = await sweep()
        assert (ended.topic, ended.partition, ended.producer_epoch) == (hidden.topic, 1, epoch)
        assert not await _open_of(runtime, pid, hidden)
        assert (await _values(runtime, hidden.topic)).count(b"swept") == 1  # committed, once
        assert await sweep() == []
    finally:
        await discard_producer(producer)


async def _values(runtime: Runtime, topic: str) -> list[bytes]:
    return [r.value async for r in read_records(runtime.settings, topic)]


async def _results(runtime: Runtime) -> list[bytes]:
    return [r.value async for r in read_records(runtime.settings, runtime.topics.results)]


async def _open_of(runtime: Runtime, producer_id: int, tp: TopicPartition) -> bool:
    """Whether ``tp`` holds an open transaction of ``producer_id`` (asked until the broker
    answers: it may still be loading after a restart)."""

    async def ask() -> tuple[list[hanging.OpenTransaction]] | None:
        try:
            async with admin_client(runtime.settings) as admin:
                return (await hanging.describe_open_transactions(cluster_client(admin), [tp]),)
        except Exception:
            return None

    [found] = await wait_until(ask, timeout=60, what=f"DescribeProducers on {tp}")
    return any(t.producer_id == producer_id for t in found)
