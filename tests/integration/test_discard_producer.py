"""A producer whose transaction failed is discarded without delivering what it still holds.

``AIOKafkaProducer.stop()`` flushes pending batches; after a failed transaction that is a zombie
write (a broker without KIP-890 can fold a late write into the producer id's next transaction,
which the chaos suite caught as a dispatch record of an aborted transaction).
``discard_producer`` cancels the sender and drops the batches. Here a batch is held back by
``linger_ms`` so that it is still pending when the producer goes: with ``stop()`` it reaches the
broker, with ``discard_producer`` it never does, and the next producer of the transactional id
commits only its own record.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from processor.kafka.clients import discard_producer
from tests.kafka_broker import create_topics, delete_topics

pytestmark = pytest.mark.integration


async def _values(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[bytes] = []
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            out += [r.value for r in batch.get(tp, []) if r.value is not None]
        return out
    finally:
        await consumer.stop()


async def _scenario(bootstrap: str, prefix: str, *, discard: bool) -> tuple[list[bytes], ...]:
    topic = f"{prefix}out"
    txn = f"{prefix}txn"
    await create_topics(bootstrap, {topic: 1})
    try:
        old = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn, linger_ms=5_000)
        await old.start()
        await old.begin_transaction()
        pending = await old.send(topic, b"from the failed transaction")
        await asyncio.sleep(0.2)
        assert not pending.done()  # still held by the producer, as after a broker outage
        if discard:
            await discard_producer(old)
        else:
            await old.stop()  # flushes: the pending record is delivered now
        await old.stop()  # a no-op after discard_producer
        new = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn)
        await new.start()  # InitProducerId: aborts whatever the old one left open
        try:
            async with new.transaction():
                await new.send_and_wait(topic, b"from the next transaction")
        finally:
            await new.stop()
        assert pending.done()
        committed = await _values(bootstrap, topic, "read_committed")
        everything = await _values(bootstrap, topic, "read_uncommitted")
        return committed, everything
    finally:
        await delete_topics(bootstrap, [topic])


async def test_a_discarded_producer_never_delivers_its_pending_records(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    committed, everything = await _scenario(kafka_bootstrap, topic_prefix, discard=True)
    assert committed == [b"from the next transaction"]
    assert everything == [b"from the next transaction"]


async def test_stop_would_have_delivered_them(kafka_bootstrap: str) -> None:
    """The control: ``stop()`` does deliver the failed transaction's pending record."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    committed, everything = await _scenario(kafka_bootstrap, prefix, discard=False)
    assert b"from the failed transaction" in everything
    assert committed == [b"from the next transaction"]
