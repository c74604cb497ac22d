"""From core records to Kafka records: topic, key, value, headers; and W3C ``traceparent``.

* Output records (:data:`processor.core.events.OutputRecord`) go to their topic
  (``OUTPUT_TOPIC``) with the canonical encoding (:func:`processor.core.events.encode`). Keys:
  turn-scoped records (dispatch, proposal, status, ledger) use the turn key ``tenant/turn_id``;
  audit records use the tenant (``*`` for a global command); dead letters use their source
  coordinates ``topic/partition/offset``.
* State changes go to the changelog partition equal to the input partition, key = the state key
  (UTF-8), value = the JSON snapshot or ``None`` (a tombstone, so compaction forgets the key).
* ``traceparent`` headers are read from input records and copied onto the outputs they cause.
  Only well-formed values (``00-<32 hex>-<16 hex>-<2 hex>``, ids not all zero) are propagated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from processor.core.assembler import StateChange
from processor.core.events import (
    OUTPUT_TOPIC,
    Audit,
    DeadLetter,
    OutputRecord,
    encode,
    turn_key,
)
from processor.settings import TopicNames

TRACEPARENT: Final = "traceparent"
_TRACEPARENT_RE: Final = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")

Headers = list[tuple[str, bytes]]


class Outbound(NamedTuple):
    """One record to produce. ``partition`` None lets the key choose (default partitioner).
    A named tuple: two are made per call on the worker's hot path (a frozen dataclass costs
    a ``object.__setattr__`` per field)."""

    topic: str
    key: bytes
    value: bytes | None
    headers: Headers
    partition: int | None = None


def output_key(record: OutputRecord) -> str:
    if isinstance(record, Audit):
        return record.tenant or "*"
    if isinstance(record, DeadLetter):
        return f"{record.source_topic}/{record.partition}/{record.offset}"
    return turn_key(record.tenant, record.turn_id)


def output_role(record: OutputRecord) -> str:
    """The topic role of an output record (``dispatch``, ``proposals``, …)."""
    return OUTPUT_TOPIC[type(record)]


def encode_output(record: OutputRecord, topics: TopicNames, traceparent: str | None) -> Outbound:
    headers: Headers = [(TRACEPARENT, traceparent.encode())] if traceparent else []
    return Outbound(
        topic=topics.output(output_role(record)),
        key=output_key(record).encode(),
        value=encode(record),
        headers=headers,
    )


def encode_change(change: StateChange, changelog: str, partition: int) -> Outbound:
    key = change.key.encode()
    return Outbound(changelog, key, change.value, [], partition)  # positional: the fast call


def valid_traceparent(value: str | bytes | None) -> str | None:
    """The value when it is a well-formed W3C traceparent, else None."""
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    value = value.strip().lower()
    match = _TRACEPARENT_RE.match(value)
    if match is None or value.startswith("ff"):
        return None
    trace_id, span_id = match.groups()
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return value


def header(headers: Iterable[tuple[str, bytes]] | None, name: str) -> bytes | None:
    """The last value of header ``name`` (Kafka allows repeats), or None."""
    found = None
    for key, value in headers or ():
        if key == name:
            found = value
    return found


def traceparent_of(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    return valid_traceparent(header(headers, TRACEPARENT))
