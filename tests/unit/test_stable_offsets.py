"""Reading an OffsetFetch v7 answer (``processor.kafka.stable_offsets.read_offsets``): decoded
from bytes encoded here by hand from Kafka's schema (OffsetFetchResponse.json, a flexible
version: compact strings and arrays, tagged fields), so the struct is checked against the wire
too. It fails closed: a partition UNSTABLE_OFFSET_COMMIT is asked again, never read; a partition
missing from the answer or another error raises; ``-1`` is "none committed"."""

from __future__ import annotations

import struct
from io import BytesIO

import pytest
from aiokafka.structs import TopicPartition

from processor.kafka.stable_offsets import (
    UNSTABLE_OFFSET_COMMIT,
    OffsetFetchResponse_v7,
    Retry,
    StableOffsetFetchRequest,
    StableOffsetsError,
    read_offsets,
)

P0, P1 = TopicPartition("fragments", 0), TopicPartition("fragments", 1)


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def _compact(text: str | None) -> bytes:
    if text is None:
        return _uvarint(0)
    raw = text.encode()
    return _uvarint(len(raw) + 1) + raw


def _answer(
    partitions: list[tuple[int, int, int]], *, top: int = 0, topic: str = "fragments"
) -> OffsetFetchResponse_v7:
    """An OffsetFetch v7 response body: ``partitions`` as (index, offset, error code)."""
    body = struct.pack(">i", 0)  # throttle_time_ms
    body += _uvarint(2) + _compact(topic) + _uvarint(len(partitions) + 1)  # one topic
    for index, offset, code in partitions:
        body += struct.pack(">iqi", index, offset, -1)  # committed_leader_epoch -1
        body += _compact(None if offset < 0 else "") + struct.pack(">h", code) + _uvarint(0)
    body += _uvarint(0)  # the topic's tagged fields
    body += struct.pack(">h", top) + _uvarint(0)
    buffer = BytesIO(body)
    response = OffsetFetchResponse_v7.decode(buffer)
    assert buffer.read() == b""  # the whole body, nothing left over
    return response


def test_offsets_and_none_committed() -> None:
    assert read_offsets(_answer([(0, 42, 0), (1, -1, 0)]), [P0, P1]) == {P0: 42, P1: None}


def test_an_unstable_partition_is_asked_again_never_read() -> None:
    outcome = read_offsets(_answer([(0, 41, UNSTABLE_OFFSET_COMMIT), (1, 7, 0)]), [P0, P1])
    assert outcome == Retry("UNSTABLE_OFFSET_COMMIT on fragments-0", UNSTABLE_OFFSET_COMMIT)


def test_a_partition_missing_from_the_answer_fails_closed() -> None:
    with pytest.raises(StableOffsetsError, match="no answer for fragments-1"):
        read_offsets(_answer([(0, 42, 0)]), [P0, P1])


def test_another_partition_error_fails_closed() -> None:
    with pytest.raises(StableOffsetsError, match="TopicAuthorizationFailedError") as caught:
        read_offsets(_answer([(0, -1, 29), (1, 3, 0)]), [P0, P1])
    assert caught.value.code == 29


def test_the_coordinator_moved_or_refused() -> None:
    moved = read_offsets(_answer([], top=16), [P0])  # NOT_COORDINATOR: look it up again
    assert isinstance(moved, Retry) and moved.lookup and moved.code == 16
    loading = read_offsets(_answer([], top=14), [P0])  # COORDINATOR_LOAD_IN_PROGRESS
    assert isinstance(loading, Retry) and not loading.lookup
    with pytest.raises(StableOffsetsError, match="GroupAuthorizationFailedError"):
        read_offsets(_answer([], top=30), [P0])


def test_only_v7_is_sent_with_require_stable() -> None:
    """A broker whose OffsetFetch stops below v7 gets nothing (aiokafka raises before sending:
    ``stable_committed`` turns that into its error); v7 carries ``require_stable``."""
    request = StableOffsetFetchRequest("g", [P1, P0])
    with pytest.raises(NotImplementedError):
        request.prepare({9: (1, 6)})
    wire = request.prepare({9: (1, 10)})
    assert wire.API_VERSION == 7
    encoded = wire.encode()
    expected = _compact("g") + _uvarint(2) + _compact("fragments")
    expected += _uvarint(3) + struct.pack(">ii", 0, 1) + _uvarint(0)  # partitions, topic tags
    expected += b"\x01" + _uvarint(0)  # require_stable, tags
    assert encoded == expected
