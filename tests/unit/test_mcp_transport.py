"""The MCP transports' pure parts: the bounded line reader, the request key, shown text."""

from __future__ import annotations

import pytest

from processor.mcp.transport import (
    META_IDEMPOTENCY_KEY,
    MessageTooLarge,
    TransportState,
    _LineReader,
    request_key,
    shown,
)


def test_lines_split_across_chunks_and_a_long_line_is_refused_as_it_arrives() -> None:
    lines = _LineReader(limit=10)
    assert lines.feed(b'{"a"') == []
    assert lines.feed(b':1}\n{"b":2}\r\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert lines.feed(b":3}\n") == [b'{"c":3}']
    with pytest.raises(MessageTooLarge):
        lines.feed(b"x" * 6)
        lines.feed(b"x" * 6)  # 12 bytes of one line: over the bound before its end
    assert lines.buffered == 0  # nothing of it is kept


def test_the_request_key_is_read_from_the_meta_of_a_message_or_its_json() -> None:
    params = {"name": "t", "_meta": {META_IDEMPOTENCY_KEY: "d-1", "traceparent": "x"}}
    assert request_key({"jsonrpc": "2.0", "id": 1, "params": params}) == "d-1"

    class Message:
        def __init__(self, params: object) -> None:
            self.params = params

    assert request_key(Message(params)) == "d-1"
    assert request_key(Message(None)) is None
    assert request_key({"params": {"_meta": {META_IDEMPOTENCY_KEY: 7}}}) is None
    state = TransportState()
    assert state.never_left("d-1")  # never handed over
    state.handed.add("d-1")
    assert not state.never_left("d-1")
    state.unsent.add("d-1")
    assert state.never_left("d-1")
    state.forget("d-1")
    assert not state.handed and not state.unsent


def test_server_text_is_shown_bounded_and_escaped() -> None:
    assert shown("bookings") == "bookings"
    assert shown("a\u202eb\x1b[31m\U000e0041\n") == "a\\u202eb\\x1b[31m\\U000e0041\\n"
    assert len(shown("x" * 1000)) == 200
    assert shown(None) == ""
