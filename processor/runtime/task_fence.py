"""Partition p's fence: its transactional producer, and what the previous owner left open.

:meth:`TaskFence.fence` is the first half of a preparation (see
:mod:`processor.runtime.partition`): it closes the task's previous producer and takes
``transactional.id = f"{application_id}-{p}"`` through the one owner fence the executor uses
too (:class:`~processor.kafka.owner_fence.OwnerFence`: the previous transaction decided, a
commit we may not mark held, InitProducerId, this producer id's hanging transactions ended; all
bounded). Its state: the producer, the owner fence's, and the sweep schedule for skipped commit
markers.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from processor.core.events import OUTPUT_TOPIC
from processor.kafka import hanging
from processor.kafka.owner_fence import OwnerFence
from processor.kafka.partitioner import default_partitioner
from processor.runtime import transaction
from processor.settings import Settings

# how long after a transaction's timeout a coordinator may take to abort it
# (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default) and a margin
_COORDINATOR_ABORT_INTERVAL_S: Final = 15.0


class TaskFence:
    """Partition p's transactional producer and the state of its fence."""

    def __init__(self, partition: int, settings: Settings) -> None:
        self.partition = partition
        self.settings = settings
        self.topics = settings.topics
        self.producer: AIOKafkaProducer | None = None
        # the take of the partition's transactional id (processor.kafka.owner_fence); a new
        # task does not know how its partition's last owner (another worker, or this one before
        # the rebalance) ended, so its first fence waits for a commit in doubt to be decided
        self.owner = OwnerFence(settings.transactional_id(partition), "worker")
        # the sweep for commit markers the coordinator skipped (sweep_skipped)
        self.sweeps = hanging.SweepSchedule()

    @property
    def transactional_id(self) -> str:
        return self.owner.transactional_id

    @property
    def in_doubt(self) -> bool:
        """The last commit failed after its EndTxn was sent: the next fence waits for the
        coordinator to decide that transaction (:func:`hanging.decided_previous`)."""
        return self.owner.in_doubt

    @in_doubt.setter
    def in_doubt(self, value: bool) -> None:
        self.owner.in_doubt = value

    async def fence(self, client: Any) -> None:
        """Close the previous producer, then take the id (:meth:`OwnerFence.take`);
        :attr:`producer` is the new one. Raises on failure or timeout."""
        s = self.settings
        await self.close_producer()

        def make_producer() -> AIOKafkaProducer:
            return AIOKafkaProducer(
                transactional_id=self.transactional_id,
                partitioner=default_partitioner,
                **transaction.producer_kwargs(s, client_id=f"{s.client_id}-txn-{self.partition}"),
            )

        self.producer = await self.owner.take(
            client, s, make_producer, self._output_partitions, what=f"partition {self.partition}"
        )

    async def close_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), 10)

    async def sweep_skipped(self, now: float) -> None:
        """Between two transactions: COMMIT what the coordinator committed for us without a
        marker on an output partition (:func:`~processor.kafka.hanging.end_skipped_commits`),
        when :attr:`sweeps` says it is due (bounded; one that fails is tried again later)."""
        if self.producer is None:
            return
        await hanging.sweep(
            self.producer,
            self.sweeps,
            now,
            transactional_id=self.transactional_id,
            topics=sorted({self.topics.output(kind) for kind in OUTPUT_TOPIC.values()}),
            also=[TopicPartition(self.topics.changelog, self.partition)],
            owner="worker",
            partition=self.partition,
        )

    async def _output_partitions(self, client: Any) -> list[TopicPartition]:
        """Every partition of the output topics (records are routed by key) and changelog
        partition p: where this task's transactions write."""
        outputs = sorted({self.topics.output(kind) for kind in OUTPUT_TOPIC.values()})
        partitions = await hanging.partitions_of(client, outputs)
        partitions.append(TopicPartition(self.topics.changelog, self.partition))
        return partitions
