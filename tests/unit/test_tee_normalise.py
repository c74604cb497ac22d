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

    from processor.commands_adapt import adapt_stream

    raw = (sdk.DATA / "anthropic/text-then-tool-use.sse").read_bytes().rstrip(b"\n")
    assert raw.endswith(b'data: {"type":"message_stop"}')
    stream = anthropic.AsyncStream(
        cast_to=RawMessageStreamEvent,  # type: ignore[arg-type]
        response=httpx2.Response(200, content=raw, headers={"content-type": "text/event-stream"}),
        client=anthropic.AsyncAnthropic(api_key="test"),
    )
    teed_events, state = await teed(stream)
    adapter = ADAPTERS["anthropic"](TURN)
    offline = _plain(list(adapt_stream(io.BytesIO(raw), adapter)))
    assert offline == teed_events
    ends = [(e["status"], e["reason"]) for e in offline if e["type"] == "response.ended"]
    assert ends == [("incomplete", "stream_cut")]
