"""Partition p's fence: its transactional producer, and what the previous owner left open.

:meth:`TaskFence.fence` is the first half of a preparation (see
:mod:`processor.runtime.partition`): it closes the task's previous producer, reads how the
coordinator left the id's last transaction, holds the task (``TransactionHeld``) before a commit
made without a marker that we may not write, starts a transactional producer with
``transactional.id = f"{application_id}-{p}"`` (its InitProducerId fences every older producer
of that id and aborts its open transaction), and ends any transaction of its producer id still
open on an output partition (:mod:`processor.runtime.hanging`). All of it bounded by twice the
request timeout. Its state: the producer, whether the last transaction is in doubt, what an
unfinished fence read before, and the sweep schedule for skipped commit markers.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError
from aiokafka.structs import TopicPartition

from processor.core.events import OUTPUT_TOPIC
from processor.runtime import hanging, transaction
from processor.runtime.partitioner import default_partitioner
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
        # the last commit failed after its EndTxn was sent: the next fence waits for the
        # coordinator to decide that transaction (hanging.decided_previous). A new task does
        # not know how its partition's last owner (another worker, or this one before the
        # rebalance) ended, so its first fence waits too
        self.in_doubt = True
        # what the last unfinished fence read of the transaction before it (hanging.across_retries)
        self.fenced_before: hanging.Previous | None = None
        # the sweep for commit markers the coordinator skipped (sweep_skipped)
        self.sweeps = hanging.SweepSchedule()

    @property
    def transactional_id(self) -> str:
        return self.settings.transactional_id(self.partition)

    async def fence(self, client: Any) -> None:
        """Close the previous producer, then fence and end what is left open (see the module
        docstring); :attr:`producer` is the new one. Raises on failure or timeout."""
        s = self.settings
        await self.close_producer()
        # The fence, bounded: aiokafka retries InitProducerId and waits for metadata without
        # an end of its own, and a whole-cluster restart once held a partition here, silent,
        # for 325 s (chaos seed 4 on three brokers); past the bound the preparation fails with
        # a logged cause and is tried again with a new producer and fresh lookups.
        limit = 2 * s.request_timeout_ms / 1000
        producer: AIOKafkaProducer | None = None
        phase = "reading the previous transaction's state"  # named by a timeout: its diagnosis
        try:
            async with asyncio.timeout(limit):
                # how the coordinator left this id's last transaction, before InitProducerId
                # forgets it
                previous = await hanging.decided_previous(
                    client,
                    self.transactional_id,
                    in_doubt=self.in_doubt,
                    bound=s.transaction_timeout_ms / 1000 + _COORDINATOR_ABORT_INTERVAL_S,
                )
                self.in_doubt = False  # decided: what it says of the last transaction is final
                # a try whose InitProducerId went through unanswered left the id Empty
                previous = hanging.across_retries(previous, self.fenced_before)
                self.fenced_before = previous  # until the hanging ones are ended
                # a commit the coordinator made without a marker here, which we may not
                # write: held here, before InitProducerId makes the coordinator forget it
                phase = "checking for a commit we may not write"
                await hanging.hold_before_fence(
                    client,
                    previous=previous,
                    transactional_id=self.transactional_id,
                    partitions=await self._output_partitions(client),
                    owner="worker",
                    bootstrap=s.bootstrap_servers,
                )
                producer = AIOKafkaProducer(
                    transactional_id=self.transactional_id,
                    partitioner=default_partitioner,
                    **transaction.producer_kwargs(
                        s, client_id=f"{s.client_id}-txn-{self.partition}"
                    ),
                )
                phase = "InitProducerId"
                await producer.start()  # InitProducerId: fences older producers of this id
                phase = "ending hanging transactions"
                await self._end_hanging(producer, previous)  # before it writes anything
                self.fenced_before = None
        except BaseException as exc:
            if producer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.stop(), 5)
            if isinstance(exc, TimeoutError):
                raise KafkaTimeoutError(
                    f"fencing partition {self.partition} took over {limit:.0f} s ({phase})"
                ) from None
            raise
        self.producer = producer

    async def close_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), 10)

    async def sweep_skipped(self, now: float) -> None:
        """Between two transactions: COMMIT what the coordinator committed for us without a
        marker on an output partition (:func:`~processor.runtime.hanging.end_skipped_commits`),
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

    async def _end_hanging(
        self, producer: AIOKafkaProducer, previous: hanging.Previous | None
    ) -> None:
        """End what the coordinator left open of this producer id on the task's outputs.

        ``InitProducerId`` completed the id's previous transaction, but a coordinator that could
        not reach a leader completes an abort without that partition's marker, and our next
        commit marker there would make the aborted records visible (:mod:`.hanging`). Every
        partition of the output topics (records are routed by key) and changelog partition p.
        Raises :class:`~processor.runtime.hanging.TransactionHeld` when it may not."""
        await hanging.end_own_hanging(
            producer.client,
            producer_id=producer._txn_manager.producer_id,
            transactional_id=self.transactional_id,
            partitions=await self._output_partitions(producer.client),
            owner="worker",
            bootstrap=self.settings.bootstrap_servers,
            previous=previous,
        )
