"""At most one execution per ``dispatch_id`` per executor group, kept durably in Kafka.

The choice: **claim before run**. For each dispatch record the executor, in ONE Kafka transaction
of the dispatch partition's transactional producer, writes a ``claimed``
:class:`~processor.executor.records.ExecutionEntry` to the compacted ``executions`` topic and
commits the group's offset past the record; only after that transaction commits does it run the
handler. After the handler it writes the terminal entry (``succeeded`` / ``failed``) and the
:class:`~processor.executor.records.ExecutionResult` in a second transaction. A refusal by the
fence is one transaction: ``refused`` entry, result, status and offset.

Why at-most-once and not at-least-once: the handler performs an external side effect (a booking,
a payment) that Kafka cannot roll back, so the only safe answer to "the executor crashed while
the handler ran" is to not run it again. After a crash between the claim and the terminal entry,
whichever executor next owns the partition finds a ``claimed`` entry without an end, does not run
the call, and reports ``unknown`` (the side effect may or may not have happened; the handler got
``dispatch_id`` as an idempotency key so the external system can tell). A crash *before* the
claim commits leaves neither the claim nor the offset, so the record is delivered again and runs
once.

Why the ledger and not only the offsets: offsets are per group and can move backwards (expired
group offsets with ``auto.offset.reset``, a manual reset, a stale ``OffsetFetch`` right after a
transaction commit, a duplicate dispatch record). The ledger answers "did this group ever take
this ``dispatch_id``?" whatever the offsets say. (A take reads the committed offset again after
its fence, as a stable offset, :mod:`processor.kafka.stable_offsets`, which no longer answers
the offset before a pending transaction: that saves re-reads, the ledger stays the guard.)

Why this is safe across rebalances and zombies: ledger partition p belongs to dispatch partition
p, and both are written only by the producer with transactional id ``<group>.executor.<p>``. A new
owner's ``InitProducerId`` fences the previous owner and completes or aborts its open transaction
*before* the new owner reads the ledger partition, so a claim the old owner committed is always
visible (read_committed, to the last stable offset), and a claim it had not committed never
happened (and neither did its handler: the handler only starts after the commit). A fenced
zombie that is still inside a handler cannot record its end; the new owner reports ``unknown``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.core.errors import RecordRejected
from processor.executor.barrier import BarrierTimeout
from processor.executor.records import ExecutionEntry, decode_entry
from processor.kafka.clients import committed_reader, read_to_end
from processor.settings import Settings

__all__ = ["restore_ledger_partition"]

log = logging.getLogger(__name__)


async def restore_ledger_partition(
    settings: Settings,
    topic: str,
    partition: int,
    group: str,
    *,
    timeout: float,
    consumer_kwargs: dict[str, Any] | None = None,
    offsets: AIOKafkaConsumer | None = None,
) -> dict[str, ExecutionEntry]:
    """Read ledger partition ``partition`` to its end; the latest entry per ``dispatch_id`` of
    ``group`` (other groups' entries share the topic and are skipped).

    Reads read_committed until the consumer's position reaches the end offset (the last stable
    offset), never "until the last record", because the partition may end with transaction
    markers. An empty partition is normal: with ``offsets`` (a started read_committed consumer
    that is never assigned, so no fetch of its own delays the request), one that is empty is
    known from its offsets alone, without a reader of its own (a take in milliseconds).
    """
    tp = TopicPartition(topic, partition)
    entries: dict[str, ExecutionEntry] = {}

    def apply(record: ConsumerRecord) -> None:
        if record.value is None:
            return
        try:
            entry = decode_entry(record.value)
        except RecordRejected:
            log.warning(
                "ledger %s[%d]@%d: not an execution entry, skipped", topic, partition, record.offset
            )
            return
        if entry.group == group:
            entries[entry.dispatch_id] = entry

    deadline = time.monotonic() + timeout
    if offsets is not None:
        async with asyncio.timeout(timeout):
            end = (await offsets.end_offsets([tp]))[tp]
            if end <= (await offsets.beginning_offsets([tp]))[tp]:
                return entries  # empty
    consumer = committed_reader(settings, **(consumer_kwargs or {}))
    await consumer.start()
    try:
        # the offsets before the assignment: once assigned, the consumer's long-polled fetch is
        # pending on the connection, and a ListOffsets waits behind it (~0.5 s a take)
        end = (await consumer.end_offsets([tp]))[tp]
        if end > (await consumer.beginning_offsets([tp]))[tp]:  # else empty: nothing to read
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            if not await read_to_end(consumer, tp, end, apply, deadline=deadline):
                raise BarrierTimeout(detail=f"restoring {topic}[{partition}] timed out")
    finally:
        await consumer.stop()
    return entries
