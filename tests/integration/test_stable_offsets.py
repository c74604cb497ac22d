"""A group's committed offsets read as stable offsets (KIP-447), on the real broker.

``stable_committed`` (OffsetFetch v7, ``require_stable``) never answers the offset before a
transaction whose offsets for the group are pending: while a transactional producer has called
``send_offsets_to_transaction`` and not committed, it fails (its bound passes) where aiokafka's
``consumer.committed`` (OffsetFetch v3) answers the previous offset; right after the commit it
answers the new one; with nothing committed, None. The worker's preparation and the executor's
take read their resume point this way after their fence (docs/reliability.md, seed 5).
"""

from __future__ import annotations

import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from processor.kafka.stable_offsets import (
    UNSTABLE_OFFSET_COMMIT,
    StableOffsetsError,
    stable_committed,
)
from tests.kafka_broker import create_topics, delete_topics

pytestmark = pytest.mark.integration


async def test_pending_transactional_offsets_are_never_answered_as_the_old_ones(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic, group = f"{topic_prefix}in", f"{topic_prefix}group"
    await create_topics(kafka_bootstrap, {topic: 2})
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    member = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False
    )
    txn = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic_prefix}t")
    await member.start()
    await txn.start()
    try:
        client = member._client
        # nothing committed: None for each
        assert await stable_committed(client, group, [p0, p1], timeout=10) == {p0: None, p1: None}

        await txn.begin_transaction()
        await txn.send_offsets_to_transaction({p0: OffsetAndMetadata(3, "")}, group)
        await txn.commit_transaction()
        # right after the commit (its marker may not be applied yet): the new offset, at once
        assert await stable_committed(client, group, [p0, p1], timeout=10) == {p0: 3, p1: None}

        await txn.begin_transaction()
        await txn.send_offsets_to_transaction({p0: OffsetAndMetadata(7, "")}, group)
        # pending: OffsetFetch v3 answers the previous offset; the stable read never does
        assert await member.committed(p0) == 3
        started = time.monotonic()
        with pytest.raises(
            StableOffsetsError,
            match=r"not stable within 1 s \(last: UNSTABLE_OFFSET_COMMIT on .*in-0\)",
        ) as caught:
            await stable_committed(client, group, [p0, p1], timeout=1.0)
        assert caught.value.code == UNSTABLE_OFFSET_COMMIT
        assert time.monotonic() - started < 5
        # another partition of the group, with nothing pending, is stable meanwhile
        assert await stable_committed(client, group, [p1], timeout=10) == {p1: None}

        await txn.commit_transaction()
        assert await stable_committed(client, group, [p0, p1], timeout=10) == {p0: 7, p1: None}
    finally:
        await txn.stop()
        await member.stop()
        await delete_topics(kafka_bootstrap, [topic])
