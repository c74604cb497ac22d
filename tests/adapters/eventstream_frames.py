"""An AWS eventstream encoder for tests: frames (prelude, headers, payload, both CRCs) of events,
exceptions and errors, as Bedrock's ``ConverseStream`` sends them."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import orjson


def header(name: str, kind: int, raw: bytes) -> bytes:
    encoded = name.encode()
    return bytes([len(encoded)]) + encoded + bytes([kind]) + raw


def str_header(name: str, value: str) -> bytes:
    data = value.encode()
    return header(name, 7, struct.pack(">H", len(data)) + data)


def frame(headers: bytes, payload: bytes) -> bytes:
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + headers + payload
    return body + struct.pack(">I", zlib.crc32(body))


def event_frame(event_type: str, payload: dict[str, Any]) -> bytes:
    headers = (
        str_header(":event-type", event_type)
        + str_header(":content-type", "application/json")
        + str_header(":message-type", "event")
    )
    return frame(headers, orjson.dumps(payload))


def exception_frame(exception_type: str, payload: dict[str, Any]) -> bytes:
    headers = str_header(":message-type", "exception") + str_header(
        ":exception-type", exception_type
    )
    return frame(headers, orjson.dumps(payload))


def error_frame(code: str, message: str) -> bytes:
    headers = (
        str_header(":message-type", "error")
        + str_header(":error-code", code)
        + str_header(":error-message", message)
    )
    return frame(headers, b"")
