"""The commit step hands each partition's records over as closed batches, in order.

``processor.kafka.batches.send_batched`` builds the batches itself (``send_batch``). Two aiokafka
behaviours made that slow: an open batch waits ``linger_ms`` for records that will never come, and
a second batch for a partition is accepted only once the first has left. So batches are closed
when handed over, and the worker's producers (``transaction.producer_kwargs``) build batches of up to
``producer_batch_bytes``: a step's records for one partition leave in one batch.

Checked on the real broker: one closed batch per partition for a 500-record step; with a linger
longer than the commit deadline the step still commits (an open batch would sit out the linger
and miss the deadline); batches split by a small ``producer_batch_bytes`` keep the records'
order, and the changelog position after the last record is right.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from processor.kafka.codec import Outbound
from processor.runtime import transaction
from processor.runtime.transaction import CommitPlan
from processor.settings import Settings
from tests.kafka_broker import create_topics, delete_topics, read_partition

pytestmark = pytest.mark.integration

OUTPUT_PARTITIONS = 3


async def _read(bootstrap: str, tp: TopicPartition) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every committed record of ``tp``."""
    records = await read_partition(tp, bootstrap_servers=bootstrap)
    return [(r.offset, r.key or b"", r.value or b"") for r in records]


def _plan(prefix: str, changes: int, outputs: int) -> CommitPlan:
    """``changes`` changelog records of ~300 bytes for partition 0, and ``outputs`` keyless
    output records spread over the output topic's partitions."""
    plan = CommitPlan()
    for i in range(changes):
        value = (f"change {i:05d} " + "x" * 290).encode()
        plan.changelog.append(Outbound(f"{prefix}changelog", f"k{i}".encode(), value, [], 0))
    for i in range(outputs):
        value = f"output {i:05d}".encode()
        plan.outputs.append(
            Outbound(f"{prefix}out", f"o{i}".encode(), value, [], i % OUTPUT_PARTITIONS)
        )
    return plan


async def _commit_and_watch(
    bootstrap: str, prefix: str, plan: CommitPlan, settings: Settings, **overrides: Any
) -> tuple[transaction.Committed, list[tuple[str, int, bool, int]]]:
    """Commit ``plan`` with a producer configured as the worker's; every batch handed over:
    (topic, partition, closed, records)."""
    kwargs = {
        **transaction.producer_kwargs(settings, client_id="commit-batches"),
        "bootstrap_servers": bootstrap,
        **overrides,
    }
    producer = AIOKafkaProducer(transactional_id=f"{prefix}txn", **kwargs)
    await producer.start()
    handed: list[tuple[str, int, bool, int]] = []
    send_batch = producer.send_batch

    async def watched(batch: Any, topic: str, *, partition: int) -> Any:
        handed.append((topic, partition, batch.closed(), batch.record_count()))
        return await send_batch(batch, topic, partition=partition)

    producer.send_batch = watched  # the real producer, observed
    try:
        committed = await transaction.commit(producer, plan, group_id=f"{prefix}g", timeout=3.0)
    finally:
        await producer.stop()
    return committed, handed


@pytest.fixture
async def topics(kafka_bootstrap: str, topic_prefix: str) -> Any:
    prefix = f"{topic_prefix}{uuid.uuid4().hex[:6]}."
    names = {f"{prefix}changelog": 1, f"{prefix}out": OUTPUT_PARTITIONS}
    await create_topics(kafka_bootstrap, names)
    yield prefix
    await delete_topics(kafka_bootstrap, list(names))


async def test_a_step_leaves_as_one_closed_batch_per_partition(
    kafka_bootstrap: str, topics: str
) -> None:
    plan = _plan(topics, changes=500, outputs=60)  # ~150 KB of changelog: ten 16 KiB batches
    committed, handed = await _commit_and_watch(kafka_bootstrap, topics, plan, Settings())
    assert sorted((t, p) for t, p, _, _ in handed) == sorted(
        [(f"{topics}changelog", 0)] + [(f"{topics}out", p) for p in range(OUTPUT_PARTITIONS)]
    )
    assert all(closed for _, _, closed, _ in handed)
    changelog = await _read(kafka_bootstrap, TopicPartition(f"{topics}changelog", 0))
    assert [key for _, key, _ in changelog] == [f"k{i}".encode() for i in range(500)]
    assert committed.changelog_next == changelog[-1][0] + 1
    for p in range(OUTPUT_PARTITIONS):
        out = await _read(kafka_bootstrap, TopicPartition(f"{topics}out", p))
        assert [v for _, _, v in out] == [
            f"output {i:05d}".encode() for i in range(p, 60, OUTPUT_PARTITIONS)
        ]


async def test_a_step_does_not_wait_out_the_linger(kafka_bootstrap: str, topics: str) -> None:
    """A linger longer than the commit's 3 s deadline: an open batch would wait it out and the
    step would fail with ``timeout``; closed batches leave at once."""
    plan = _plan(topics, changes=20, outputs=6)
    committed, _ = await _commit_and_watch(
        kafka_bootstrap, topics, plan, Settings(), linger_ms=10_000
    )
    assert committed.changelog_next is not None
    changelog = await _read(kafka_bootstrap, TopicPartition(f"{topics}changelog", 0))
    assert len(changelog) == 20


async def test_small_batches_keep_the_order_and_the_changelog_position(
    kafka_bootstrap: str, topics: str
) -> None:
    plan = _plan(topics, changes=300, outputs=30)
    settings = Settings(producer_batch_bytes=4096)  # ~13 records a batch
    committed, handed = await _commit_and_watch(kafka_bootstrap, topics, plan, settings)
    changelog_batches = [n for t, _, _, n in handed if t == f"{topics}changelog"]
    assert len(changelog_batches) > 10 and sum(changelog_batches) == 300
    changelog = await _read(kafka_bootstrap, TopicPartition(f"{topics}changelog", 0))
    assert [value for _, _, value in changelog] == [v.value for v in plan.changelog]
    assert committed.changelog_next == changelog[-1][0] + 1
