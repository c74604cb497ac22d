"""``processor tail``: read an output topic with ``read_committed``, for people and scripts.

By default it reads every partition from the beginning up to the last stable offsets seen at
start, then exits; ``--follow`` keeps reading. ``--json`` prints one JSON object per record:
``{"partition", "offset", "key", "traceparent", "value"}`` where ``value`` is the record as
written (the wire contract); without it, one short human line per record. The human form of a
dispatch or proposal omits the argument values (use ``--json`` to see them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import IO, Any, Final

import orjson
from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.kafka.clients import committed_reader
from processor.kafka.codec import TRACEPARENT, header
from processor.kafka.topics import partition_count
from processor.observability.terminal import printable, printable_json
from processor.settings import Settings

TAIL_ROLES: Final = (
    "dispatch", "proposals", "status", "ledger", "audit", "deadletter", "results",
)  # fmt: skip


async def read_records(
    settings: Settings,
    topic: str,
    *,
    from_beginning: bool = True,
    follow: bool = False,
    max_records: int | None = None,
    timeout: float | None = None,
) -> AsyncIterator[ConsumerRecord]:
    """Yield committed records of ``topic``, up to the start-time end offsets unless ``follow``."""
    count = await partition_count(settings, topic)
    if count is None:
        raise LookupError(f"topic {topic!r} does not exist")
    consumer = committed_reader(settings)
    deadline = time.monotonic() + timeout if timeout is not None else None
    seen = 0
    try:
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in range(count)]
        consumer.assign(tps)
        if from_beginning:
            await consumer.seek_to_beginning(*tps)
        else:
            await consumer.seek_to_end(*tps)
        ends = await consumer.end_offsets(tps)
        while True:
            if not follow and all([await consumer.position(tp) >= ends[tp] for tp in tps]):
                return
            if deadline is not None and time.monotonic() > deadline:
                return
            batch = await consumer.getmany(timeout_ms=500)
            records = sorted(
                (r for rs in batch.values() for r in rs), key=lambda r: (r.timestamp, r.partition)
            )
            for record in records:
                yield record
                seen += 1
                if max_records is not None and seen >= max_records:
                    return
    finally:
        await consumer.stop()


def record_json(record: ConsumerRecord) -> bytes:
    trace = header(record.headers, TRACEPARENT)
    value: Any
    try:
        value = orjson.loads(record.value) if record.value is not None else None
    except orjson.JSONDecodeError:
        value = record.value.decode("utf-8", "replace") if record.value else None
    line = {
        "partition": record.partition,
        "offset": record.offset,
        "key": record.key.decode("utf-8", "replace") if record.key is not None else None,
        "traceparent": trace.decode("ascii", "replace") if trace else None,
        "value": value,
    }
    try:
        text = orjson.dumps(line)
    except orjson.JSONEncodeError:
        # orjson reads deeper nesting than it writes (1024 vs 255 levels): keep the raw text
        line["value"] = record.value.decode("utf-8", "replace") if record.value else None
        text = orjson.dumps(line)
    return printable_json(text.decode()).encode()


def record_line(record: ConsumerRecord) -> str:
    """One human line; never the argument values; the record's text escaped (:func:`printable`)."""
    return printable(_record_line(record))


def _record_line(record: ConsumerRecord) -> str:
    when = _clock(record.timestamp)
    try:
        v = orjson.loads(record.value) if record.value is not None else None
    except orjson.JSONDecodeError:
        v = None
    where = f"p{record.partition}@{record.offset}"
    if not isinstance(v, dict):
        return f"{when} {where} (not a JSON object)"
    kind = v.get("type", "?")
    call = f"{v.get('tenant')}/{v.get('turn_id')} {v.get('response_id')}/{v.get('call_id')}"
    tool = v.get("tool") if v.get("namespace") is None else f"{v.get('namespace')}.{v.get('tool')}"
    if kind == "dispatch":
        detail = f"{call} tool={tool}@{v.get('tool_version')} actor={v.get('actor')}"
        detail += f" dispatch_id={v.get('dispatch_id')}"
    elif kind == "proposal":
        detail = f"{call} tool={tool} digest={str(v.get('args_digest'))[:16]}"
    elif kind == "status":
        detail = f"{call} {v.get('state')} retry={v.get('retry_possible')} {v.get('message')!r}"
    elif kind == "ledger":
        detail = (
            f"{call} tool={tool} {v.get('state')} reason={v.get('terminal_reason')} "
            f"fragments={v.get('fragment_count')} bytes={v.get('bytes')}"
        )
    elif kind == "audit":
        detail = (
            f"{v.get('command_type')} {v.get('outcome')} by={v.get('issued_by')} "
            f"tenant={v.get('tenant')} affected={_count(v.get('affected'))}"
        )
        if v.get("rejection"):
            detail += f" rejection={v.get('rejection')}"
    elif kind == "execution.result":
        detail = (
            f"{call} tool={tool} {v.get('outcome')} reason={v.get('reason')} "
            f"dispatch_id={v.get('dispatch_id')} group={v.get('executor_group')}"
        )
    elif kind == "deadletter":
        detail = (
            f"{v.get('source_topic')}/{v.get('partition')}@{v.get('offset')} "
            f"reason={v.get('reason')} {v.get('detail')!r}"
        )
    else:
        detail = ""
    return f"{when} {where} {kind} {detail}".rstrip()


async def tail(
    settings: Settings,
    role: str,
    out: IO[str],
    *,
    as_json: bool,
    from_beginning: bool = True,
    follow: bool = False,
    max_records: int | None = None,
) -> int:
    topic = settings.topics.output(role)
    async for record in read_records(
        settings, topic, from_beginning=from_beginning, follow=follow, max_records=max_records
    ):
        if as_json:
            out.write(record_json(record).decode() + "\n")
        else:
            out.write(record_line(record) + "\n")
        out.flush()
    return 0


def run_tail(settings: Settings, role: str, out: IO[str], **kwargs: Any) -> int:
    return asyncio.run(tail(settings, role, out, **kwargs))


def _clock(timestamp_ms: object) -> str:
    """A record timestamp as HH:MM:SS.mmm (a producer may write any int64 there)."""
    try:
        moment = datetime.fromtimestamp(float(timestamp_ms) / 1000, UTC)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):
        return f"ts={timestamp_ms!r}"
    return moment.strftime("%H:%M:%S.%f")[:-3]


def _count(items: object) -> int:
    return len(items) if isinstance(items, list) else 0
