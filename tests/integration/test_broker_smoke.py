"""Smoke tests against a real Kafka broker: the aiokafka features the processor relies on.

Covers plain produce/consume with group offset commits, and the exactly-once pieces:
transactional produce + ``send_offsets_to_transaction`` (TxnOffsetCommit), abort
invisibility under ``read_committed``, and producer fencing by transactional id.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from tests.kafka_broker import create_topics, delete_topics

pytestmark = pytest.mark.integration


async def _consume(consumer: AIOKafkaConsumer, n: int, timeout: float = 20.0) -> list:
    """Read until ``n`` records arrived or ``timeout`` passed; return what was read."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        batches = await consumer.getmany(timeout_ms=500)
        for records in batches.values():
            out.extend(records)
    return out


async def _drain(consumer: AIOKafkaConsumer, quiet: float = 2.0) -> list:
    """Read until no record arrives for ``quiet`` seconds (to prove absence)."""
    out: list = []
    last = time.monotonic()
    while time.monotonic() - last < quiet:
        batches = await consumer.getmany(timeout_ms=300)
        for records in batches.values():
            out.extend(records)
            last = time.monotonic()
    return out


def _reader(bootstrap: str, *topics: str, isolation: str = "read_committed") -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level=isolation,
    )


@contextlib.asynccontextmanager
async def _started(*clients):
    started = []
    try:
        for c in clients:
            await c.start()
            started.append(c)
        yield clients
    finally:
        for c in reversed(started):
            with contextlib.suppress(Exception):
                await c.stop()


async def test_produce_consume_round_trip(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}rt"
    group = f"{topic_prefix}g"
    await create_topics(kafka_bootstrap, {topic: 2})
    try:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        async with _started(producer, consumer):
            sent = {(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)}
            for key, value in sorted(sent):
                await producer.send(topic, value=value, key=key)
            await producer.flush()

            records = await _consume(consumer, len(sent))
            assert {(r.key, r.value) for r in records} == sent

            # group offset commit (OffsetCommit) and read-back (OffsetFetch)
            await consumer.commit()
            committed = {tp: await consumer.committed(tp) for tp in consumer.assignment()}
            ends = await consumer.end_offsets(list(consumer.assignment()))
            assert committed == ends
            assert sum(committed.values()) == len(sent)
    finally:
        await delete_topics(kafka_bootstrap, [topic])


async def test_transaction_with_offsets_commits_atomically(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    src, dst = f"{topic_prefix}in", f"{topic_prefix}out"
    group = f"{topic_prefix}g"
    await create_topics(kafka_bootstrap, {src: 1, dst: 1})
    try:
        plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        source = AIOKafkaConsumer(
            src,
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        txn = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic_prefix}tx"
        )
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        async with _started(plain, source, txn):
            for i in range(5):
                await plain.send(src, f"in{i}".encode())
            await plain.flush()
            inputs = await _consume(source, 5)
            assert len(inputs) == 5

            tp = TopicPartition(src, 0)
            next_offset = inputs[-1].offset + 1
            async with txn.transaction():
                for rec in inputs:
                    await txn.send(dst, rec.value.replace(b"in", b"out"))
                await txn.send_offsets_to_transaction(
                    {tp: OffsetAndMetadata(next_offset, "")}, group
                )

            async with _started(_reader(kafka_bootstrap, dst)) as (reader,):
                out = await _consume(reader, 5)
            assert [r.value for r in out] == [f"out{i}".encode() for i in range(5)]

            # The group's committed offset is the one sent inside the transaction. It turns
            # visible once the coordinator has written the commit marker to
            # __consumer_offsets, which happens *after* EndTxn returns; aiokafka's
            # OffsetFetch (v3, no require_stable) may return the previous offset until
            # then, so poll briefly.
            await admin.start()
            try:
                deadline = time.monotonic() + 10
                while True:
                    offsets = await admin.list_consumer_group_offsets(group)
                    got = offsets.get(tp)
                    if (got is not None and got.offset == next_offset) or (
                        time.monotonic() > deadline
                    ):
                        break
                    await asyncio.sleep(0.05)
            finally:
                await admin.close()
            assert got is not None
            assert got.offset == next_offset
            assert await source.committed(tp) == next_offset
    finally:
        await delete_topics(kafka_bootstrap, [src, dst])


async def test_aborted_transaction_is_invisible_to_read_committed(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}abort"
    await create_topics(kafka_bootstrap, {topic: 1})
    try:
        txn = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic_prefix}tx"
        )
        async with _started(txn):
            await txn.begin_transaction()
            for i in range(3):
                await txn.send_and_wait(topic, f"aborted{i}".encode())
            await txn.abort_transaction()

            async with txn.transaction():
                await txn.send_and_wait(topic, b"committed")

        async with _started(_reader(kafka_bootstrap, topic)) as (committed_reader,):
            seen = await _consume(committed_reader, 1)
            seen += await _drain(committed_reader)
        assert [r.value for r in seen] == [b"committed"]

        # the aborted records really were written: read_uncommitted sees them
        async with _started(_reader(kafka_bootstrap, topic, isolation="read_uncommitted")) as (
            dirty_reader,
        ):
            dirty = await _consume(dirty_reader, 4)
        assert [r.value for r in dirty] == [b"aborted0", b"aborted1", b"aborted2", b"committed"]
    finally:
        await delete_topics(kafka_bootstrap, [topic])


async def test_second_producer_with_same_transactional_id_fences_the_first(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}fence"
    tid = f"{topic_prefix}tx"
    await create_topics(kafka_bootstrap, {topic: 1})
    try:
        old = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid)
        new = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid)
        async with _started(old):
            await old.begin_transaction()
            await old.send_and_wait(topic, b"zombie")

            # InitProducerId for the same transactional.id bumps the epoch and aborts
            # the old producer's open transaction
            async with _started(new):
                with pytest.raises(ProducerFenced):
                    await old.commit_transaction()

                async with new.transaction():
                    await new.send_and_wait(topic, b"survivor")

                # a fenced producer stays unusable; aiokafka 0.14 reports the FATAL_ERROR
                # state on later calls as a bare AssertionError ("Invalid state transition")
                with pytest.raises((KafkaError, AssertionError)):
                    await old.begin_transaction()

        async with _started(_reader(kafka_bootstrap, topic)) as (reader,):
            seen = await _consume(reader, 1)
            seen += await _drain(reader)
        assert [r.value for r in seen] == [b"survivor"]
    finally:
        await delete_topics(kafka_bootstrap, [topic])


async def test_broker_answers_quickly(kafka_bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await asyncio.wait_for(admin.start(), 10)
    try:
        info = await admin.describe_cluster()
    finally:
        await admin.close()
    assert info["brokers"]
