"""The Kafka clients every process builds the same way, and reading a partition to its end.

- :func:`admin_client` — an ``AIOKafkaAdminClient`` as an async context manager;
- :func:`committed_reader` — a consumer without a group that reads committed records only
  (``read_committed``, manual offsets, from the earliest offset): restores, the executor's
  control barrier and ledger, ``tail`` and ``audit``;
- :func:`settle_unawaited`, :func:`ignore_fenced_leftovers` — what a failed transaction leaves
  behind (delivery futures, a fenced producer's internal waiters) is settled, not logged as an
  unhandled error;
- :func:`read_to_end` — consume one assigned partition until the consumer's *position* reaches an
  end offset. The last offsets of a transactional topic can be commit markers, which no record
  carries, and a compacted partition has holes, so "the last record has offset end - 1" may never
  happen; the position always gets there.

Transactional producers (one per input partition, ARCHITECTURE.md §5) are built where they are
fenced and used: :mod:`processor.runtime.partition` and :mod:`processor.executor.client`; the
long-lived idempotent ones, and their renewal after a fatal error, in
:mod:`processor.kafka.idempotent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.settings import Settings

_log = logging.getLogger(__name__)

__all__ = [
    "ProducerDiscarded",
    "admin_client",
    "committed_reader",
    "discard_producer",
    "ignore_fenced_leftovers",
    "read_to_end",
    "settle_unawaited",
    "stop_consumer",
]

# one wait of ``read_to_end``: short, because a fetch that holds only a transaction marker moves
# the position but returns no record, and ``getmany`` would then wait out its whole timeout
# (0.5 s at every restore from a local store and every barrier sync ending on a marker)
_POLL_STEP_SECONDS: Final = 0.02


@asynccontextmanager
async def admin_client(settings: Settings) -> AsyncIterator[AIOKafkaAdminClient]:
    """``async with admin_client(settings) as admin``: started, and closed on the way out."""
    admin = AIOKafkaAdminClient(**settings.kafka_client_kwargs())
    try:
        await admin.start()
        yield admin
    finally:
        await admin.close()


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()``, closing its client even when the broker is gone.

    With the broker gone, aiokafka's fetcher re-raises the cancellation of its own pending fetch
    requests from ``stop()``, before the consumer's client is closed ("Unclosed AIOKafkaConsumer"
    on exit). That inner cancellation is absorbed here and the client closed; a cancellation of
    the caller's own task still propagates.
    """
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        await consumer._client.close()


def committed_reader(settings: Settings, **extra: Any) -> AIOKafkaConsumer:
    """A consumer (not started) without a group: manual assignment and offsets, committed records
    only, from the earliest offset. ``extra`` adds or overrides consumer settings."""
    options: dict[str, Any] = {
        **settings.kafka_client_kwargs(),
        "group_id": None,
        "enable_auto_commit": False,
        "isolation_level": "read_committed",
        "auto_offset_reset": "earliest",
    }
    return AIOKafkaConsumer(**{**options, **extra})


async def read_to_end(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    end: int,
    apply: Callable[[ConsumerRecord], object],
    *,
    deadline: float,
    max_records: int | None = None,
) -> bool:
    """Feed ``apply`` the records of ``tp`` from the consumer's position until the position
    reaches ``end``; False when the ``time.monotonic()`` deadline passes first. The position is
    checked again every ``_POLL_STEP_SECONDS`` (markers move it without a record)."""
    while await consumer.position(tp) < end:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        timeout_ms = max(1, int(min(remaining, _POLL_STEP_SECONDS) * 1000))
        batches = await consumer.getmany(tp, timeout_ms=timeout_ms, max_records=max_records)
        for record in batches.get(tp, ()):
            apply(record)
    return True


async def end_offsets(
    consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition]
) -> dict[TopicPartition, int]:
    """The end offsets of ``tps`` as the consumer's isolation level sees them (read_committed:
    the last stable offsets), in one ListOffsets request per leader, sent straight on the
    consumer's client. ``consumer.end_offsets`` does the same with a timeout scope, a gather
    and a metadata wait around every request: a third of a barrier read's CPU. Anything but a
    clean answer for every partition (a leader unknown, an error code, a partition missing)
    is asked again through ``consumer.end_offsets``, which retries and refreshes metadata."""
    client = consumer._client
    cluster = client.cluster
    by_node: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for tp in tps:
        node = cluster.leader_for_partition(tp)
        if node is None or node < 0:
            return dict(await consumer.end_offsets(list(tps)))
        by_node.setdefault(node, {}).setdefault(tp.topic, []).append((tp.partition, -1))
    isolation = consumer._fetcher._isolation_level
    ends: dict[TopicPartition, int] = {}
    try:  # the leaders side by side
        responses = await asyncio.gather(
            *(
                client.send(node, OffsetRequest(-1, isolation, list(topics.items())))
                for node, topics in by_node.items()
            )
        )
    except KafkaError:
        return dict(await consumer.end_offsets(list(tps)))
    for response in responses:
        for topic, parts in response.topics:
            for part, error_code, *answer in parts:
                if error_code or len(answer) < 2:  # v1+: timestamp, offset(, leader epoch)
                    return dict(await consumer.end_offsets(list(tps)))
                ends[TopicPartition(topic, part)] = answer[1]
    if any(tp not in ends for tp in tps):
        return dict(await consumer.end_offsets(list(tps)))
    return ends


def settle_unawaited(futures: Sequence[asyncio.Future[Any]]) -> None:
    """Retrieve (and drop) the outcome of delivery futures nobody will await any more.

    After a failed transaction the producer fails every pending batch (fenced, aborted); without
    this, asyncio logs each as "Future exception was never retrieved" when it is collected.
    The failure itself was already classified and reported by the caller.
    """
    for future in futures:
        if future.done():
            if not future.cancelled():
                future.exception()
        else:
            future.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class ProducerDiscarded(KafkaError):  # type: ignore[misc]  # aiokafka is untyped
    """What the batches of a producer dropped by :func:`discard_producer` fail with."""

    def __init__(self, *args: object) -> None:  # aiokafka copies it: copy.copy(exc)
        super().__init__(*(args or ("producer discarded after a failed transaction",)))


def ignore_fenced_leftovers(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A loop exception handler: a fenced producer's internal futures are not errors.

    When a transactional producer is fenced, aiokafka fails its sender task and, with it, every
    internal waiter it holds (batch drain waiters, the transaction waiter); a producer we
    discard after a failed transaction fails them with :class:`ProducerDiscarded`. The worker has
    already handled the fence through the failed commit (the partition is rebuilt and a new
    producer fences the old one), and it discards that producer; the waiters nobody awaits are
    then reported by asyncio as "Future exception was never retrieved" at garbage collection.
    Those, and only those, are logged at debug level; everything else goes to the default handler.
    """
    if context.get("message") == "Future exception was never retrieved" and isinstance(
        context.get("exception"), ProducerFenced | ProducerDiscarded
    ):
        _log.debug("a failed producer's internal future was dropped (the failure was handled)")
        return
    loop.default_exception_handler(context)


async def discard_producer(producer: AIOKafkaProducer) -> None:
    """Close a producer whose transaction failed, dropping (never delivering) what it still holds.

    ``AIOKafkaProducer.stop()`` flushes: it waits until every pending batch is delivered. After a
    failed transaction (a timeout while the broker was away, an error, a fence) those batches
    belong to a transaction that will be aborted, and delivering them later is a *zombie write*:
    a broker without KIP-890 (transaction version 2, which aiokafka does not speak) accepts a
    late write of the producer id's current epoch after the abort marker, and the next
    transaction of the same producer id then commits it with its own marker. The chaos suite
    caught exactly that: a dispatch record of an aborted transaction, visible to read_committed
    readers, while the ledger records of that same transaction were aborted.

    So the sender task is cancelled first (no retry of anything pending), pending batches are
    failed, and the connections are closed; ``stop()`` afterwards is a no-op. The transaction
    left open on the coordinator is aborted by the next ``InitProducerId`` of the same
    transactional id (which also bumps the epoch, so a request still in flight is refused), or
    by the transaction timeout. This touches aiokafka internals (pinned ``<0.15``; the unit
    test ``tests/unit/test_discard_producer.py`` guards them).
    """
    producer._closed = True  # stop() must never flush this one later
    sender = producer._sender
    task = sender.sender_task if sender is not None else None
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    accumulator = producer._message_accumulator
    # a batch re-queued for a retry has left the pending set but keeps the callback that
    # removes it from there: failing it raised KeyError in that callback (logged by asyncio)
    accumulator._pending_batches.update(b for q in accumulator._batches.values() for b in q)
    accumulator.fail_all(ProducerDiscarded())
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.client.close(), 5)
