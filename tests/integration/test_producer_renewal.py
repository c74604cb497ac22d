"""Long-lived idempotent producers recover from a fatal producer error (issue 42).

A real broker refuses the producer deterministically: the topics take at most ``LIMIT`` bytes
per batch, and a record above that (below the client's own limit) is refused by the broker with
``MessageSizeTooLarge`` *after* aiokafka numbered its batch. aiokafka never reuses the number,
so every later batch of that producer on the partition is refused with
``OutOfOrderSequenceNumber`` (what a batch expired without a leader during a cluster outage does
too). Before the renewal, a Publisher, ControlWriter or AuditWriter stayed broken from then on.

* a record refused through the library's own publish renews the producer at once: the caller gets
  the refusal, and the next publish on the same partition goes through;
* a sequence burnt behind the library's back (the raw producer's send) makes the broker answer the
  next publish and control write with a real ``OutOfOrderSequenceNumber``: the producer is
  renewed and the same call goes through, without the caller seeing an error;
* the events and commands written through the old producer and again through the renewed one
  are repeats the Assembler and the executor's fence ignore (idempotence by event and command
  id), and each event's first copy keeps the publish order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError
from aiokafka.structs import ConsumerRecord, TopicPartition
from prometheus_client import REGISTRY

from processor.adapters.base import TurnContext
from processor.core.authn import AllowUnsigned
from processor.core.events import CallConfirmed, Dispatch, Ledger, encode, stable_id
from processor.core.mcp_pins import PinState
from processor.core.outputs import RecordSource
from processor.executor.fence import ApplyOutcome, FenceState
from processor.kafka.clients import admin_client
from processor.kafka.idempotent import IdempotentProducer, Outgoing, RenewingProducer
from processor.kafka.publish import BlockingPublisher, Publisher
from processor.mcp.audit import AuditWriter
from processor.mcp.tools import PinChange
from processor.ops.ctl import ControlWriter
from tests.integration.conftest import (
    Runtime,
    call_events,
    free_port,
    turn_cancelled,
    wait_until,
)
from tests.kafka_broker import read_partition
from tests.unit.scenario import Run

pytestmark = pytest.mark.integration

LIMIT = 64 * 1024  # max.message.bytes of the test topics: normal batches fit, a big record not
BIG = '{"city": "%s"}' % ("x" * (2 * LIMIT))


def renewals(role: str, reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "toolcall_producer_renewals_total", {"role": role, "reason": reason}
    )
    return value or 0.0


async def limit_topics(runtime: Runtime, *topics: str) -> None:
    """``max.message.bytes=LIMIT`` on ``topics``, once the broker applies it."""
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, t, {"max.message.bytes": str(LIMIT)})
        for t in topics
    ]
    async with admin_client(runtime.settings) as admin:
        await admin.alter_configs(resources)

        async def applied() -> bool:
            described = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
            )
            values = [
                entry[1]
                for response in described
                for resource in response.resources
                for entry in resource[4]
                if entry[0] == "max.message.bytes"
            ]
            return values == [str(LIMIT)] * len(topics)

        await wait_until(applied, timeout=30, interval=0.1, what="max.message.bytes applied")


async def burn_a_sequence(writer: IdempotentProducer, topic: str) -> None:
    """Send a record the broker refuses through the writer's current producer, bypassing the
    renewal: the producer's next batch on partition 0 carries a sequence the broker refuses."""
    producer = writer.producers.current
    assert producer is not None
    with pytest.raises(MessageSizeTooLargeError):
        await producer.send_and_wait(topic, b"x" * (2 * LIMIT), key=b"k", partition=0)


async def records(runtime: Runtime, topic: str) -> list[ConsumerRecord[bytes, bytes]]:
    return await read_partition(TopicPartition(topic, 0), **runtime.settings.kafka_client_kwargs())


def confirmed(turn: str) -> CallConfirmed:
    return CallConfirmed(
        command_id=stable_id("confirm", turn),
        issued_by="user-1",
        issued_at=time.time(),
        tenant="acme",
        turn_id=turn,
        response_id="resp-1",
        item_id="item-0",
        call_id="c-other",
        actor="user-1",
        args_digest="sha256:" + "0" * 64,
    )


@pytest.mark.partitions(1)
async def test_a_refused_record_renews_the_publisher_and_the_partition_takes_more(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    await limit_topics(runtime, runtime.topics.fragments)
    before = renewals("adapter", "MessageSizeTooLargeError")
    caplog.set_level(logging.WARNING, logger="processor.kafka.idempotent")
    with BlockingPublisher(runtime.settings) as publisher:  # sync code's publisher, same part
        assert await asyncio.to_thread(publisher.publish, call_events("acme", "t-1", "c1", "{}"))
        big = call_events("acme", "t-2", "c1", BIG, pieces=1)
        with pytest.raises(MessageSizeTooLargeError):  # the records are refused: not retried
            await asyncio.to_thread(publisher.publish, big)
        # before the renewal: OutOfOrderSequenceNumber here, and on every publish after it
        for turn in ("t-3", "t-4"):
            events = call_events("acme", turn, "c1", '{"city": "Oslo"}')
            assert await asyncio.to_thread(publisher.publish, events) == len(events)
        assert publisher.publisher.producers.generation == 2
    assert renewals("adapter", "MessageSizeTooLargeError") == before + 1
    lines = [r for r in caplog.records if r.name == "processor.kafka.idempotent"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.WARNING
    assert lines[0].fields["role"] == "adapter"  # type: ignore[attr-defined]
    assert "xxxx" not in caplog.text  # no argument value in the log
    written = [r.value for r in await records(runtime, runtime.topics.fragments)]
    refused = [encode(e) for e in big]
    # of the refused publish, at most a prefix landed (its events before the refused one)
    landed = [v for v in written if v in refused]
    assert landed == refused[: len(landed)] and len(landed) < len(refused)


@pytest.mark.partitions(1)
async def test_repeats_through_the_old_and_the_renewed_producer_are_ignored(
    runtime: Runtime,
) -> None:
    """The same events and commands, written by a producer and again by its replacement (after
    a real OutOfOrderSequenceNumber from the broker), change nothing the second time."""
    topics = runtime.topics
    await limit_topics(runtime, topics.fragments, topics.control)
    turn = TurnContext(tenant="acme", turn_id="t-1", actor="user-1")
    events = call_events("acme", "t-1", "c1", '{"city": "Oslo"}', pieces=3)
    commands = [turn_cancelled("acme", "t-2"), confirmed("t-1")]
    out_of_order = (
        renewals("adapter", "OutOfOrderSequenceNumber"),
        renewals("ctl", "OutOfOrderSequenceNumber"),
    )
    async with Publisher(runtime.settings) as publisher, ControlWriter(runtime.settings) as ctl:
        for generation in (1, 2):
            if generation == 2:  # the old producers' next batches are refused by the broker
                await burn_a_sequence(publisher, topics.fragments)
                await burn_a_sequence(publisher, topics.control)
                await burn_a_sequence(ctl, topics.control)
            await publisher.start_turn(turn)
            assert await publisher.publish(events) == len(events)
            for command in commands:
                await ctl.write(command)
            assert publisher.producers.generation == generation
            assert ctl.producers.generation == generation
    # one renewal each, caused by the broker's OutOfOrderSequenceNumber
    assert renewals("adapter", "OutOfOrderSequenceNumber") == out_of_order[0] + 1
    assert renewals("ctl", "OutOfOrderSequenceNumber") == out_of_order[1] + 1

    fragments = await records(runtime, topics.fragments)
    control = await records(runtime, topics.control)
    ids = [e.event_id for e in events]
    written = [r.value for r in fragments]
    assert written == [encode(e) for e in events] * 2  # each twice, the first copies in order
    command_ids = [c.command_id for c in commands]
    assert len(control) == 2 * (1 + len(command_ids))

    # the Assembler: the second copies add nothing (one dispatch, one ledger entry)
    run = Run()
    now = time.time()
    outputs_per_copy: list[list[Any]] = [[], []]
    for copy, chunk in enumerate((control[:3], control[3:])):
        for r in chunk:
            outputs_per_copy[copy] += run.assembler.handle(
                r.value,
                now,
                source=RecordSource(r.topic, 0, r.offset),
                record_time=r.timestamp / 1000,
            )
    for copy, chunk in enumerate((fragments[: len(ids)], fragments[len(ids) :])):
        for r in chunk:
            outputs_per_copy[copy] += run.assembler.handle(
                r.value,
                now,
                source=RecordSource(r.topic, 0, r.offset),
                record_time=r.timestamp / 1000,
            )
    first, second = outputs_per_copy
    assert [type(o) for o in first if isinstance(o, Dispatch)] == [Dispatch]
    assert [o.call_id for o in first if isinstance(o, Ledger)] == ["c1"]
    assert not [o for o in second if isinstance(o, Dispatch | Ledger)], second

    # the executor's fence: a repeated cancel is a no-op duplicate, a repeated confirm a replay
    fence = FenceState(verifier=AllowUnsigned())
    outcomes = [fence.apply_record(r.value, r.timestamp / 1000) for r in control]
    assert outcomes[:3] == [ApplyOutcome.APPLIED] * 3
    assert outcomes[4:] == [ApplyOutcome.DUPLICATE, ApplyOutcome.REPLAYED]
    once = FenceState(verifier=AllowUnsigned())
    for r in control[:3]:
        once.apply_record(r.value, r.timestamp / 1000)
    facts = {k: (t.actor, t.cancelled, t.cancel_reason) for k, t in fence.turns.items()}
    assert facts == {k: (t.actor, t.cancelled, t.cancel_reason) for k, t in once.turns.items()}
    assert fence.confirmations == once.confirmations


@pytest.mark.partitions(1)
async def test_the_mcp_audit_writer_writes_again_after_a_burnt_sequence(runtime: Runtime) -> None:
    await limit_topics(runtime, runtime.topics.audit)
    writer = AuditWriter(runtime.settings)
    change = PinChange("srv", "lookup", PinState.CHANGED, "sha256:aa", "sha256:bb")
    try:
        await writer.write(change)
        await burn_a_sequence(writer, runtime.topics.audit)
        await writer.write(change)  # before the renewal: logged OutOfOrderSequenceNumber, lost
        await writer.write(change)
    finally:
        await writer.stop()
    written = await records(runtime, runtime.topics.audit)
    assert len(written) == 3  # the same audit record (stable audit_id) each time
    assert len({r.value.split(b'"ts"')[0] for r in written}) == 1


@pytest.mark.partitions(1)
async def test_sends_waiting_on_one_broken_producer_share_one_renewal(runtime: Runtime) -> None:
    await limit_topics(runtime, runtime.topics.fragments)
    before = renewals("adapter", "OutOfOrderSequenceNumber")
    async with Publisher(runtime.settings) as publisher:
        await publisher.publish(call_events("acme", "t-0", "c1", "{}"))
        await burn_a_sequence(publisher, runtime.topics.fragments)
        turns = [call_events("acme", f"t-{i}", "c1", '{"city": "Oslo"}') for i in range(1, 9)]
        counts = await asyncio.gather(*(publisher.publish(events) for events in turns))
        assert counts == [len(events) for events in turns]
        assert publisher.producers.generation == 2  # one new producer, not one per send
    assert renewals("adapter", "OutOfOrderSequenceNumber") == before + 1
    written = [r.value for r in await records(runtime, runtime.topics.fragments)]
    for events in turns:  # every turn whole, and its first copies in order
        first = [written.index(encode(e)) for e in events]
        assert first == sorted(first)


@pytest.mark.partitions(1)
async def test_a_replacement_that_cannot_start_ends_the_sends_within_the_bound(
    runtime: Runtime,
) -> None:
    """While no broker answers, a renewal gives up after ``start_timeout``, and every send
    waiting on it gets its error then (one wait, not one each); the next send starts a producer
    again and goes through once the cluster answers."""
    await limit_topics(runtime, runtime.topics.fragments)
    target: dict[str, Any] = {}

    def make() -> AIOKafkaProducer:
        options = {**runtime.settings.kafka_client_kwargs(), **target}
        return AIOKafkaProducer(**options, enable_idempotence=True, acks="all")

    producers = RenewingProducer(make, "adapter", start_timeout=2.0)
    await producers.start()
    record = Outgoing(runtime.topics.fragments, b"{}", b"k", partition=0)
    try:
        await producers.send_all([record])
        burnt = producers.current
        assert burnt is not None
        with pytest.raises(MessageSizeTooLargeError):
            await burnt.send_and_wait(record.topic, b"x" * (2 * LIMIT), partition=0)
        target["bootstrap_servers"] = f"127.0.0.1:{free_port()}"  # nothing answers there
        began = time.monotonic()
        sends = [producers.send_all([record]) for _ in range(4)]
        results = await asyncio.gather(*sends, return_exceptions=True)
        took = time.monotonic() - began
        assert [type(r) for r in results] == [KafkaConnectionError] * 4, results
        assert 2.0 <= took < 6.0, took
        target.clear()  # the cluster answers again
        assert len(await producers.send_all([record])) == 1
        assert producers.generation == 2
    finally:
        await producers.stop()
