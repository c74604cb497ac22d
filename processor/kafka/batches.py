"""Records handed to a producer as whole batches (``send_batch``), not one ``send`` each.

Owns :func:`send_batched`, used by the worker's commit step and the executor's transactions.
aiokafka's per-record path (a metadata wait, serialisation, the partitioner, the accumulator and
a future per record) was a tenth of the worker's CPU on a backlog (bench_worker_kafka.py) and a
tenth of the executor's (three records a call). Keyed records without a partition get the
producer's own partitioner, as ``send`` would give them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError

from processor.kafka.codec import Outbound

__all__ = ["send_batched"]


async def send_batched(
    producer: AIOKafkaProducer, records: Sequence[Outbound], into: list[asyncio.Future[Any]]
) -> int:
    """Send the records as batches, one partition's records in their order; each batch's
    delivery future goes into ``into`` as soon as it exists, so a failure part-way still
    knows every future it must settle. Returns the record count of the last batch.

    A record above the producer's ``max_request_size`` is refused before anything of its
    partition is sent (``MessageSizeTooLargeError``, as ``send`` raises it): a batch takes any
    first record, and the broker would refuse the whole request instead.

    Each batch is closed before it is handed over: an open one waits ``linger_ms`` for more
    records before it leaves (none would come: the caller hands over every record at once)."""
    by_tp: dict[tuple[str, int], list[Outbound]] = {}
    known: set[str] = set()
    limit: int = producer._max_request_size
    for r in records:
        if r.value is not None and len(r.value) > limit:
            raise MessageSizeTooLargeError(f"a {len(r.value)} byte record")
        partition = r.partition
        if r.topic not in known:
            await producer.partitions_for(r.topic)  # metadata, as send() waits for it
            known.add(r.topic)
        if partition is None:
            partition = producer._partition(r.topic, None, None, None, r.key, r.value)
        by_tp.setdefault((r.topic, partition), []).append(r)
    count = 0
    for (topic, partition), batch_records in by_tp.items():
        batch, count = producer.create_batch(), 0
        for r in batch_records:
            while batch.append(key=r.key, value=r.value, timestamp=None, headers=r.headers) is None:
                if not count:  # never: a batch takes any first record (a guard, not to drop one)
                    raise MessageSizeTooLargeError(f"a {len(r.value or b'')} byte record")
                batch.close()
                into.append(await producer.send_batch(batch, topic, partition=partition))
                batch, count = producer.create_batch(), 0
            count += 1
        batch.close()
        into.append(await producer.send_batch(batch, topic, partition=partition))
    return count
