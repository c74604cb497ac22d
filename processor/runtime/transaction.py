"""The commit step: one batch's outputs, changelog records and offsets in one Kafka transaction.

Numbered and bounded, like Quix Streams' checkpoint commit::

    1. begin the transaction
    2. send the output records (dispatch, proposals, status, ledger, audit, deadletter)
    3. send the changelog records to changelog partition p
    4. wait until every record is acknowledged
    5. add the consumed offsets (``send_offsets_to_transaction``, TxnOffsetCommit)
    6. commit (from here on a failure is *in doubt*: the coordinator may still commit)

The whole step runs under one deadline (``commit_timeout_seconds``, below the transaction timeout,
itself below the session timeout). Any error discards the producer on the spot, without
delivering what it still holds and without a client-side abort
(:func:`~processor.kafka.clients.discard_producer`: a late delivery of a failed transaction's
records is a zombie write that a later transaction of the same producer id would commit), and
raises :class:`TransactionFailed` with a cause; the caller rebuilds the partition from the
changelog and the committed offsets with a new producer, whose ``InitProducerId`` aborts the
open transaction and settles one that may or may not have committed.

Step 4 is an aiokafka caveat: a failed produce request does not put aiokafka's transaction into
an abortable state (only failures of AddPartitionsToTxn, AddOffsetsToTxn and TxnOffsetCommit do),
so without it a commit could succeed with records missing. We await every delivery future first.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from processor.core.errors import KafkaStepError
from processor.kafka.batches import send_batched
from processor.kafka.clients import discard_producer, settle_unawaited
from processor.kafka.codec import Outbound
from processor.settings import Settings


def producer_kwargs(settings: Settings, *, client_id: str) -> dict[str, Any]:
    """The settings of a producer that runs this commit step (without its transactional id).

    Batches up to ``producer_batch_bytes`` (never above ``max_message_bytes``): a step's
    records for one partition then leave in one batch. aiokafka accepts a second batch for a
    partition only once the first has left, so small batches make the sends of a step wait on
    one another (the changelog of a 500-record step took five or six 16 KiB batches).
    """
    return {
        **settings.kafka_client_kwargs(),
        "client_id": client_id,
        "transaction_timeout_ms": settings.transaction_timeout_ms,
        "max_request_size": settings.max_message_bytes,
        "max_batch_size": min(settings.producer_batch_bytes, settings.max_message_bytes),
        "linger_ms": 5,
    }


class TransactionFailed(KafkaStepError):
    """The batch's transaction did not commit, as far as we know. ``cause``: timeout, fenced,
    kafka_error, error. ``in_doubt``: it failed after its EndTxn(commit) was sent, so the
    coordinator may still commit it (:func:`processor.kafka.hanging.decided_previous`)."""

    def __init__(self, cause: str, detail: str, *, in_doubt: bool = False) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.detail = detail
        self.in_doubt = in_doubt


@dataclass
class CommitPlan:
    """Everything one transaction writes. ``offsets``: input partition → next offset to read."""

    outputs: list[Outbound] = field(default_factory=list)
    changelog: list[Outbound] = field(default_factory=list)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.outputs or self.changelog or self.offsets)


@dataclass(frozen=True)
class Committed:
    """A committed transaction: how long it took and where its changelog records ended."""

    seconds: float
    changelog_next: int | None  # offset after the last changelog record written (None: none)


async def commit(
    producer: AIOKafkaProducer, plan: CommitPlan, *, group_id: str, timeout: float
) -> Committed:
    """Run the numbered commit step and return what it committed, or raise TransactionFailed."""
    started = time.monotonic()
    began = ending = False
    futures: list[asyncio.Future[Any]] = []
    changes: list[asyncio.Future[Any]] = []
    try:
        async with asyncio.timeout(timeout):
            await producer.begin_transaction()  # 1
            began = True
            await send_batched(producer, plan.outputs, futures)  # 2
            last_change = await send_batched(producer, plan.changelog, changes)  # 3
            delivered = await asyncio.gather(*futures, *changes)  # 4
            if plan.offsets:  # 5
                await producer.send_offsets_to_transaction(
                    {tp: OffsetAndMetadata(offset, "") for tp, offset in plan.offsets.items()},
                    group_id,
                )
            ending = True
            await producer.commit_transaction()  # 6
    except BaseException as exc:
        settle_unawaited([*futures, *changes])
        failure = _classify(exc)
        failure.in_doubt = ending
        if began:
            # never abort client-side and never flush: what the producer still holds belongs to
            # a transaction that must not commit, and a late delivery of it is a zombie write
            # (see clients.discard_producer); the next InitProducerId of this transactional id
            # aborts the transaction on the coordinator.
            await discard_producer(producer)
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise failure from exc
    changelog_next = None
    if changes:  # the changelog is one partition: its last batch holds its last record
        changelog_next = delivered[-1].offset + last_change
    return Committed(time.monotonic() - started, changelog_next)


def _classify(exc: BaseException) -> TransactionFailed:
    if isinstance(exc, TransactionFailed):
        return exc
    if isinstance(exc, TimeoutError):
        return TransactionFailed("timeout", "the commit step exceeded its deadline")
    if isinstance(exc, ProducerFenced):
        return TransactionFailed("fenced", "another producer owns this transactional id")
    if isinstance(exc, KafkaError):
        return TransactionFailed("kafka_error", type(exc).__name__)
    # aiokafka reports a producer in FATAL_ERROR state as a bare AssertionError on later calls
    return TransactionFailed("error", type(exc).__name__)
