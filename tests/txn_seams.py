"""The one place tests reach into aiokafka's internals (a fixture seam, issue 41).

aiokafka has no public view of a transactional producer's id and epoch, nor a way to write to
a partition the coordinator was never told of (which is how a test builds the seed-19 shape: a
transaction completed without a marker on one partition), nor of a client's cluster connection
(which the admin requests the processor's own helpers take go through). Tests go through these
functions, so a change of aiokafka's internals breaks them here, in one place, with a name that
says what they need.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition


def cluster_client(client: AIOKafkaConsumer | AIOKafkaProducer) -> Any:
    """The started consumer's or producer's connection to the cluster (aiokafka's
    ``AIOKafkaClient``): what processor.kafka.hanging's admin requests take."""
    return client._client


def producer_identity(producer: AIOKafkaProducer) -> tuple[int, int]:
    """The started transactional producer's (producer id, epoch)."""
    manager = producer._txn_manager
    assert manager is not None, "not a transactional producer"
    return int(manager.producer_id), int(manager.producer_epoch)


def write_unannounced(producer: AIOKafkaProducer, partition: TopicPartition) -> None:
    """Let the open transaction write to ``partition`` without telling the coordinator
    (AddPartitionsToTxn is skipped for it): its marker is then never written there."""
    assert producer._txn_manager is not None, "not a transactional producer"
    producer._txn_manager._txn_partitions.add(partition)
