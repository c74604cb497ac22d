"""One input record into partition p's Assembler, and the dead letters the runtime decides.

:func:`handle` decodes a record once and hands it to the Assembler, with the control barrier
for fragments. The runtime dead-letters two things itself: a decodable record whose type does
not belong to its topic (``wrong_topic``: adapters may write fragments, only the gateway and
operators write control) or whose turn routes to another partition (``misrouted``,
:func:`processor.kafka.partitioner.misrouted`; checked once the inputs' partition count is
known), and a record whose handling raises anything but a process-level exception
(``internal_error``: a core bug or an extension's panic must not stop the partition).
Undecodable records are the Assembler's to dead-letter, with their own reasons.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import orjson
from aiokafka.structs import ConsumerRecord

from processor.core.assembler import Assembler, RecordSource
from processor.core.errors import PROCESS_EXCEPTIONS
from processor.core.events import CONTROL_TYPES, FRAGMENT_TYPES, OutputRecord
from processor.kafka.partitioner import misrouted
from processor.observability.logging import fields

# raised while a record is handled, yet not the record's doing: these pass through
_NOT_A_RECORDS: Final[tuple[type[BaseException], ...]] = (
    *PROCESS_EXCEPTIONS,
    asyncio.CancelledError,
)
_UNPARSED: Final = object()  # a record that is not JSON (the Assembler says why)
_ALLOWED: Final = {"fragments": FRAGMENT_TYPES, "control": CONTROL_TYPES}

log = logging.getLogger(__name__)


def handle(
    assembler: Assembler,
    record: ConsumerRecord,
    role: str,
    now: float,
    barrier: int | None,
    *,
    partition: int,
    input_partitions: int,
) -> list[OutputRecord]:
    """The Assembler's outputs for ``record`` read on topic ``role`` of ``partition`` (the
    inputs have ``input_partitions`` partitions; 0: not known, no misrouting check)."""
    payload: bytes = record.value or b""
    source = RecordSource(record.topic, record.partition, record.offset)
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:  # the Assembler dead-letters it, with the parse error
        data = _UNPARSED
    problem = None if data is _UNPARSED else misplaced(data, role, partition, input_partitions)
    if problem is not None:
        reason, detail = problem
        return [assembler.dead_letter(payload, source, reason, detail, now)]
    try:
        written = record.timestamp / 1000.0  # control uses LogAppendTime: the broker's clock
        if data is _UNPARSED:
            return assembler.handle(
                payload, now, source=source, record_time=written, barrier=barrier
            )
        return assembler.handle(
            payload,
            now,
            source=source,
            parsed=data,
            record_time=written,
            barrier=barrier if role == "fragments" else None,
        )
    except _NOT_A_RECORDS:
        raise
    except BaseException as exc:  # a core bug (or an extension's panic) must not stop it
        # no traceback: an exception message from the core could quote argument text
        log.error(
            "assembler failed on a record; dead-lettered",
            extra=fields(
                partition=partition,
                topic=role,
                offset=record.offset,
                error=type(exc).__name__,
            ),
        )
        detail = f"internal error {type(exc).__name__}"
        return [assembler.dead_letter(payload, source, "internal_error", detail, now)]


def misplaced(
    data: object, role: str, partition: int, input_partitions: int
) -> tuple[str, str] | None:
    """A decodable record (parsed) on the wrong topic or partition: (reason, detail), else
    None. Undecodable records are the Assembler's to dead-letter, with their own reasons.
    """
    if not isinstance(data, dict):
        return None
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in FRAGMENT_TYPES | CONTROL_TYPES:
        return None
    if kind not in _ALLOWED[role]:
        return "wrong_topic", f"a {kind} record is not accepted on the {role} topic"
    if input_partitions:
        detail = misrouted(data, partition, input_partitions)
        if detail is not None:
            return "misrouted", detail
    return None
