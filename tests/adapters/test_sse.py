"""SseDecoder, detect_text_format and iter_provider_events."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.adapters.sse import (
    ProviderEventDecoder,
    SseDecoder,
    SseEvent,
    detect_text_format,
    iter_provider_events,
)
from processor.core.errors import AdapterError
from tests.adapters.harness import DATA, load_events

ALL_FIXTURES = sorted(p for p in DATA.rglob("*") if p.suffix in {".sse", ".jsonl"})
SECRET = "s3cr3t-argument-value"


def decode(*chunks: bytes | str) -> list[SseEvent]:
    decoder = SseDecoder()
    events: list[SseEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


# --------------------------------------------------------------------------- SseDecoder


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_line_ends(eol: str) -> None:
    body = f"event: a{eol}data: 1{eol}{eol}data: 2{eol}{eol}"
    assert decode(body) == [SseEvent("a", "1", None), SseEvent(None, "2", None)]


def test_multi_line_data_comments_and_field_without_colon() -> None:
    body = ": a comment\ndata: first\n:another\ndata:second\ndata\ndata:  two spaces\n\n"
    assert decode(body) == [SseEvent(None, "first\nsecond\n\n two spaces", None)]


def test_id_persists_and_a_nul_id_is_ignored() -> None:
    body = "id: 7\ndata: a\n\ndata: b\n\nid: x\x00y\ndata: c\n\nid\ndata: d\n\n"
    assert [(e.data, e.id) for e in decode(body)] == [("a", "7"), ("b", "7"), ("c", "7"), ("d", "")]


def test_blank_events_retry_and_unknown_fields_dispatch_nothing() -> None:
    assert decode("\n\n\nretry: 10\n\nevent: x\n\nfoo: bar\n\n") == []


def test_bom_is_stripped_once() -> None:
    assert decode("\ufeffdata: a\n\n") == [SseEvent(None, "a", None)]
    assert decode("\ufeff", "\ufeffdata: a\n\n") == []  # a second BOM makes an unknown field


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    assert decode("data: a\r", "\n\r", "\ndata: b\r\n\r\n") == [
        SseEvent(None, "a", None),
        SseEvent(None, "b", None),
    ]


def test_multibyte_character_split_across_byte_chunks() -> None:
    raw = "data: caf\u00e9 \u2603\n\n".encode()
    assert decode(*[raw[i : i + 1] for i in range(len(raw))]) == [
        SseEvent(None, "caf\u00e9 \u2603", None)
    ]


def test_an_event_the_end_of_the_body_cuts_is_discarded() -> None:
    """Issue 29: as the SSE specification (and every provider SDK) says, an event not terminated
    by a blank line when the body ends is never dispatched: the body may be cut inside it."""
    assert decode("data: a\n\ndata: b") == [SseEvent(None, "a", None)]
    assert decode("data: a\r") == []
    assert decode("data: a\n") == []
    assert decode("data: a\n\n") == [SseEvent(None, "a", None)]
    decoder = SseDecoder()
    assert decoder.feed("data: a\n\nevent: x\ndata: b\n") == [SseEvent(None, "a", None)]
    assert decoder.flush() == [] and decoder.discarded
    assert SseDecoder().flush() == []


def test_a_message_stop_without_its_blank_line_is_not_an_end() -> None:
    """The bytes of issue 29: the last event, ``message_stop``, is not terminated."""
    body = b'event: message_delta\ndata: {"type":"message_delta","delta":{}}\n\n'
    body += b'event: message_stop\ndata: {"type":"message_stop"}'
    decoder = ProviderEventDecoder()
    events = decoder.feed(body) + decoder.close()
    assert [e["type"] for e in events] == ["message_delta"]
    assert decoder.discarded_tail


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    body = '\ufeffevent: e\r\ndata: {"a": "\u00e9"}\r\n\r\n: c\rdata: x\rdata: y\r\r\nid: 3\ndata: z\n\n'.encode()
    points = sorted({min(c, len(body)) for c in cuts})
    chunks = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert decode(*chunks) == decode(body)


@pytest.mark.parametrize(
    "path", [p for p in ALL_FIXTURES if p.suffix == ".sse"], ids=lambda p: p.name
)
def test_fixture_byte_by_byte_equals_whole(path: Path) -> None:
    raw = path.read_bytes()
    assert decode(*[raw[i : i + 1] for i in range(len(raw))]) == decode(raw)


# --------------------------------------------------------------------------- format detection


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b'{"type":"x"}\n', "jsonl"),
        ("\ufeff  \n{", "jsonl"),
        (b"data: {}\n\n", "sse"),
        (b"event: message_start\n", "sse"),
        (b": comment\n", "sse"),
        (b"", "sse"),
    ],
)
def test_detect_text_format(head: bytes | str, expected: str) -> None:
    assert detect_text_format(head) == expected


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_formats(path: Path) -> None:
    assert detect_text_format(path.read_bytes()[:64]) == path.suffix.lstrip(".")


# --------------------------------------------------------------------------- provider events


def test_done_ends_an_sse_stream() -> None:
    body = 'data: {"a": 1}\n\ndata: [DONE]\n\ndata: {"b": 2}\n\n'
    assert list(iter_provider_events(body)) == [{"a": 1}]


def test_sse_error_event_gets_a_type() -> None:
    body = 'data: {"a": 1}\n\nevent: error\ndata: {"error": {"code": "x"}}\n\n'
    assert list(iter_provider_events(body))[-1] == {"error": {"code": "x"}, "type": "error"}


def test_sse_error_event_keeps_its_own_type() -> None:
    body = 'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error"}}\n\n'
    assert list(iter_provider_events(body)) == [
        {"type": "error", "error": {"type": "overloaded_error"}}
    ]


def test_blank_data_is_skipped() -> None:
    assert list(iter_provider_events('data:\n\ndata:  \n\ndata: {"a": 1}\n\n')) == [{"a": 1}]


def test_jsonl_body() -> None:
    body = b'{"a": 1}\r\n\n  {"b": 2}\n{"c": 3}'
    assert list(iter_provider_events(body)) == [{"a": 1}, {"b": 2}, {"c": 3}]


@pytest.mark.parametrize(
    "body",
    [
        f"data: {{not json {SECRET}\n\n",
        f'data: ["{SECRET}"]\n\n',
        f'{{"a": 1}}\n{{"b": "{SECRET}"\n',
        f'{{"a": 1}}\n["{SECRET}"]\n',
        b'{"a": "\xff"}\n',
    ],
    ids=["sse not json", "sse not object", "jsonl not json", "jsonl not object", "not utf-8"],
)
def test_unreadable_bodies_raise_adapter_error_without_payload(body: str | bytes) -> None:
    with pytest.raises(AdapterError) as info:
        list(iter_provider_events(body))
    assert SECRET not in str(info.value)


def test_events_before_a_bad_one_are_still_yielded() -> None:
    events = iter_provider_events('data: {"a": 1}\n\ndata: nope\n\n')
    assert next(events) == {"a": 1}
    with pytest.raises(AdapterError):
        next(events)


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_chunked_iteration_equals_whole_body(path: Path) -> None:
    raw = path.read_bytes()
    whole = load_events(path)
    assert whole and all(isinstance(e, dict) for e in whole)
    for size in (1, 7, 4096):
        chunks = [raw[i : i + size] for i in range(0, len(raw), size)]
        assert list(iter_provider_events(chunks)) == whole


def test_format_sniffing_waits_for_a_non_blank_character() -> None:
    decoder = ProviderEventDecoder()
    assert decoder.feed(b"\n \n") == []
    assert decoder.format is None
    assert decoder.feed(b'{"a": 1}\n') == [{"a": 1}]
    assert decoder.format == "jsonl"
    assert decoder.close() == []


def test_explicit_format_and_feed_after_done() -> None:
    decoder = ProviderEventDecoder("sse")
    assert decoder.feed("data: [DONE]\n\n") == []
    assert decoder.done
    assert decoder.feed('data: {"a": 1}\n\n') == []
    assert decoder.close() == []


def test_invalid_utf8_in_an_sse_body_is_an_adapter_error() -> None:
    with pytest.raises(AdapterError):
        decode(b"data: \xff\n\n")
    with pytest.raises(AdapterError):
        decode(b"data: \xc3")  # a character cut at the end of the body


def test_bad_payload_after_good_ones_in_one_slice_is_raised_by_the_next_call() -> None:
    decoder = ProviderEventDecoder()
    assert decoder.feed('data: {"a": 1}\n\ndata: nope\n\ndata: {"b": 2}\n\n') == [{"a": 1}]
    assert decoder.done
    with pytest.raises(AdapterError):
        decoder.close()


def test_bad_tail_found_only_at_close_is_raised_by_check() -> None:
    decoder = ProviderEventDecoder()
    assert decoder.feed('{"a": 1}\n{"b": ') == [{"a": 1}]
    with pytest.raises(AdapterError):
        decoder.close()
    held = ProviderEventDecoder()
    assert held.feed("  ") == []
    assert held.close() == []
    held.check()


def test_recorded_event_counts() -> None:
    assert len(load_events(DATA / "openai-chat" / "single-tool-gpt4o.sse")) == 17
    assert len(load_events(DATA / "openai-responses" / "bedrock-mantle-call-ids-turn1.sse")) == 7
    assert len(load_events(DATA / "anthropic" / "text-then-tool-use.sse")) == 15
