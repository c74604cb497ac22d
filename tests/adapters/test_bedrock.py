"""The Bedrock ConverseStream adapter: the recorded eventstream, decoded events, edge cases."""

from __future__ import annotations

import contextlib
import copy
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.adapters.bedrock import BedrockConverseAdapter
from processor.core.errors import AdapterError
from processor.core.events import CallDelta, CallEnded, CallStarted, FragmentEvent, ResponseEnded
from tests.adapters.eventstream_frames import error_frame, event_frame, exception_frame
from tests.adapters.harness import (
    CTX,
    DATA,
    assembled_calls,
    dumped,
    ended_call_ids,
    load_events,
    response_endings,
    run_adapter,
)

BEDROCK = DATA / "bedrock-converse"
RAW = (BEDROCK / "nova-text-then-tooluse.eventstream").read_bytes()
TOOL_USE_ID = "tooluse_lAG_zP8QRHmSYOwZzzaCqA"


def run(events: list[dict[str, Any]]) -> tuple[list[FragmentEvent], BedrockConverseAdapter]:
    adapter = BedrockConverseAdapter(CTX)
    return run_adapter(adapter, events), adapter


def run_bytes(*pieces: bytes) -> tuple[list[FragmentEvent], BedrockConverseAdapter]:
    adapter = BedrockConverseAdapter(CTX)
    out: list[FragmentEvent] = []
    for piece in pieces:
        out.extend(adapter.feed_bytes(piece))
    return out + adapter.close(), adapter


def calls(events: list[FragmentEvent]) -> list[tuple[str, Any]]:
    return [(c["tool"], c["arguments"]) for c in assembled_calls(events)]


# --------------------------------------------------------------------------- event builders


def message_start() -> dict[str, Any]:
    return {"messageStart": {"role": "assistant"}}


def block_start(index: int, name: str, tool_use_id: str) -> dict[str, Any]:
    tool_use = {"toolUseId": tool_use_id, "name": name}
    return {"contentBlockStart": {"contentBlockIndex": index, "start": {"toolUse": tool_use}}}


def tool_input(index: int, text: str) -> dict[str, Any]:
    delta = {"toolUse": {"input": text}}
    return {"contentBlockDelta": {"contentBlockIndex": index, "delta": delta}}


def text_delta(index: int, text: str) -> dict[str, Any]:
    return {"contentBlockDelta": {"contentBlockIndex": index, "delta": {"text": text}}}


def block_stop(index: int) -> dict[str, Any]:
    return {"contentBlockStop": {"contentBlockIndex": index}}


def message_stop(reason: str) -> dict[str, Any]:
    return {"messageStop": {"stopReason": reason}}


METADATA: dict[str, Any] = {"metadata": {"usage": {"inputTokens": 1, "outputTokens": 2}}}
"""The documented end of a ConverseStream: ``metadata`` after ``messageStop``, then EOF."""


def one_call(*inputs: str, stop: str = "tool_use") -> list[dict[str, Any]]:
    return [
        message_start(),
        block_start(0, "run", "tu-1"),
        *[tool_input(0, text) for text in inputs],
        block_stop(0),
        message_stop(stop),
        METADATA,
    ]


# --------------------------------------------------------------------------- the recording


def test_recorded_eventstream() -> None:
    events, adapter = run_bytes(RAW)
    (call,) = assembled_calls(events)
    assert call["tool"] == "get_temperature"
    assert call["arguments"] == {"city": "Paris"}
    assert call["call_id"] == TOOL_USE_ID
    assert call["item_id"] == "1"
    assert response_endings(events) == [(call["response_id"], "completed", "tool_use")]
    assert adapter.anomalies == []


def test_recorded_text_block_is_not_published() -> None:
    events, _ = run_bytes(RAW)
    assert {e.item_id for e in events if not isinstance(e, ResponseEnded)} == {"1"}
    assert [type(e) for e in events] == [CallStarted, CallDelta, CallEnded, ResponseEnded]


def test_recorded_decoded_events_give_the_same_fragments_as_the_bytes() -> None:
    from_bytes, _ = run_bytes(RAW)
    from_dicts, _ = run(load_events(BEDROCK / "nova-text-then-tooluse.decoded.jsonl"))
    assert dumped(from_dicts) == dumped(from_bytes)


def test_recorded_eventstream_one_byte_at_a_time() -> None:
    whole, _ = run_bytes(RAW)
    split, _ = run_bytes(*[RAW[i : i + 1] for i in range(len(RAW))])
    assert dumped(split) == dumped(whole)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(RAW)), max_size=20))
def test_recorded_eventstream_any_chunking(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(RAW)]
    split, _ = run_bytes(*[RAW[a:b] for a, b in itertools.pairwise(points)])
    whole, _ = run_bytes(RAW)
    assert dumped(split) == dumped(whole)


def test_recorded_replay_is_deterministic() -> None:
    first, _ = run_bytes(RAW)
    second, _ = run_bytes(RAW)
    assert dumped(first) == dumped(second)
    assert len({e.event_id for e in first}) == len(first)


def test_recorded_stop_is_trusted_only_after_message_stop() -> None:
    frames = load_events(BEDROCK / "nova-text-then-tooluse.decoded.jsonl")
    stop_at = next(i for i, e in enumerate(frames) if "messageStop" in e)
    events, _ = run(frames[:stop_at])
    assert ended_call_ids(events) == []
    assert response_endings(events)[0][1:] == (
        "incomplete",
        "stream_cut",
    )
    frames[stop_at] = message_stop("max_tokens")
    events, _ = run(frames)
    assert calls(events) == []
    assert response_endings(events)[0][1] == "incomplete"


# --------------------------------------------------------------------------- hand-written


def test_interleaved_parallel_tool_blocks() -> None:
    stream = [
        message_start(),
        text_delta(0, "Let me check."),
        block_stop(0),
        block_start(1, "get_weather", "tu-a"),
        block_start(2, "get_weather", "tu-b"),
        tool_input(1, '{"city":'),
        tool_input(2, '{"city":"Ro'),
        tool_input(1, '"Paris"}'),
        block_stop(1),
        tool_input(2, 'me"}'),
        block_stop(2),
        message_stop("tool_use"),
        METADATA,
    ]
    events, adapter = run(stream)
    got = assembled_calls(events)
    assert [(c["item_id"], c["call_id"], c["arguments"]) for c in got] == [
        ("1", "tu-a", {"city": "Paris"}),
        ("2", "tu-b", {"city": "Rome"}),
    ]
    assert adapter.anomalies == []
    # Block 1's stop is trusted as soon as block 2 streams on, before the message stops.
    ended_at = next(i for i, e in enumerate(events) if isinstance(e, CallEnded))
    after = events[ended_at + 1]
    assert isinstance(after, CallDelta)
    assert after.delta == 'me"}'


def test_a_max_tokens_cut_of_a_later_block_voids_the_earlier_block_too() -> None:
    """A response cut by max_tokens is not a normal completion: none of its calls acts."""
    stream = [
        message_start(),
        block_start(0, "a", "tu-a"),
        tool_input(0, '{"x":1}'),
        block_stop(0),
        block_start(1, "b", "tu-b"),
        tool_input(1, '{"path":"/tmp/bu'),
        block_stop(1),
        message_stop("max_tokens"),
    ]
    events, _ = run(stream)
    assert calls(events) == []
    assert response_endings(events)[0][1:] == (
        "incomplete",
        "max_tokens",
    )


def test_truncation_mid_string_without_stop_is_inert() -> None:
    stream = [message_start(), block_start(0, "run", "tu-1"), tool_input(0, '{"cmd":"rm -rf /tm')]
    events, _ = run([*stream, message_stop("max_tokens")])
    assert ended_call_ids(events) == []
    assert response_endings(events)[0][1] == "incomplete"


@pytest.mark.parametrize("inputs", [(), ("",), ("  ",)])
def test_a_call_without_input_gets_empty_arguments(inputs: tuple[str, ...]) -> None:
    events, _ = run(one_call(*inputs))
    assert calls(events) == [("run", {})]


def test_split_input_keeps_arrival_order() -> None:
    events, _ = run(one_call('{"a"', ":[1,", "2]}"))
    assert calls(events) == [("run", {"a": [1, 2]})]
    assert [e.seq for e in events if isinstance(e, CallDelta)] == [1, 2, 3]
    assert [e.seq for e in events if isinstance(e, CallEnded)] == [4]


@pytest.mark.parametrize(
    ("stop", "status"),
    [
        ("end_turn", "completed"),
        ("stop_sequence", "completed"),
        ("guardrail_intervened", "failed"),
        ("content_filtered", "failed"),
        ("model_context_window_exceeded", "incomplete"),
        ("brand_new_reason", "failed"),
    ],
)
def test_stop_reasons(stop: str, status: str) -> None:
    events, _ = run(one_call('{"a":1}', stop=stop))
    (ending,) = response_endings(events)
    assert ending[1] == status
    assert calls(events) == ([("run", {"a": 1})] if status == "completed" else [])
    assert ending[2] == stop


@pytest.mark.parametrize(
    "exception",
    [
        "internalServerException",
        "modelStreamErrorException",
        "throttlingException",
        "validationException",
        "serviceUnavailableException",
    ],
)
def test_exception_mid_call_fails_the_response(exception: str) -> None:
    stream = one_call('{"a":', "1}")
    stream.insert(3, {exception: {"message": "secret provider text"}})
    events, adapter = run(stream)
    assert ended_call_ids(events) == []
    assert response_endings(events) == [
        (response_endings(events)[0][0], "error", exception)
    ]
    assert "secret" not in " ".join(adapter.anomalies)
    # The stream is over after an exception: what follows is ignored, nothing reopens.
    assert adapter.anomalies[2:] == [
        "content outside a message ignored",
        "content outside a message ignored",
        "messageStop outside a message ignored",
        "metadata outside a stopped message ignored",
    ]


def test_exception_frame_mid_call_in_the_binary_stream() -> None:
    body = (
        event_frame("messageStart", {"role": "assistant"})
        + event_frame("contentBlockStart", block_start(0, "run", "tu-1")["contentBlockStart"])
        + event_frame("contentBlockDelta", tool_input(0, '{"a":')["contentBlockDelta"])
        + exception_frame("modelStreamErrorException", {"message": "x", "originalStatusCode": 500})
    )
    events, _ = run_bytes(body)
    assert ended_call_ids(events) == []
    assert response_endings(events)[0][1:] == ("error", "modelStreamErrorException")


def test_error_frame_in_the_binary_stream() -> None:
    body = event_frame("messageStart", {}) + error_frame("InternalFailure", "x")
    events, _ = run_bytes(body)
    assert response_endings(events)[0][1:] == ("error", "streamError")


def test_duplicated_start_and_stop_are_ignored() -> None:
    stream = [
        message_start(),
        block_start(0, "run", "tu-1"),
        block_start(0, "run", "tu-1"),
        tool_input(0, '{"a":1}'),
        block_stop(0),
        block_stop(0),
        tool_input(0, "extra"),
        message_stop("tool_use"),
        METADATA,
    ]
    events, adapter = run(stream)
    assert calls(events) == [("run", {"a": 1})]
    assert len([e for e in events if isinstance(e, CallStarted)]) == 1
    assert adapter.anomalies == [
        "repeated contentBlockStart ignored",
        "repeated contentBlockStop ignored",
        "tool input after contentBlockStop ignored",
    ]


def test_replay_through_a_fresh_adapter_gives_the_same_event_ids() -> None:
    stream = one_call('{"a":', "1}")
    first, _ = run(stream)
    replay, _ = run(copy.deepcopy(stream))
    assert [e.event_id for e in first] == [e.event_id for e in replay]


@pytest.mark.parametrize(
    "conflict",
    [block_start(0, "other", "tu-1"), block_start(0, "run", "tu-2"), block_start(1, "run", "tu-1")],
)
def test_conflicting_identity_makes_the_response_inert(conflict: dict[str, Any]) -> None:
    stream = one_call('{"a":1}')
    stream.insert(3, conflict)
    events, adapter = run(stream)
    assert ended_call_ids(events) == []
    assert response_endings(events)[0][1] == "error"
    assert response_endings(events)[0][2].startswith("identity_conflict")
    assert any("inert" in a for a in adapter.anomalies)


def test_tool_input_without_a_start_makes_the_response_inert() -> None:
    stream = [message_start(), tool_input(3, '{"a":1}'), block_stop(3), message_stop("tool_use")]
    events, _ = run(stream)
    assert response_endings(events)[0][1:] == (
        "error",
        "protocol_violation",
    )


def test_messages_get_distinct_deterministic_response_ids() -> None:
    stream = one_call('{"a":1}') + one_call('{"a":2}')
    events, _ = run(stream)
    ids = [e[0] for e in response_endings(events)]
    assert len(set(ids)) == 2
    again, _ = run(copy.deepcopy(stream))
    assert ids == [e[0] for e in response_endings(again)]
    assert calls(events) == [("run", {"a": 1}), ("run", {"a": 2})]


def test_a_second_message_start_supersedes_an_open_message() -> None:
    stream = [message_start(), block_start(0, "run", "tu-1"), tool_input(0, "{"), *one_call("{}")]
    events, adapter = run(stream)
    assert [e[1:] for e in response_endings(events)] == [
        ("incomplete", "superseded"),
        ("completed", "tool_use"),
    ]
    assert calls(events) == [("run", {})]
    assert "messageStart before the previous messageStop" in adapter.anomalies


def test_content_outside_a_message_is_ignored() -> None:
    stream = one_call('{"a":1}')[1:]
    events, adapter = run(stream)
    assert events == []
    assert adapter.anomalies == [
        *["content outside a message ignored"] * 3,
        "messageStop outside a message ignored",
        "metadata outside a stopped message ignored",
    ]


def test_metadata_after_message_stop_then_the_end_completes_the_message() -> None:
    adapter = BedrockConverseAdapter(CTX)
    events: list[FragmentEvent] = []
    for event in one_call("{}"):
        events += adapter.feed(event)
    assert not any(isinstance(e, ResponseEnded) for e in events)  # held for the stream's end
    events += adapter.close()
    assert calls(events) == [("run", {})]
    assert response_endings(events)[0][1:] == ("completed", "tool_use")
    assert adapter.anomalies == []


def test_a_stream_that_ends_after_message_stop_without_metadata_is_cut() -> None:
    events, _ = run(one_call("{}")[:-1])
    assert calls(events) == []
    assert response_endings(events)[0][1:] == ("incomplete", "stream_cut")


def test_close_without_message_stop() -> None:
    events, _ = run(one_call('{"a":1}')[:-2])
    assert calls(events) == []
    assert response_endings(events)[0][1] == "incomplete"


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        "[1]",
        {},
        {"messageStart": {}, "messageStop": {}},
        {"contentBlockDelta": "x"},
        {"contentBlockDelta": {"contentBlockIndex": "0", "delta": {}}},
        {"contentBlockDelta": {"contentBlockIndex": True, "delta": {}}},
        {"contentBlockDelta": {"contentBlockIndex": -1, "delta": {}}},
        {"contentBlockDelta": {"contentBlockIndex": 0}},
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"toolUse": {"input": 5}}}},
        {"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": "x"}}},
        {"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": {"name": "f"}}}},
        block_start(1, "", "tu-9"),
        block_start(1, "f" * 129, "tu-9"),
        block_start(1, "f", "t" * 300),
    ],
)
def test_bad_events_raise_adapter_error_then_the_response_ends_inert(bad: Any) -> None:
    adapter = BedrockConverseAdapter(CTX)
    opened = adapter.feed(message_start()) + adapter.feed(block_start(0, "run", "tu-1"))
    assert [type(e) for e in opened] == [CallStarted]
    with pytest.raises(AdapterError) as info:
        adapter.feed(bad)
    assert info.value.reason == "bad_chunk"
    (ending,) = adapter.close()
    assert isinstance(ending, ResponseEnded)
    assert (ending.status.value, ending.reason.split(";")[0]) == (
        "error",
        "adapter_error: bad_chunk",
    )


def boundary(frames: int) -> int:
    """The byte offset just after the first ``frames`` frames of the recording."""
    offset = 0
    for _ in range(frames):
        offset += int.from_bytes(RAW[offset : offset + 4], "big")
    return offset


AFTER_TOOL_INPUT = boundary(23)  # messageStart, 19 text deltas, stop 0, start 1, input 1


def test_flipped_byte_in_the_binary_stream() -> None:
    corrupt = bytearray(RAW)
    corrupt[AFTER_TOOL_INPUT + 30] ^= 0x10
    adapter = BedrockConverseAdapter(CTX)
    good = adapter.feed_bytes(bytes(corrupt[:AFTER_TOOL_INPUT]))
    assert [type(e) for e in good] == [CallStarted, CallDelta]
    with pytest.raises(AdapterError) as info:
        adapter.feed_bytes(bytes(corrupt[AFTER_TOOL_INPUT:]))
    assert info.value.reason == "bad_frame"
    events = good + adapter.close()
    assert ended_call_ids(events) == []
    assert response_endings(events)[0][1:] == (
        "error",
        "adapter_error: bad_frame",
    )


def test_after_a_bad_frame_the_stream_is_refused_and_ended_once() -> None:
    adapter = BedrockConverseAdapter(CTX)
    adapter.feed_bytes(RAW[:AFTER_TOOL_INPUT])
    with pytest.raises(AdapterError):
        adapter.feed_bytes(b"\x00\x00\x00\x05" + b"\x00" * 20)
    refused = adapter.feed_bytes(RAW[AFTER_TOOL_INPUT:])
    assert [(e.status.value, e.reason) for e in refused if isinstance(e, ResponseEnded)] == [
        ("error", "adapter_error: bad_frame")
    ]
    assert adapter.feed(message_stop("tool_use")) == []
    assert adapter.close() == []


def test_body_cut_inside_the_message_stop_frame() -> None:
    events, adapter = run_bytes(RAW[: boundary(25) - 10])
    assert calls(events) == []
    assert response_endings(events)[0][1] == "incomplete"
    assert "the eventstream body ended inside a frame" in adapter.anomalies


def test_body_cut_inside_the_trailing_metadata_frame() -> None:
    """``metadata`` then EOF is the documented end (issue 29): a cut metadata frame is not."""
    events, adapter = run_bytes(RAW[:-10])
    assert calls(events) == []
    assert response_endings(events)[0][1:] == ("incomplete", "stream_cut")
    assert "the eventstream body ended inside a frame" in adapter.anomalies


KEYS = st.sampled_from(
    [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "internalServerException",
        "contentBlockIndex",
        "start",
        "toolUse",
        "toolUseId",
        "name",
        "delta",
        "input",
        "text",
        "stopReason",
    ]
)
FUZZ = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 3)
    | st.text(max_size=5)
    | st.sampled_from(["tool_use", "max_tokens", "{}", '{"a":']),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(KEYS, FUZZ, min_size=1, max_size=2), max_size=8))
def test_fuzzed_events_raise_only_adapter_errors(stream: list[dict[str, Any]]) -> None:
    adapter = BedrockConverseAdapter(CTX)
    for event in stream:
        with contextlib.suppress(AdapterError):
            adapter.feed(event)
    adapter.close()


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_bytes_raise_only_adapter_errors(noise: bytes) -> None:
    adapter = BedrockConverseAdapter(CTX)
    with contextlib.suppress(AdapterError):
        adapter.feed_bytes(RAW[:500] + noise)
    adapter.close()


# --------------------------------------------------------------------------- verdicts, unknown events


def test_a_stopped_block_then_a_voiding_stop_reason_does_not_act() -> None:
    """The block stopped and the model moved on (its call ended), then the message is stopped
    by a guardrail: the verdict travels in response.ended (test_verdicts_e2e: no dispatch)."""
    stream = [message_start(), block_start(0, "transfer", "tu-1"), tool_input(0, '{"a":1}'),
              block_stop(0), block_start(1, "lookup", "tu-2"), tool_input(1, "{}"),
              block_stop(1), message_stop("guardrail_intervened")]  # fmt: skip
    events, _ = run(stream)
    assert ended_call_ids(events) == ["tu-1"]
    assert response_endings(events)[0][1:] == ("failed", "guardrail_intervened")


def test_an_unknown_event_type_is_ignored_and_counted() -> None:
    stream = one_call('{"a":', "1}")
    stream.insert(3, {"brandNewEvent": {"x": "secret"}})
    events, adapter = run(stream)
    assert adapter.unknown_events == 1
    assert calls(events) == [("run", {"a": 1})]


def test_a_delta_of_another_kind_in_a_tool_block_withholds_the_call() -> None:
    stream = one_call('{"a":', "1}")
    stream.insert(3, {"contentBlockDelta": {"contentBlockIndex": 0,
                                            "delta": {"brandNew": {"x": "secret"}}}})  # fmt: skip
    events, _ = run(stream)
    assert ended_call_ids(events) == []
    assert response_endings(events)[0][1:] == ("completed", "tool_use")


# --------------------------------------------------------------------------- issue 29


@pytest.mark.parametrize("kind", ["server_tool_use", "brand_new_tool_kind"])
def test_a_tool_use_start_with_a_type_is_never_a_call(kind: str) -> None:
    """botocore's ``ToolUseBlockStart.type`` (enum ``server_tool_use``): a system tool Bedrock
    runs. Fail closed: a ``type`` the adapter does not know is not a client call either."""
    start = {"contentBlockStart": {"contentBlockIndex": 0, "start": {"toolUse": {
        "toolUseId": "tu-s", "name": "run", "type": kind}}}}  # fmt: skip
    stream = [message_start(), start, tool_input(0, '{"a":1}'), block_stop(0),
              message_stop("end_turn"), METADATA]  # fmt: skip
    events, adapter = run(stream)
    assert [type(e) for e in events] == [ResponseEnded]
    assert response_endings(events)[0][1:] == ("completed", "end_turn")
    assert "provider-side tool block (toolUse with a type) not dispatched" in adapter.anomalies


@pytest.mark.parametrize(
    "tail",
    [block_start(1, "run", "tu-2"), tool_input(0, "x"), block_stop(0), message_stop("tool_use")],
    ids=["start", "delta", "stop", "second-message-stop"],
)
def test_content_after_message_stop_voids_the_message(tail: dict[str, Any]) -> None:
    stream = one_call('{"a":1}')
    stream.insert(-1, tail)
    events, _ = run(stream)
    assert calls(events) == []
    assert response_endings(events)[0][1:] == ("error", "after_stop")
