"""The owner fence: taking a transactional id from its previous owner, once for everyone.

A worker's partition task (:mod:`processor.runtime.task_fence`) and an executor's owned
partition (:mod:`processor.executor.transactions`) take their transactional id the same way,
through :meth:`OwnerFence.take`, in this order and under one bound (twice the request timeout:
aiokafka retries InitProducerId and waits for metadata without an end of its own, and a
whole-cluster restart once held a partition silent for 325 s):

1. how the coordinator left the id's last transaction, before InitProducerId forgets it, waiting
   while a commit in doubt is undecided (:func:`~processor.kafka.hanging.decided_previous`);
   a retry keeps what an unfinished try read (:func:`~processor.kafka.hanging.across_retries`);
2. held (``TransactionHeld``) before a commit the coordinator made without a marker that this
   principal may not write (:func:`~processor.kafka.hanging.hold_before_fence`);
3. InitProducerId (the new producer's start): fences every older producer of the id;
4. the id's transactions still open on the owner's output partitions ended as the coordinator
   decided them (:func:`~processor.kafka.hanging.end_own_hanging`), before anything is written.

Past the bound the take fails with the step it was in (``KafkaTimeoutError``) and is tried
again later with a new producer; a producer that was started is discarded, never flushed. Its
state: the id, whether the last transaction is in doubt, and what an unfinished take read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError
from aiokafka.structs import TopicPartition

from processor.kafka import hanging
from processor.kafka.clients import discard_producer
from processor.settings import Settings

__all__ = ["OwnerFence"]

# how long after a transaction's timeout a coordinator may take to abort it
# (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default) and a margin
_COORDINATOR_ABORT_INTERVAL_S: Final = 15.0

Partitions = Callable[[Any], Awaitable[list[TopicPartition]]]
"""Where the owner's transactions write, looked up on the given client."""


@dataclass
class OwnerFence:
    """One transactional id's fence and its state across takes."""

    transactional_id: str
    owner: str  # "worker" or "executor": named in the held line and the logs
    # the last commit failed after its EndTxn was sent, or the take does not know how the last
    # owner ended: the next take waits for the coordinator to decide that transaction
    in_doubt: bool = True
    # what the last unfinished take read of the transaction before it
    fenced_before: hanging.Previous | None = None

    async def take(
        self,
        client: Any,
        settings: Settings,
        make_producer: Callable[[], AIOKafkaProducer],
        partitions: Partitions,
        *,
        what: str,
    ) -> AIOKafkaProducer:
        """Steps 1-4 of the module docstring on ``client`` (one that answers while the owner's
        consumer long-polls); the started producer. ``what`` names the owner's partition in a
        timeout's message. Raises on failure or past the bound."""
        limit = 2 * settings.request_timeout_ms / 1000
        producer: AIOKafkaProducer | None = None
        phase = "reading the previous transaction's state"  # named by a timeout: its diagnosis
        try:
            async with asyncio.timeout(limit):
                previous = await hanging.decided_previous(
                    client,
                    self.transactional_id,
                    in_doubt=self.in_doubt,
                    bound=settings.transaction_timeout_ms / 1000 + _COORDINATOR_ABORT_INTERVAL_S,
                )
                self.in_doubt = False  # decided: what it says of the last transaction is final
                # a try whose InitProducerId went through unanswered left the id Empty
                previous = hanging.across_retries(previous, self.fenced_before)
                self.fenced_before = previous  # until the hanging ones are ended
                phase = "checking for a commit we may not write"
                await hanging.hold_before_fence(
                    client,
                    previous=previous,
                    transactional_id=self.transactional_id,
                    partitions=await partitions(client),
                    owner=self.owner,
                    bootstrap=settings.bootstrap_servers,
                )
                producer = make_producer()
                phase = "InitProducerId"
                await producer.start()  # fences every older producer of this id
                phase = "ending hanging transactions"
                await hanging.end_own_hanging(
                    producer.client,
                    producer_id=producer._txn_manager.producer_id,
                    transactional_id=self.transactional_id,
                    partitions=await partitions(producer.client),
                    owner=self.owner,
                    bootstrap=settings.bootstrap_servers,
                    previous=previous,
                )
                self.fenced_before = None
        except BaseException as exc:
            if producer is not None:
                await discard_producer(producer)
            if isinstance(exc, TimeoutError):
                raise KafkaTimeoutError(
                    f"fencing {what} took over {limit:.0f} s ({phase})"
                ) from None
            raise
        return producer
