"""The SDKs' own stream objects, built from the recordings in ``tests/adapters/data``.

openai and anthropic: the SDK's real ``AsyncStream``/``Stream`` decoding the recorded SSE body
(an ``httpx`` response holding the bytes), exactly what ``create(..., stream=True)`` returns.
google-genai: ``types.GenerateContentResponse.model_validate`` of each recorded chunk (what
``generate_content_stream`` yields). boto3: the recorded ``converse_stream`` frames, decoded to the
``{event type: payload}`` dicts boto3 yields.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson

from processor.adapters.sse import iter_provider_events

DATA = Path(__file__).resolve().parents[1] / "adapters" / "data"

TOOLS_YAML = """
tools:
  - name: get_weather
    version: "2"
    aliases: [GetWeatherArgs, getWeather, weather]
    parameters:
      type: object
      properties:
        city: {type: string, minLength: 1}
        location: {type: string}
        country: {type: string}
        units: {enum: [c, f]}
      additionalProperties: false
  - name: get_temperature
    version: "1"
    parameters:
      type: object
      properties:
        city: {type: string, minLength: 1}
      required: [city]
      additionalProperties: false
"""


def body(recording: str) -> bytes:
    """The recorded body as SSE bytes (JSON-lines recordings are framed as ``data:`` events).

    A server ends its body with the blank line that dispatches the last event; some recordings
    lost it, and the SDKs' SSE decoders (rightly) drop an undispatched event at EOF, so it is
    put back.
    """
    raw = (DATA / recording).read_bytes()
    if recording.endswith(".sse"):
        return raw.rstrip(b"\n") + b"\n\n"
    return b"".join(b"data: " + line + b"\n\n" for line in raw.splitlines() if line.strip())


def _response(recording: str) -> Any:
    import httpx2

    return httpx2.Response(
        200, content=body(recording), headers={"content-type": "text/event-stream"}
    )


def openai_chat(recording: str) -> Any:
    """``openai.AsyncStream[ChatCompletionChunk]`` over the recorded body."""
    import openai
    from openai.types.chat import ChatCompletionChunk

    return openai.AsyncStream(
        cast_to=ChatCompletionChunk,
        response=_response(recording),
        client=openai.AsyncOpenAI(api_key="test"),
    )


def openai_chat_sync(recording: str) -> Any:
    """``openai.Stream[ChatCompletionChunk]`` (the synchronous client's stream)."""
    import openai
    from openai.types.chat import ChatCompletionChunk

    return openai.Stream(
        cast_to=ChatCompletionChunk,
        response=_response(recording),
        client=openai.OpenAI(api_key="test"),
    )


def openai_responses(recording: str) -> Any:
    """``openai.AsyncStream[ResponseStreamEvent]`` over the recorded body."""
    import openai
    from openai.types.responses import ResponseStreamEvent

    return openai.AsyncStream(
        cast_to=ResponseStreamEvent,  # type: ignore[arg-type]
        response=_response(recording),
        client=openai.AsyncOpenAI(api_key="test"),
    )


def anthropic_messages(recording: str) -> Any:
    """``anthropic.AsyncStream[RawMessageStreamEvent]`` over the recorded body."""
    import anthropic
    from anthropic.types import RawMessageStreamEvent

    return anthropic.AsyncStream(
        cast_to=RawMessageStreamEvent,  # type: ignore[arg-type]
        response=_response(recording),
        client=anthropic.AsyncAnthropic(api_key="test"),
    )


async def gemini(recording: str) -> AsyncIterator[Any]:
    """What ``client.aio.models.generate_content_stream`` yields: GenerateContentResponse."""
    from google.genai import types

    for event in iter_provider_events((DATA / recording).read_bytes()):
        yield types.GenerateContentResponse.model_validate(event)


def bedrock(recording: str) -> Iterator[dict[str, Any]]:
    """What ``converse_stream(...)["stream"]`` yields: one ``{type: payload}`` dict a frame."""
    for line in (DATA / recording).read_bytes().splitlines():
        if line.strip():
            yield orjson.loads(line)


class _RawBody:
    """The part of urllib3's response botocore's EventStream reads: ``stream()`` of byte chunks."""

    def __init__(self, data: bytes, chunk: int = 37) -> None:
        self._data = data
        self._chunk = chunk  # odd-sized reads: frames arrive split, as from a socket

    def stream(self, amt: int = 1024) -> Iterator[bytes]:
        for start in range(0, len(self._data), self._chunk):
            yield self._data[start : start + self._chunk]

    def close(self) -> None:
        pass


def botocore_event_stream(recording: str, raw_bytes: bytes | None = None) -> Any:
    """What ``converse_stream(...)["stream"]`` really is: botocore's ``EventStream`` over the
    recorded eventstream bytes (or ``raw_bytes``), parsed by botocore with the bedrock-runtime
    service model."""
    import boto3
    from botocore.eventstream import EventStream
    from botocore.parsers import EventStreamJSONParser

    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    operation = client.meta.service_model.operation_model("ConverseStream")
    shape = operation.output_shape.members["stream"]
    raw = _RawBody((DATA / recording).read_bytes() if raw_bytes is None else raw_bytes)
    return EventStream(raw, shape, EventStreamJSONParser(), "ConverseStream")
