"""AWS ``application/vnd.amazon.eventstream`` binary framing → messages → ConverseStream events.

Bedrock's ConverseStream body is a sequence of binary frames::

    total length u32 | headers length u32 | prelude CRC32 u32 | headers | payload | message CRC32

All integers are big-endian. The prelude CRC covers the first 8 bytes, the message CRC covers every
byte before it (prelude and prelude CRC included). Each header is a 1-byte name length, the UTF-8
name, a 1-byte value type and the value (types 0-9 of the AWS specification).

:class:`EventStreamDecoder` is incremental: ``feed`` any slice of the body and get the complete
messages it finishes; a frame may be split anywhere. A wrong checksum, an impossible length or a
malformed header raises :class:`~processor.core.errors.AdapterError` with reason ``bad_frame``;
after that the decoder refuses further input, because a corrupt length leaves no frame boundary to
resynchronise on.

:func:`message_to_event` turns a message into the dict boto3's ``converse_stream()`` yields,
``{<:event-type>: <payload object>}``. An ``exception`` frame becomes
``{<:exception-type>: <payload object>}`` and an ``error`` frame becomes
``{"streamError": {"errorCode": ..., "message": ...}}``; :func:`is_error_event` recognises both.
No error message carries payload bytes.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from processor.core.errors import AdapterError

HeaderValue = bool | int | bytes | str | uuid.UUID
"""A header value. Timestamps (type 8) are milliseconds since the epoch, as an ``int``."""

PRELUDE_BYTES: Final = 12
CRC_BYTES: Final = 4
MIN_MESSAGE_BYTES: Final = PRELUDE_BYTES + CRC_BYTES
MAX_HEADERS_BYTES: Final = 128 * 1024
MAX_PAYLOAD_BYTES: Final = 24 * 1024 * 1024

STREAM_ERROR_EVENT: Final = "streamError"
"""The event name :func:`message_to_event` gives an ``error`` frame (it has no exception type)."""

_U8: Final = struct.Struct(">B")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_PRELUDE: Final = struct.Struct(">III")
_INTS: Final = {2: struct.Struct(">b"), 3: struct.Struct(">h"), 4: struct.Struct(">i")}
_I64: Final = struct.Struct(">q")


def _bad_frame(detail: str) -> AdapterError:
    return AdapterError("bad_frame", f"eventstream: {detail}")


@dataclass(frozen=True)
class EventStreamMessage:
    """One decoded frame: its headers by name and its raw payload."""

    headers: Mapping[str, HeaderValue]
    payload: bytes

    def header_str(self, name: str) -> str | None:
        """A string header's value, None when absent; a non-string value is a bad frame."""
        value = self.headers.get(name)
        if value is None or isinstance(value, str):
            return value
        raise _bad_frame(f"header {name} is not a string")


# --------------------------------------------------------------------------- headers


class _HeaderReader:
    """Reads the header block of one frame, checking every length against the block's end."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, size: int) -> bytes:
        end = self._pos + size
        if end > len(self._data):
            raise _bad_frame("header runs past the header block")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def unpack(self, fmt: struct.Struct) -> int:
        value: int = fmt.unpack(self.take(fmt.size))[0]
        return value

    def text(self, size: int) -> str:
        try:
            return self.take(size).decode("utf-8")
        except UnicodeDecodeError:
            raise _bad_frame("header text is not UTF-8") from None

    @property
    def done(self) -> bool:
        return self._pos >= len(self._data)


def _read_value(reader: _HeaderReader, kind: int) -> HeaderValue:
    if kind in (0, 1):
        return kind == 0
    if kind in _INTS:
        return reader.unpack(_INTS[kind])
    if kind in (5, 8):
        return reader.unpack(_I64)
    if kind == 6:
        return reader.take(reader.unpack(_U16))
    if kind == 7:
        return reader.text(reader.unpack(_U16))
    if kind == 9:
        return uuid.UUID(bytes=reader.take(16))
    raise _bad_frame("unknown header value type")


def parse_headers(data: bytes) -> dict[str, HeaderValue]:
    """Parse a frame's header block. Duplicate names and unknown value types are bad frames."""
    reader = _HeaderReader(data)
    headers: dict[str, HeaderValue] = {}
    while not reader.done:
        name_length = reader.unpack(_U8)
        if name_length == 0:
            raise _bad_frame("empty header name")
        name = reader.text(name_length)
        if name in headers:
            raise _bad_frame("duplicate header")
        headers[name] = _read_value(reader, reader.unpack(_U8))
    return headers


# --------------------------------------------------------------------------- frames


class EventStreamDecoder:
    """Incremental frame decoder: ``feed(bytes)`` → the complete messages, in order."""

    def __init__(
        self,
        *,
        max_headers_bytes: int = MAX_HEADERS_BYTES,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
    ) -> None:
        self._buffer = bytearray()
        self._max_headers = max_headers_bytes
        self._max_payload = max_payload_bytes
        self._broken = False

    @property
    def pending_bytes(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[EventStreamMessage]:
        """Add bytes; return every message they complete. A bad frame raises AdapterError."""
        if self._broken:
            raise _bad_frame("decoder stopped after an earlier bad frame")
        self._buffer += data
        messages: list[EventStreamMessage] = []
        try:
            while (message := self._next_message()) is not None:
                messages.append(message)
        except AdapterError:
            self._broken = True
            self._buffer.clear()
            raise
        return messages

    def close(self) -> None:
        """The body ended: leftover bytes mean the last frame was cut (a bad frame)."""
        if self._buffer:
            self._buffer.clear()
            self._broken = True
            raise _bad_frame("body ended inside a frame")

    def _next_message(self) -> EventStreamMessage | None:
        if len(self._buffer) < PRELUDE_BYTES:
            return None
        total, headers_length, prelude_crc = _PRELUDE.unpack_from(self._buffer)
        if zlib.crc32(self._buffer[:8]) != prelude_crc:
            raise _bad_frame("prelude checksum mismatch")
        self._check_lengths(total, headers_length)
        if len(self._buffer) < total:
            return None
        frame = bytes(self._buffer[:total])
        del self._buffer[:total]
        (message_crc,) = _U32.unpack_from(frame, total - CRC_BYTES)
        if zlib.crc32(frame[: total - CRC_BYTES]) != message_crc:
            raise _bad_frame("message checksum mismatch")
        headers_end = PRELUDE_BYTES + headers_length
        headers = parse_headers(frame[PRELUDE_BYTES:headers_end])
        return EventStreamMessage(headers, frame[headers_end : total - CRC_BYTES])

    def _check_lengths(self, total: int, headers_length: int) -> None:
        if total < MIN_MESSAGE_BYTES or headers_length > total - MIN_MESSAGE_BYTES:
            raise _bad_frame("impossible frame length")
        if headers_length > self._max_headers:
            raise _bad_frame("header block over the limit")
        if total - MIN_MESSAGE_BYTES - headers_length > self._max_payload:
            raise _bad_frame("payload over the limit")


def decode_messages(body: bytes) -> list[EventStreamMessage]:
    """Decode a whole body; a trailing partial frame is a bad frame."""
    decoder = EventStreamDecoder()
    messages = decoder.feed(body)
    decoder.close()
    return messages


# --------------------------------------------------------------------------- events


def _json_object(payload: bytes) -> dict[str, Any]:
    if not payload.strip():
        return {}
    try:
        decoded = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise AdapterError("bad_chunk", "eventstream: frame payload is not JSON") from None
    if not isinstance(decoded, dict):
        raise AdapterError("bad_chunk", "eventstream: frame payload is not a JSON object")
    return decoded


def _required(message: EventStreamMessage, name: str) -> str:
    value = message.header_str(name)
    if not value:
        raise _bad_frame(f"missing header {name}")
    return value


def _event_frame(message: EventStreamMessage) -> dict[str, Any]:
    return {_required(message, ":event-type"): _json_object(message.payload)}


def _exception_frame(message: EventStreamMessage) -> dict[str, Any]:
    return {_required(message, ":exception-type"): _json_object(message.payload)}


def _error_frame(message: EventStreamMessage) -> dict[str, Any]:
    code = message.header_str(":error-code") or "unknown"
    text = message.header_str(":error-message") or ""
    return {STREAM_ERROR_EVENT: {"errorCode": code, "message": text}}


_FRAME_KINDS: Final[dict[str, Callable[[EventStreamMessage], dict[str, Any]]]] = {
    "event": _event_frame,
    "exception": _exception_frame,
    "error": _error_frame,
}


def message_to_event(message: EventStreamMessage) -> dict[str, Any]:
    """``{<event or exception type>: <payload object>}``, the shape boto3 yields."""
    kind = _required(message, ":message-type")
    handler = _FRAME_KINDS.get(kind)
    if handler is None:
        raise _bad_frame("unknown message type")
    return handler(message)


def is_error_event(event: Mapping[str, Any]) -> bool:
    """True for an exception frame's event (``…Exception``) or an ``error`` frame's event."""
    return any(
        isinstance(name, str) and (name == STREAM_ERROR_EVENT or name.endswith("Exception"))
        for name in event
    )


def decode_events(body: bytes) -> list[dict[str, Any]]:
    """A whole eventstream body → its ConverseStream event dicts."""
    return [message_to_event(message) for message in decode_messages(body)]
