"""StreamAdapter's shared plumbing: failing closed, refusal, builders, ids, withholding."""

from __future__ import annotations

from typing import Any, ClassVar

import orjson
import pytest

from processor.adapters.base import OpenCall, Refusal, StreamAdapter
from processor.adapters.bedrock import BedrockConverseAdapter
from processor.adapters.gemini import GeminiAdapter
from processor.core.errors import AdapterError
from processor.core.events import (
    CallDelta,
    CallEnded,
    CallStarted,
    FragmentEvent,
    ResponseEnded,
    ResponseStatus,
    stable_id,
)
from tests.adapters.harness import CTX


class _Toy(StreamAdapter):
    """The smallest adapter: ``{"open": id}`` opens a response, ``{"boom": kind}`` misbehaves."""

    provider: ClassVar[str] = "toy"
    cut_reason: ClassVar[str] = "cut"

    def __init__(self) -> None:
        super().__init__(CTX)
        self.open: str | None = None

    def _read_event(self, event: dict[str, Any]) -> list[FragmentEvent]:
        if "open" in event:
            self.open = event["open"]
            return []
        boom = event.get("boom")
        if boom == "adapter":
            raise AdapterError("odd_reason", "toy: odd")
        if boom == "key":
            return [event["missing"]]
        if boom == "type":
            return [boom + 1]
        if boom == "long_id":
            return [self.started(OpenCall("r", "i" * 300, "c", "t"))]
        return []

    def _end_open(self, status: ResponseStatus, reason: str) -> list[FragmentEvent]:
        if self.open is None:
            return []
        response_id, self.open = self.open, None
        return [self.response_ended(response_id, status, reason)]


class _Ignoring(_Toy):
    refusal: ClassVar[Refusal] = "ignore"
    unit: ClassVar[str] = "chunk"


class _CodeOnly(_Toy):
    failure_ending: ClassVar[str] = "bad_chunk"


def endings(events: list[FragmentEvent]) -> list[tuple[str, str]]:
    return [(e.status.value, e.reason) for e in events if isinstance(e, ResponseEnded)]


# --------------------------------------------------------------------------- failing closed


@pytest.mark.parametrize(
    ("boom", "detail"),
    [
        ("key", "toy: unreadable event (KeyError)"),
        ("type", "toy: unreadable event (TypeError)"),
        ("long_id", "toy: item_id: string_too_long"),
    ],
)
def test_unexpected_errors_become_bad_chunks_and_fail_the_stream(boom: str, detail: str) -> None:
    adapter = _Toy()
    adapter.feed({"open": "r1"})
    with pytest.raises(AdapterError) as info:
        adapter.feed({"boom": boom})
    assert (info.value.reason, info.value.detail) == ("bad_chunk", detail)
    with pytest.raises(AdapterError) as refused:
        adapter.feed({"open": "r2"})
    assert refused.value.reason == "adapter_failed"
    assert endings(adapter.close()) == [("error", "adapter_error: bad_chunk")]
    assert adapter.close() == []


def test_the_first_failure_names_the_ending() -> None:
    adapter = _Toy()
    adapter.feed({"open": "r1"})
    with pytest.raises(AdapterError, match="odd"):
        adapter.feed({"boom": "adapter"})
    assert endings(adapter.close()) == [("error", "adapter_error: odd_reason")]


def test_a_failure_ending_without_the_code() -> None:
    adapter = _CodeOnly()
    adapter.feed({"open": "r1"})
    with pytest.raises(AdapterError):
        adapter.feed({"boom": "adapter"})
    assert endings(adapter.close()) == [("error", "bad_chunk")]


@pytest.mark.parametrize("chunk", ["{not json", b"[1, 2]"])
def test_undecodable_text_fails_the_stream(chunk: str | bytes) -> None:
    adapter = _Toy()
    adapter.feed('{"open": "r1"}')
    with pytest.raises(AdapterError) as info:
        adapter.feed(chunk)
    assert info.value.reason == "bad_chunk"
    assert info.value.detail.startswith("toy: chunk is not")
    assert endings(adapter.close()) == [("error", "adapter_error: bad_chunk")]


def test_close_ends_an_open_response_with_the_cut_reason_once() -> None:
    adapter = _Toy()
    adapter.feed({"open": "r1"})
    assert endings(adapter.close()) == [("incomplete", "cut")]
    assert adapter.close() == []
    with pytest.raises(AdapterError) as info:
        adapter.feed({"open": "r2"})
    assert info.value.reason == "adapter_closed"


def test_abort_ends_open_responses_as_errors_not_as_cuts() -> None:
    adapter = _Toy()
    adapter.feed({"open": "r1"})
    assert endings(adapter.abort("bad_frame")) == [("error", "adapter_error: bad_frame")]
    assert adapter.abort("bad_frame") == []


def test_ignoring_refusal_ends_the_open_response_at_the_next_chunk() -> None:
    adapter = _Ignoring()
    adapter.feed({"open": "r1"})
    with pytest.raises(AdapterError):
        adapter.feed({"boom": "key"})
    assert endings(adapter.feed({"open": "r2"})) == [("error", "adapter_error: bad_chunk")]
    assert adapter.feed("not even json") == []
    assert adapter.close() == []
    assert adapter.anomalies == ["chunk ignored: the stream is closed or failed"] * 2


def test_unknown_names_the_type_only_when_it_is_a_safe_code() -> None:
    assert _Toy().unknown("brand.new").detail == "toy: unknown event type 'brand.new'"
    assert _Ignoring().unknown("x y {secret}").detail == "toy: unknown chunk type '?'"


@pytest.mark.parametrize("adapter_type", [GeminiAdapter, BedrockConverseAdapter])
def test_gemini_and_bedrock_refuse_by_ignoring(adapter_type: type[StreamAdapter]) -> None:
    adapter = adapter_type(CTX)
    adapter.close()
    assert adapter.feed({}) == []
    assert adapter.anomalies[-1].endswith("ignored: the stream is closed or failed")


# --------------------------------------------------------------------------- builders


def test_builders_refuse_oversized_ids_and_names_without_moving_the_call() -> None:
    adapter = _Toy()
    long_name = OpenCall("r", "i", "c", "t" * 129)
    with pytest.raises(AdapterError) as info:
        adapter.started(long_name)
    assert (info.value.reason, info.value.detail) == ("bad_chunk", "toy: tool: string_too_long")
    long_call = OpenCall("r", "i", "c" * 257, "t")
    with pytest.raises(AdapterError):
        adapter.delta(long_call, "{}")
    with pytest.raises(AdapterError):
        adapter.ended(long_call, "stop")
    assert (long_call.next_seq, long_call.ended) == (1, False)


def test_terminal_event_id_derives_from_the_whole_call_key() -> None:
    adapter = _Toy()
    first, second = OpenCall("r", "0", "c", "t"), OpenCall("r", "1", "c", "t")
    one, two = adapter.ended(first, "stop"), adapter.ended(second, "stop")
    assert one.terminal_event_id != two.terminal_event_id
    expected = stable_id("toy", CTX.tenant, CTX.turn_id, "r", "0", "c", "terminal", "stop")
    assert one.terminal_event_id == expected
    assert _Toy().ended(OpenCall("r", "0", "c", "t"), "stop").terminal_event_id == expected


def test_end_call_gives_a_call_without_text_its_empty_arguments() -> None:
    adapter = _Toy()
    bare = adapter.end_call(OpenCall("r", "0", "c", "t"), "stop", empty='{"a":1}')
    assert [type(e) for e in bare] == [CallDelta, CallEnded]
    assert isinstance(bare[0], CallDelta) and bare[0].delta == '{"a":1}'
    call = OpenCall("r", "1", "c", "t")
    adapter.delta(call, "{}")
    done = adapter.end_call(call, "stop", arguments="{}")
    assert [type(e) for e in done] == [CallEnded]
    assert isinstance(done[0], CallEnded) and (done[0].seq, done[0].arguments) == (2, "{}")


def test_response_ended_keeps_the_reason_a_code_and_records_inert_calls() -> None:
    adapter = _Toy()
    assert adapter.response_ended("r", ResponseStatus.ERROR, "x").reason == "x"
    ended = adapter.response_ended("r", ResponseStatus.ERROR, "x", inert=2)
    assert ended.reason == "x"
    assert adapter.anomalies == ["2 call(s) without a trusted terminal made inert"]


def test_unknown_events_are_counted_and_recorded_without_their_content() -> None:
    adapter = _Toy()
    assert adapter.ignore_unknown("brand.new") == []
    assert adapter.ignore_unknown("s3cr3t value with spaces") == []
    assert adapter.unknown_events == 2
    assert adapter.anomalies == [
        "unknown event type 'brand.new' ignored",
        "unknown event type '?' ignored",
    ]


def test_next_response_id_counts_every_response_and_replays_identically() -> None:
    first, replay = _Toy(), _Toy()
    ids = [first.next_response_id("message"), first.next_response_id("message", "given")]
    ids.append(first.next_response_id("message"))
    assert ids[1] == "given"
    assert ids[0] == stable_id("toy", CTX.tenant, CTX.turn_id, "message", "0")
    assert ids[2] == stable_id("toy", CTX.tenant, CTX.turn_id, "message", "2")
    again = [replay.next_response_id("message"), replay.next_response_id("message", "given")]
    assert [*again, replay.next_response_id("message")] == ids


def test_withhold_records_why_and_leaves_ended_calls_alone() -> None:
    adapter = _Toy()
    open_call, done = OpenCall("r", "0", "c", "t"), OpenCall("r", "1", "d", "t", ended=True)
    adapter.withhold(open_call, "conflict")
    adapter.withhold(done, "late conflict")
    assert (open_call.withheld, done.withheld) == (True, False)
    assert adapter.anomalies == ["conflict: call withheld", "late conflict: call withheld"]
    assert isinstance(adapter.started(open_call), CallStarted)


@pytest.mark.parametrize(
    ("adapter", "recording"),
    [
        ("openai-chat", "openai-chat/parallel-two-tools-gpt4o.sse"),
        ("openai-responses", "openai-responses/azure-single-call.jsonl"),
        ("anthropic", "anthropic/text-then-tool-use.sse"),
        ("gemini", "gemini/partial-args-two-sequential-calls.jsonl"),
    ],
)
@pytest.mark.parametrize("bad_id", ["\x00", "x" * 257, "with space"])
def test_close_never_raises_for_a_response_id_the_wire_refuses(
    adapter: str, recording: str, bad_id: str
) -> None:
    """A provider's response id is taken before any event is built; one the wire contract
    refuses fails the stream at its first event, and close() must still return (found by the
    fuzzer: it raised while ending that response, leaving the other open ones unended)."""
    from processor.integrations.tee import ADAPTERS
    from tests.adapters.harness import DATA, load_events, run_adapter

    def make_adapter(name: str, ctx: Any) -> StreamAdapter:
        return ADAPTERS[name](ctx)

    events = load_events(DATA / recording)
    good = [e.response_id for e in run_adapter(make_adapter(adapter, CTX), events)]
    assert good, "the recording opens a response"
    original = good[0].split("~")[0]
    text = orjson.dumps(events).decode().replace(original, orjson.dumps(bad_id).decode()[1:-1])
    mutated = orjson.loads(text)
    assert mutated != events
    subject = make_adapter(adapter, CTX)
    out: list[FragmentEvent] = []
    with pytest.raises(AdapterError):
        for event in mutated:
            out.extend(subject.feed(event))
    out.extend(subject.close())  # must not raise
    assert all(getattr(e, "response_id", None) != bad_id for e in out)
    assert subject.close() == []
