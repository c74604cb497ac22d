"""Each SDK's own stream type through the tee onto the real broker; a worker subprocess dispatches.

The tee must yield the SDK's objects unchanged, publish the fragment events, and end a response
inert when the caller stops iterating, the task is cancelled or the stream raises.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from processor import BlockingPublisher, Publisher, TurnContext, tee_stream, tee_stream_sync
from processor.integrations.httpx import tee_response, tee_response_sync
from processor.integrations.tee import TeeState
from tests.integration import sdk_streams as sdk
from tests.integration.conftest import Runtime, wait_until

pytestmark = pytest.mark.integration

WEATHER_UK = ("get_weather", {"city": "Edinburgh", "country": "UK", "units": "c"})
WEATHER_GB = ("get_weather", {"city": "Edinburgh", "country": "GB", "units": "c"})
PARIS = ("get_weather", {"location": "Paris"})
SF = ("get_weather", {"location": "San Francisco"})
BOSTON = ("get_weather", {"location": "Boston"})
TEMPERATURE = ("get_temperature", {"city": "Paris"})


def _turn(turn_id: str) -> TurnContext:
    return TurnContext(tenant="acme", turn_id=turn_id, actor="user-1")


async def _drain(stream: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in stream]


def _by_turn(dispatches: list[dict[str, Any]]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    found: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for d in dispatches:
        found[d["turn_id"]].append((d["tool"], d["arguments"]))
    return {turn: sorted(calls, key=repr) for turn, calls in found.items()}


async def _start_worker(runtime: Runtime) -> None:
    (runtime.tmp_path / "tools.yaml").write_text(sdk.TOOLS_YAML)
    worker = runtime.start_worker()
    await worker.wait_ready()


async def test_each_sdk_stream_type_dispatches_through_the_tee(runtime: Runtime) -> None:
    await _start_worker(runtime)
    expected: dict[str, list[tuple[str, dict[str, Any]]]] = {}

    async with Publisher(runtime.settings) as publisher:
        # openai Chat Completions: AsyncStream[ChatCompletionChunk]
        turn = _turn("openai-chat")
        state = TeeState(turn)
        stream = sdk.openai_chat("openai-chat/single-tool-gpt4o.sse")
        got = await _drain(tee_stream(stream, publisher, turn=turn, start_turn=True, state=state))
        assert [type(c).__name__ for c in got] == ["ChatCompletionChunk"] * 17
        assert got[0].choices[0].delta.tool_calls[0].function.name == "GetWeatherArgs"
        assert state.provider == "openai-chat" and state.ending == "completed"
        assert state.published > 0 and state.failure is None
        expected["openai-chat"] = [WEATHER_UK]

        # openai Responses: AsyncStream[ResponseStreamEvent]
        turn = _turn("openai-responses")
        stream = sdk.openai_responses("openai-responses/azure-single-call.jsonl")
        got = await _drain(tee_stream(stream, publisher, turn=turn, start_turn=True))
        assert type(got[0]).__name__ == "ResponseCreatedEvent"
        assert type(got[-1]).__name__ == "ResponseCompletedEvent"
        expected["openai-responses"] = [SF]

        # anthropic Messages: AsyncStream[RawMessageStreamEvent]
        turn = _turn("anthropic")
        stream = sdk.anthropic_messages("anthropic/text-then-tool-use.sse")
        got = await _drain(tee_stream(stream, publisher, turn=turn, start_turn=True))
        assert type(got[0]).__name__ == "RawMessageStartEvent"
        text = "".join(
            e.delta.text
            for e in got
            if e.type == "content_block_delta" and e.delta.type == "text_delta"
        )
        assert text == "I'll check the current weather in Paris for you."
        expected["anthropic"] = [PARIS]

        # google-genai: GenerateContentResponse chunks (two streamed calls)
        turn = _turn("gemini")
        stream = sdk.gemini("gemini/partial-args-two-sequential-calls.jsonl")
        got = await _drain(tee_stream(stream, publisher, turn=turn, start_turn=True))
        assert {type(c).__name__ for c in got} == {"GenerateContentResponse"}
        expected["gemini"] = sorted([BOSTON, SF], key=repr)

        # httpx raw bytes: an OpenAI-shaped SSE body proxied as is (second call: unknown tool)
        turn = _turn("httpx-sse")
        raw = sdk.body("openai-chat/parallel-two-tools-gpt4o.sse")
        response = httpx.Response(200, content=raw)
        chunks = await _drain(
            tee_response(response, publisher, turn=turn, provider="openai-chat", start_turn=True)
        )
        assert b"".join(chunks) == raw
        expected["httpx-sse"] = [WEATHER_GB]

    # the synchronous side: boto3 converse_stream dicts, and Bedrock eventstream bytes via httpx
    with BlockingPublisher(runtime.settings) as blocking:
        turn = _turn("boto3")
        frames = list(sdk.bedrock("bedrock-converse/nova-text-then-tooluse.decoded.jsonl"))
        got = list(tee_stream_sync(iter(frames), blocking, turn=turn, start_turn=True))
        assert got == frames
        expected["boto3"] = [TEMPERATURE]

        # botocore's own EventStream object, parsing the recorded eventstream bytes
        turn = _turn("botocore")
        events = sdk.botocore_event_stream("bedrock-converse/nova-text-then-tooluse.eventstream")
        got = list(tee_stream_sync(events, blocking, turn=turn, start_turn=True))
        assert len(got) == len(frames) and next(iter(got[0])) == "messageStart"
        expected["botocore"] = [TEMPERATURE]

        turn = _turn("httpx-eventstream")
        raw = (sdk.DATA / "bedrock-converse/nova-text-then-tooluse.eventstream").read_bytes()
        response = httpx.Response(200, content=raw)
        chunks = list(
            tee_response_sync(response, blocking, turn=turn, provider="bedrock", start_turn=True)
        )
        assert b"".join(chunks) == raw
        expected["httpx-eventstream"] = [TEMPERATURE]

        turn = _turn("openai-sync")
        stream = sdk.openai_chat_sync("openai-chat/single-tool-gpt4o.sse")
        got = list(tee_stream_sync(stream, blocking, turn=turn, start_turn=True))
        assert len(got) == 17
        expected["openai-sync"] = [WEATHER_UK]

    async def all_dispatched() -> bool:
        return len(await runtime.dispatches()) >= sum(map(len, expected.values()))

    await wait_until(all_dispatched, timeout=90, what="a dispatch per call of every SDK stream")
    await runtime.wait_caught_up()
    dispatches = await runtime.dispatches()
    assert _by_turn(dispatches) == expected
    assert all(d["actor"] == "user-1" for d in dispatches)


class _Interrupted(Exception):
    pass


async def _cut(stream: Any, after: int, how: str, started: asyncio.Event) -> AsyncIterator[Any]:
    """The SDK stream, cut after ``after`` events: it raises, or hangs (to be cancelled)."""
    count = 0
    async for event in stream:
        yield event
        count += 1
        if count == after:
            if how == "raise":
                raise _Interrupted
            started.set()
            await asyncio.Event().wait()


async def test_interrupted_streams_end_inert_and_never_dispatch(runtime: Runtime) -> None:
    await _start_worker(runtime)
    recording = "openai-chat/single-tool-gpt4o.sse"  # chunk 0 starts the call, 16 ends it
    async with Publisher(runtime.settings) as publisher:
        # the caller stops iterating in the middle of the arguments
        states = {name: TeeState(_turn(name)) for name in ("stopped", "raised", "cancelled")}
        turn = _turn("stopped")
        tee = tee_stream(
            sdk.openai_chat(recording),
            publisher,
            turn=turn,
            start_turn=True,
            state=states["stopped"],
        )
        async with contextlib.aclosing(tee) as events:
            seen = 0
            async for _ in events:
                seen += 1
                if seen == 5:
                    break

        # the stream raises: the caller sees the SDK's error
        turn = _turn("raised")
        never = asyncio.Event()
        cut = _cut(sdk.openai_chat(recording), 5, "raise", never)
        with pytest.raises(_Interrupted):
            await _drain(
                tee_stream(cut, publisher, turn=turn, start_turn=True, state=states["raised"])
            )

        # the task is cancelled while waiting for the provider
        turn = _turn("cancelled")
        waiting = asyncio.Event()
        cut = _cut(sdk.openai_chat(recording), 5, "hang", waiting)
        tee = tee_stream(cut, publisher, turn=turn, start_turn=True, state=states["cancelled"])
        task = asyncio.create_task(_drain(tee))
        await waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        # a complete turn after them, so "no dispatch" is not just a slow worker
        turn = _turn("complete")
        await _drain(tee_stream(sdk.openai_chat(recording), publisher, turn=turn, start_turn=True))

    async def complete_dispatched() -> list[dict[str, Any]]:
        return await runtime.dispatches()

    await wait_until(complete_dispatched, timeout=90, what="the complete turn's dispatch")
    await runtime.wait_caught_up()
    assert _by_turn(await runtime.dispatches()) == {"complete": [WEATHER_UK]}

    ends = {
        r["turn_id"]: (r["status"], r["reason"])
        for r in await runtime.read("fragments")
        if r["type"] == "response.ended"
    }
    assert ends.pop("complete") == ("completed", "tool_calls")
    # each interrupted response ended ``error`` (the reason text is the adapter's own)
    assert {turn: status for turn, (status, _) in ends.items()} == dict.fromkeys(states, "error")
    assert {name: state.ending for name, state in states.items()} == {
        "stopped": "consumer_stopped",
        "raised": "stream_error",
        "cancelled": "cancelled",
    }
    ledger = await runtime.read("ledger")
    failed = {r["turn_id"] for r in ledger if r["state"] != "dispatched"}
    assert failed >= {"stopped", "raised", "cancelled"}
