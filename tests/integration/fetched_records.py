"""Hand-made fetched records, for tests that feed a partition's step without a broker
(``PartitionTask.build`` takes already-fetched records): ``ConsumerRecord`` objects of partition
2, with a turn key and an optional ``traceparent`` header."""

from __future__ import annotations

from typing import Any

from aiokafka.structs import ConsumerRecord

from processor.core.events import encode


def record(
    topic: str, offset: int, value: bytes, *, ts_ms: int, key: bytes = b"acme/t1", trace: str = ""
) -> ConsumerRecord[bytes, bytes]:
    headers = [("traceparent", trace.encode())] if trace else []
    return ConsumerRecord(
        topic, 2, offset, ts_ms, 0, key, value, None, len(key), len(value), headers
    )


def records_of(topic: str, events: list[Any], *, start_ms: int, trace: str = "") -> list[Any]:
    return [
        record(topic, i, encode(e), ts_ms=start_ms + i, trace=trace) for i, e in enumerate(events)
    ]
