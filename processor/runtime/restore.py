"""Rebuild one partition's Assembler state from its changelog partition, measured and bounded.

The changelog is written only inside committed transactions, so it is read with
``read_committed``: aborted writes never leak into restored state. The restore reads changelog
partition p from the beginning and stops when the consumer *position* reaches the end offset
taken at the start (the last stable offset). It never waits for "last record offset == high
watermark - 1": the last offset of a transactional topic is a commit marker, which no record
carries, and a compacted partition has holes. An empty partition is normal (position 0 == end 0).

The caller fences first (InitProducerId of the partition's transactional id aborts a previous
owner's open transaction), so no transaction of ours is open on the changelog partition while it
is read and the end offset taken at the start is final.

Records are applied in order with :meth:`Assembler.restore` (the last record per key wins, as
compaction would decide). A record the Assembler cannot read (a damaged or foreign key or value)
is skipped, logged with its offset and reason, and counted in :class:`RestoreResult`.

The whole restore runs under ``timeout``; on timeout it raises and the
partition stays unready and is retried, so a slow restore never crash-loops the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.core.assembler import Assembler
from processor.core.errors import StateStoreError
from processor.kafka.clients import committed_reader, read_to_end
from processor.observability.logging import fields
from processor.runtime import collector
from processor.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestoreResult:
    partition: int
    records: int
    end_offset: int
    seconds: float
    skipped: int = 0  # records that could not be read (logged with their offset and reason)


class RestoreGap(StateStoreError):
    """A tail restore cannot start where asked: restore the partition in full instead."""


async def restore_partition(
    assembler: Assembler,
    changelog: str,
    partition: int,
    settings: Settings,
    *,
    timeout: float,
    start: int | None = None,
    sink: Callable[[str, bytes | None], None] | None = None,
) -> RestoreResult:
    """Apply changelog partition ``partition`` to ``assembler``; TimeoutError after ``timeout``.

    ``start``: apply only the tail from that offset (``assembler`` already reflects everything
    before it). When the log no longer holds ``start`` (retention), ``RestoreGap`` is raised and
    the caller restores in full. ``sink`` receives every record applied (for a local store).
    """
    started = time.monotonic()
    tp = TopicPartition(changelog, partition)
    consumer = committed_reader(settings, max_partition_fetch_bytes=16 * 1024 * 1024)
    records = 0
    skipped = 0
    end = 0

    def apply(record: ConsumerRecord) -> None:
        nonlocal records, skipped
        if record.offset >= end:
            return  # written after the end we measured (cannot happen once fenced)
        problem: str | None
        try:
            key = record.key.decode("utf-8") if record.key is not None else ""
        except UnicodeDecodeError:
            key, problem = "", "the key is not UTF-8"
        else:
            problem = assembler.restore(key, record.value)
        records += 1
        collector.restored(records)
        if problem is None and sink is not None:
            sink(key, record.value)
        if problem is not None:  # a damaged or foreign record: skipped, never a crash loop
            skipped += 1
            log.error(
                "changelog record skipped",
                extra=fields(
                    partition=partition, offset=record.offset, kind=key.partition(":")[0],
                    reason=problem,
                ),
            )  # fmt: skip

    try:
        async with asyncio.timeout(timeout):
            await consumer.start()
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            if start is None:
                await consumer.seek_to_beginning(tp)
            else:
                first = (await consumer.beginning_offsets([tp]))[tp]
                if start < first or start > end:
                    raise RestoreGap(f"changelog holds [{first}, {end}), not {start}")
                consumer.seek(tp, start)
            await read_to_end(consumer, tp, end, apply, deadline=math.inf, max_records=5000)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.stop(), 5)
    return RestoreResult(partition, records, end, time.monotonic() - started, skipped)
