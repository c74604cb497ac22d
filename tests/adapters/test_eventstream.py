"""The AWS eventstream decoder: the recorded Bedrock body, any chunking, every corruption."""

from __future__ import annotations

import itertools
import struct
import uuid
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.adapters.eventstream import (
    STREAM_ERROR_EVENT,
    EventStreamDecoder,
    EventStreamMessage,
    decode_events,
    decode_messages,
    is_error_event,
    message_to_event,
    parse_headers,
)
from processor.core.errors import AdapterError
from tests.adapters.eventstream_frames import (
    error_frame,
    event_frame,
    exception_frame,
    frame,
    header,
    str_header,
)

DATA = Path(__file__).parent / "data" / "bedrock-converse"
BODY = (DATA / "nova-text-then-tooluse.eventstream").read_bytes()
DECODED = [
    orjson.loads(line)
    for line in (DATA / "nova-text-then-tooluse.decoded.jsonl").read_bytes().splitlines()
    if line.strip()
]


# --------------------------------------------------------------------------- the recording


def test_recorded_body_decodes_to_the_decoded_jsonl() -> None:
    assert decode_events(BODY) == DECODED
    assert len(DECODED) == 26


def test_recorded_body_fed_one_byte_at_a_time() -> None:
    decoder = EventStreamDecoder()
    messages: list[EventStreamMessage] = []
    for i in range(len(BODY)):
        messages.extend(decoder.feed(BODY[i : i + 1]))
    decoder.close()
    assert [message_to_event(m) for m in messages] == DECODED


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(BODY)), max_size=30))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(BODY)]
    decoder = EventStreamDecoder()
    events: list[dict[str, Any]] = []
    for start, end in itertools.pairwise(points):
        events.extend(message_to_event(m) for m in decoder.feed(BODY[start:end]))
    decoder.close()
    assert events == DECODED


def test_recorded_headers_are_typed() -> None:
    first = decode_messages(BODY)[0]
    assert first.headers == {
        ":event-type": "messageStart",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert orjson.loads(first.payload)["role"] == "assistant"


# --------------------------------------------------------------------------- corruption


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_flipped_byte_is_a_bad_frame(mask: int) -> None:
    for position in range(len(BODY)):
        corrupt = bytearray(BODY)
        corrupt[position] ^= mask
        with pytest.raises(AdapterError) as info:
            decode_events(bytes(corrupt))
        assert info.value.reason == "bad_frame", position


def test_decoder_refuses_input_after_a_bad_frame() -> None:
    decoder = EventStreamDecoder()
    corrupt = bytearray(BODY)
    corrupt[20] ^= 0x01
    with pytest.raises(AdapterError):
        decoder.feed(bytes(corrupt))
    with pytest.raises(AdapterError, match="earlier bad frame"):
        decoder.feed(BODY)


def test_good_frames_before_a_bad_one_are_not_returned_half_way() -> None:
    decoder = EventStreamDecoder()
    good = event_frame("messageStart", {"role": "assistant"})
    bad = bytearray(event_frame("messageStop", {"stopReason": "end_turn"}))
    bad[-1] ^= 0x01
    with pytest.raises(AdapterError, match="message checksum"):
        decoder.feed(good + bytes(bad))


def test_truncated_body_is_a_bad_frame_at_close() -> None:
    decoder = EventStreamDecoder()
    messages = decoder.feed(BODY[:-5])
    assert len(messages) == 25
    assert decoder.pending_bytes > 0
    with pytest.raises(AdapterError, match="inside a frame"):
        decoder.close()


def _prelude(total: int, headers_length: int) -> bytes:
    prelude = struct.pack(">II", total, headers_length)
    return prelude + struct.pack(">I", zlib.crc32(prelude))


@pytest.mark.parametrize(
    ("total", "headers_length"),
    [(0, 0), (15, 0), (16, 1), (100, 90), (2**32 - 1, 0), (2**20, 2**19)],
)
def test_impossible_lengths_are_bad_frames(total: int, headers_length: int) -> None:
    with pytest.raises(AdapterError) as info:
        EventStreamDecoder().feed(_prelude(total, headers_length))
    assert info.value.reason == "bad_frame"


def test_limits_are_configurable() -> None:
    body = event_frame("metadata", {"p": "x" * 100})
    with pytest.raises(AdapterError, match="payload over the limit"):
        EventStreamDecoder(max_payload_bytes=50).feed(body)


def test_empty_frame_is_valid() -> None:
    (message,) = decode_messages(frame(b"", b""))
    assert message.headers == {}
    assert message.payload == b""


# --------------------------------------------------------------------------- headers


def test_every_header_value_type() -> None:
    the_uuid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    headers = (
        header("t", 0, b"")
        + header("f", 1, b"")
        + header("b", 2, struct.pack(">b", -2))
        + header("s", 3, struct.pack(">h", -300))
        + header("i", 4, struct.pack(">i", -70000))
        + header("l", 5, struct.pack(">q", -(2**40)))
        + header("bytes", 6, struct.pack(">H", 3) + b"\x00\x01\x02")
        + str_header("str", "héllo")
        + header("ts", 8, struct.pack(">q", 1_700_000_000_000))
        + header("id", 9, the_uuid.bytes)
    )
    assert parse_headers(headers) == {
        "t": True,
        "f": False,
        "b": -2,
        "s": -300,
        "i": -70000,
        "l": -(2**40),
        "bytes": b"\x00\x01\x02",
        "str": "héllo",
        "ts": 1_700_000_000_000,
        "id": the_uuid,
    }


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        (header("x", 10, b""), "unknown header value type"),
        (header("x", 0, b"") + header("x", 1, b""), "duplicate header"),
        (header("x", 4, b"\x00\x01"), "past the header block"),
        (header("x", 7, struct.pack(">H", 10) + b"abc"), "past the header block"),
        (b"\x00", "empty header name"),
        (b"\x02\xff\xfe\x00", "not UTF-8"),
        (b"\x05ab", "past the header block"),
    ],
)
def test_bad_headers_are_bad_frames(headers: bytes, detail: str) -> None:
    with pytest.raises(AdapterError, match=detail) as info:
        decode_messages(frame(headers, b"{}"))
    assert info.value.reason == "bad_frame"


# --------------------------------------------------------------------------- events


def test_exception_frame_becomes_an_error_event() -> None:
    (event,) = decode_events(exception_frame("modelStreamErrorException", {"message": "boom"}))
    assert event == {"modelStreamErrorException": {"message": "boom"}}
    assert is_error_event(event)


def test_error_frame_becomes_a_stream_error_event() -> None:
    (event,) = decode_events(error_frame("InternalFailure", "bad"))
    assert event == {STREAM_ERROR_EVENT: {"errorCode": "InternalFailure", "message": "bad"}}
    assert is_error_event(event)


def test_ordinary_events_are_not_errors() -> None:
    assert not any(is_error_event(event) for event in DECODED)


def test_empty_payload_is_an_empty_object() -> None:
    headers = str_header(":message-type", "event") + str_header(":event-type", "ping")
    assert decode_events(frame(headers, b"")) == [{"ping": {}}]


@pytest.mark.parametrize(
    ("headers", "payload", "reason"),
    [
        (str_header(":message-type", "event"), b"{}", "bad_frame"),
        (str_header(":event-type", "messageStart"), b"{}", "bad_frame"),
        (str_header(":message-type", "gossip"), b"{}", "bad_frame"),
        (header(":message-type", 0, b""), b"{}", "bad_frame"),
        (
            str_header(":message-type", "event") + str_header(":event-type", "x"),
            b"not json",
            "bad_chunk",
        ),
        (
            str_header(":message-type", "event") + str_header(":event-type", "x"),
            b"[1, 2]",
            "bad_chunk",
        ),
    ],
)
def test_unreadable_messages(headers: bytes, payload: bytes, reason: str) -> None:
    with pytest.raises(AdapterError) as info:
        decode_events(frame(headers, payload))
    assert info.value.reason == reason


def test_errors_never_carry_payload_text() -> None:
    secret = b"TOP-SECRET-ARGUMENT"
    headers = str_header(":message-type", "event") + str_header(":event-type", "x")
    with pytest.raises(AdapterError) as info:
        decode_events(frame(headers, secret))
    assert "TOP-SECRET" not in str(info.value)
