"""The tee's normalisation, without Kafka: an SDK's own stream objects give exactly the fragment
events the adapter gives for the recorded wire body (``processor adapt``), for every SDK and its
helper streams; and the publishing side fails closed while the provider's events keep flowing.

Publishing onto the real broker, and the dispatches that follow, are tested in
``tests/integration/test_tee_sdks.py``; here the sink only collects what would be published.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anthropic
import openai
import orjson
import pytest
from anthropic.lib.streaming import AsyncMessageStream
from openai.lib.streaming.chat import AsyncChatCompletionStream

from processor import ConfigurationError, TurnContext, tee_stream
from processor.adapters.sse import iter_provider_events
from processor.core.events import FragmentEvent, TurnStarted
from processor.integrations.tee import ADAPTERS, TeeState
from tests.integration import sdk_streams as sdk

TURN = TurnContext(tenant="acme", turn_id="t-1", actor="user-1")


class Collected:
    """An AsyncSink that keeps what it is given (no broker: normalisation only)."""

    def __init__(self) -> None:
        self.events: list[FragmentEvent] = []

    async def publish(self, events: Iterable[FragmentEvent], traceparent: str | None = None) -> int:
        batch = list(events)
        self.events += batch
        return len(batch)

    async def start_turn(self, turn: TurnContext) -> TurnStarted:
        raise AssertionError("not used")


def _plain(events: list[FragmentEvent]) -> list[dict[str, Any]]:
    return [e.model_dump(exclude={"ts"}) for e in events]


def adapted(provider: str, recording: str) -> list[dict[str, Any]]:
    """What ``processor adapt`` makes of the recorded body."""
    adapter = ADAPTERS[provider](TURN)
    out: list[FragmentEvent] = []
    for event in iter_provider_events((sdk.DATA / recording).read_bytes()):
        out += adapter.feed(event)
    return _plain(out + adapter.close())


async def teed(stream: Any) -> tuple[list[dict[str, Any]], TeeState]:
    sink = Collected()
    state = TeeState(TURN)
    async for _ in tee_stream(stream, sink, turn=TURN, state=state):
        pass
    return _plain(sink.events), state


async def _gemini(recording: str) -> AsyncIterator[Any]:
    async for chunk in sdk.gemini(recording):
        yield chunk


CASES = [
    ("openai-chat", "openai-chat/single-tool-gpt4o.sse", sdk.openai_chat),
    ("openai-chat", "openai-chat/parallel-two-tools-gpt4o.sse", sdk.openai_chat),
    (
        "openai-chat",
        "openai-chat/parallel-two-tools-gpt4o.sse",
        lambda r: AsyncChatCompletionStream(
            raw_stream=sdk.openai_chat(r), response_format=openai.omit, input_tools=openai.omit
        ),
    ),
    ("openai-responses", "openai-responses/azure-single-call.jsonl", sdk.openai_responses),
    (
        "openai-responses",
        "openai-responses/reasoning-then-call-4-turns.jsonl",
        sdk.openai_responses,
    ),
    ("anthropic", "anthropic/text-then-tool-use.sse", sdk.anthropic_messages),
    ("anthropic", "anthropic/tool-use-truncated-max-tokens.sse", sdk.anthropic_messages),
    (
        "anthropic",
        "anthropic/text-then-tool-use.sse",
        lambda r: AsyncMessageStream(sdk.anthropic_messages(r), output_format=anthropic.NOT_GIVEN),
    ),
    ("gemini", "gemini/partial-args-two-sequential-calls.jsonl", _gemini),
    ("gemini", "gemini/partial-args-noargs-then-three-calls.jsonl", _gemini),
    ("gemini", "gemini/whole-call-one-chunk.jsonl", _gemini),
]


@pytest.mark.parametrize(("provider", "recording", "make"), CASES)
async def test_sdk_objects_normalise_like_the_wire_body(
    provider: str, recording: str, make: Any
) -> None:
    got, state = await teed(make(recording))
    assert state.provider == provider
    assert got == adapted(provider, recording)
    assert any(e["type"] == "call.started" for e in got)
    assert state.ending == "completed" and state.failure is None


async def test_boto3_dicts_normalise_like_the_eventstream_body() -> None:
    async def frames() -> AsyncIterator[dict[str, Any]]:
        for frame in sdk.bedrock("bedrock-converse/nova-text-then-tooluse.decoded.jsonl"):
            yield frame

    got, state = await teed(frames())
    adapter = ADAPTERS["bedrock"](TURN)
    raw = (sdk.DATA / "bedrock-converse/nova-text-then-tooluse.eventstream").read_bytes()
    assert state.provider == "bedrock"
    assert got == _plain(adapter.feed_bytes(raw) + adapter.close())


async def test_an_object_no_sdk_makes_is_refused_before_anything_is_yielded() -> None:
    async def odd() -> AsyncIterator[object]:
        yield object()

    with pytest.raises(ConfigurationError, match="provider="):
        await teed(odd())


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
async def test_an_unreadable_event_ends_the_response_inert_and_events_keep_flowing() -> None:
    chunks = [c async for c in sdk.openai_chat("openai-chat/single-tool-gpt4o.sse")]
    broken = chunks[3].model_copy(deep=True)
    broken.choices[0].delta.tool_calls[0].index = "not a number"  # type: ignore[assignment]

    async def stream() -> AsyncIterator[Any]:
        for chunk in [*chunks[:3], broken, *chunks[4:]]:
            yield chunk

    sink = Collected()
    state = TeeState(TURN)
    seen = [c async for c in tee_stream(stream(), sink, turn=TURN, state=state)]
    assert len(seen) == len(chunks)  # the user's stream is not cut
    assert state.failure is not None and state.failure.reason == "bad_chunk"
    ends = [e for e in sink.events if e.type == "response.ended"]
    assert [(e.status.value, e.reason) for e in ends] == [("error", "bad_chunk")]
    assert not any(e.type == "call.ended" for e in sink.events)


async def test_the_same_cut_bytes_reach_the_same_verdict_offline_and_through_the_sdk() -> None:
    """Issue 29: a body whose last SSE event (``message_stop``) lacks its blank line. The
    anthropic SDK drops that event (the SSE specification); ``processor adapt`` must too, so
    offline replay reaches the verdict the live tee reached: incomplete, nothing can act."""
    import httpx2
    from anthropic.types import RawMessageStreamEvent

    from processor.cli.adapt import adapt_stream

    raw = (sdk.DATA / "anthropic/text-then-tool-use.sse").read_bytes().rstrip(b"\n")
    assert raw.endswith(b'data: {"type":"message_stop"}')
    stream = anthropic.AsyncStream(
        cast_to=RawMessageStreamEvent,  # type: ignore[arg-type]
        response=httpx2.Response(200, content=raw, headers={"content-type": "text/event-stream"}),
        client=anthropic.AsyncAnthropic(api_key="test"),
    )
    teed_events, _ = await teed(stream)
    adapter = ADAPTERS["anthropic"](TURN)
    offline = _plain(list(adapt_stream(io.BytesIO(raw), adapter)))
    assert offline == teed_events
    ends = [(e["status"], e["reason"]) for e in offline if e["type"] == "response.ended"]
    assert ends == [("incomplete", "stream_cut")]


def _azure_filtered_body() -> bytes:
    """An OpenAI-shaped SSE body as Azure OpenAI's asynchronous filter sends it: the call, its
    ``finish_reason: "tool_calls"``, then the filter's verdict, then ``[DONE]``."""
    chunks = [
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "finish_reason": None, "delta": {"role": "assistant",
          "tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                          "function": {"name": "transfer", "arguments": '{"amount": 10}'}}]}}]},
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"id": "", "object": "", "created": 0, "model": "",
         "choices": [{"index": 0, "finish_reason": "content_filter",
                      "content_filter_results": {"violence": {"filtered": True,
                                                              "severity": "high"}},
                      "content_filter_offsets": {"check_offset": 0, "start_offset": 0,
                                                 "end_offset": 80}}]},
    ]  # fmt: skip
    body = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return body + b"data: [DONE]\n\n"


async def test_the_tee_publishes_completed_only_when_the_sdk_stream_ends() -> None:
    """Issue 29: the verdict is the stream's last word. Through the openai SDK's own stream,
    nothing ``completed`` is published at ``finish_reason``; Azure's later filter verdict voids
    the call, as ``processor adapt`` does on the same bytes."""
    import httpx2
    from openai.types.chat import ChatCompletionChunk

    from processor.cli.adapt import adapt_stream

    raw = _azure_filtered_body()
    stream = openai.AsyncStream(
        cast_to=ChatCompletionChunk,
        response=httpx2.Response(200, content=raw, headers={"content-type": "text/event-stream"}),
        client=openai.AsyncOpenAI(api_key="test"),
    )
    sink = Collected()
    state = TeeState(TURN)
    endings_when_seen = []
    async for chunk in tee_stream(stream, sink, turn=TURN, state=state):
        endings_when_seen.append(
            (chunk.choices[0].finish_reason, [e.type for e in sink.events].count("response.ended"))
        )
    assert endings_when_seen == [(None, 0), ("tool_calls", 0), ("content_filter", 1)]
    offline = _plain(list(adapt_stream(io.BytesIO(raw), ADAPTERS["openai-chat"](TURN))))
    assert _plain(sink.events) == offline
    ends = [(e["status"], e["reason"]) for e in offline if e["type"] == "response.ended"]
    assert ends == [("failed", "content_filter")]


def test_a_bedrock_exception_after_message_stop_ends_the_tee_and_adapt_in_error() -> None:
    """Issue 29: after ``messageStop`` the stream ends with ``serviceUnavailableException``
    instead of ``metadata``. botocore raises it from the iteration; the tee aborts (``error``),
    and ``processor adapt`` on the same bytes ends the response ``error`` too."""
    from botocore.exceptions import EventStreamError

    from processor import tee_stream_sync
    from processor.cli.adapt import adapt_stream
    from tests.adapters.eventstream_frames import exception_frame

    recording = "bedrock-converse/nova-text-then-tooluse.eventstream"
    raw = (sdk.DATA / recording).read_bytes()
    cut, offset = 0, 0
    while offset < len(raw):  # up to and including messageStop: every frame but metadata
        cut, offset = offset, offset + int.from_bytes(raw[offset : offset + 4], "big")
    body = raw[:cut] + exception_frame("serviceUnavailableException", {"message": "x"})

    class Blocking:
        events: list[FragmentEvent] = []

        def publish(self, events: Iterable[FragmentEvent], traceparent: str | None = None) -> int:
            batch = list(events)
            self.events += batch
            return len(batch)

        def start_turn(self, turn: TurnContext) -> TurnStarted:
            raise AssertionError("not used")

    sink = Blocking()
    with pytest.raises(EventStreamError):
        for _ in tee_stream_sync(sdk.botocore_event_stream(recording, body), sink, turn=TURN):
            pass
    ends = [(e.status.value, e.reason) for e in sink.events if e.type == "response.ended"]
    assert ends == [("error", "adapter_error: stream_error")]
    assert not any(e.type == "response.ended" and e.status.value == "completed"
                   for e in sink.events)  # fmt: skip
    offline = list(adapt_stream(io.BytesIO(body), ADAPTERS["bedrock"](TURN)))
    offline_ends = [(e.status.value, e.reason) for e in offline if e.type == "response.ended"]
    assert offline_ends == [("error", "serviceUnavailableException")]
