"""AnthropicMessagesAdapter: every recording, plus hand-written streams for what none shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.adapters.anthropic import AnthropicMessagesAdapter
from processor.adapters.sse import iter_provider_events
from processor.core.errors import AdapterError
from processor.core.events import CallDelta, CallEnded, CallStarted, ResponseEnded
from tests.adapters.harness import (
    CTX,
    DATA,
    assembled_calls,
    assert_replays_identically,
    ended_call_ids,
    load_events,
    response_endings,
    run_adapter,
    sse_body,
)

FIXTURES = DATA / "anthropic"
SECRET = "s3cr3t-argument-value"


def run(events: list[Any]) -> tuple[AnthropicMessagesAdapter, list[Any]]:
    adapter = AnthropicMessagesAdapter(CTX)
    return adapter, run_adapter(adapter, events)


# --------------------------------------------------------------------------- builders


def start(mid: str = "msg_1") -> dict[str, Any]:
    return {"type": "message_start", "message": {"id": mid, "type": "message", "content": []}}


def tool_start(
    index: int, tid: str, name: str, inp: dict[str, Any] | None = None
) -> dict[str, Any]:
    block = {"type": "tool_use", "id": tid, "name": name, "input": inp or {}}
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_start(index: int, kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": {"type": kind, **extra}}


def part(index: int, text: str) -> dict[str, Any]:
    delta = {"type": "input_json_delta", "partial_json": text}
    return {"type": "content_block_delta", "index": index, "delta": delta}


def text(index: int, value: str) -> dict[str, Any]:
    delta = {"type": "text_delta", "text": value}
    return {"type": "content_block_delta", "index": index, "delta": delta}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {}}


MESSAGE_STOP: dict[str, Any] = {"type": "message_stop"}
END: list[dict[str, Any]] = [message_delta("tool_use"), MESSAGE_STOP]


def call(tool: str, call_id: str, item_id: str, arguments: dict[str, Any],
         response_id: str = "msg_1") -> dict[str, Any]:  # fmt: skip
    return {"tool": tool, "call_id": call_id, "response_id": response_id, "item_id": item_id,
            "arguments": arguments}  # fmt: skip


# --------------------------------------------------------------------------- recordings


def test_text_then_tool_use() -> None:
    adapter, out = run(load_events(FIXTURES / "text-then-tool-use.sse"))
    rid = "msg_019Q1hrJbZG26Fb9BQhrkHEr"
    assert assembled_calls(out) == [
        call("get_weather", "toolu_01NRLabsLyVHZPKxbKvkfSMn", "1", {"location": "Paris"}, rid)
    ]
    assert response_endings(out) == [(rid, "completed", "tool_use")]
    # the empty first partial_json is not a delta; the text block is never published
    assert [e.delta for e in out if isinstance(e, CallDelta)] == [
        '{"locati',
        'on": "P',
        "ar",
        'is"}',
    ]
    assert adapter.anomalies == []


def test_truncated_at_max_tokens_without_block_stop_is_inert() -> None:
    _, out = run(load_events(FIXTURES / "tool-use-truncated-max-tokens.sse"))
    rid = "msg_01UdjYBBipA9omjYhicnevgq"
    assert assembled_calls(out) == []
    assert ended_call_ids(out) == []
    assert [e.call_id for e in out if isinstance(e, CallStarted)] == [
        "toolu_01EKqbqmZrGRXy18eN7m9kvY"
    ]
    assert response_endings(out) == [(rid, "incomplete", "max_tokens")]


def test_spliced_message_start_makes_the_first_message_inert() -> None:
    _, out = run(load_events(FIXTURES / "spliced-message-start-SYNTHETIC.jsonl"))
    assert assembled_calls(out) == [
        call("test-tool", "toolu_second", "1", {"value": "Sparkle Day"}, "msg_second")
    ]
    assert ended_call_ids(out) == ["toolu_second"]
    assert response_endings(out) == [
        ("msg_first", "error", "spliced"),
        ("msg_second", "completed", "tool_use"),
    ]


@pytest.mark.parametrize("path", sorted(FIXTURES.iterdir()), ids=lambda p: p.name)
def test_recordings_are_deterministic_and_ids_unique(path: Path) -> None:
    assert_replays_identically(lambda: AnthropicMessagesAdapter(CTX), load_events(path))


# --------------------------------------------------------------------------- hand-written


def test_interleaved_parallel_tool_use_blocks() -> None:
    _, out = run([
        start(),
        block_start(0, "text", text=""),
        text(0, "Let me check both."),
        stop(0),
        tool_start(1, "toolu_a", "get_weather"),
        tool_start(2, "toolu_b", "get_time"),
        part(1, '{"city":'),
        part(2, '{"tz":'),
        text(0, "late text"),
        part(2, '"UTC"}'),
        part(1, '"Paris"}'),
        stop(2),
        stop(1),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ])  # fmt: skip
    assert assembled_calls(out) == [
        call("get_time", "toolu_b", "2", {"tz": "UTC"}),
        call("get_weather", "toolu_a", "1", {"city": "Paris"}),
    ]
    assert [(e.item_id, e.seq) for e in out if isinstance(e, CallDelta)] == [
        ("1", 1), ("2", 1), ("2", 2), ("1", 2),
    ]  # fmt: skip


def test_no_argument_tool_use_gets_braces() -> None:
    _, out = run([start(), tool_start(0, "toolu_a", "now"), part(0, ""), stop(0), *END])
    assert [e.delta for e in out if isinstance(e, CallDelta)] == ["{}"]
    assert assembled_calls(out) == [call("now", "toolu_a", "0", {})]


def test_input_given_in_block_start_without_deltas() -> None:
    _, out = run([start(), tool_start(0, "toolu_a", "lookup", {"q": 1}), stop(0), *END])
    assert assembled_calls(out) == [call("lookup", "toolu_a", "0", {"q": 1})]


def test_server_tool_use_is_not_a_client_call() -> None:
    adapter, out = run([
        start(),
        block_start(0, "server_tool_use", id="srvtoolu_1", name="web_search", input={}),
        part(0, '{"query": "x"}'),
        stop(0),
        block_start(1, "web_search_tool_result", tool_use_id="srvtoolu_1", content=[]),
        stop(1),
        message_delta("end_turn"),
        MESSAGE_STOP,
    ])  # fmt: skip
    assert [e.type for e in out] == ["response.ended"]
    assert adapter.anomalies == []


def test_thinking_and_ping_are_ignored() -> None:
    thinking = {"type": "content_block_delta", "index": 0,
                "delta": {"type": "thinking_delta", "thinking": SECRET}}  # fmt: skip
    _, out = run([start(), {"type": "ping"}, block_start(0, "thinking", thinking=""), thinking,
                  stop(0), MESSAGE_STOP])  # fmt: skip
    assert [e.type for e in out] == ["response.ended"]


def test_error_mid_call_makes_it_inert() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    _, out = run([start(), tool_start(0, "toolu_a", "lookup"), part(0, '{"q":'), error,
                  part(0, "1}"), stop(0), MESSAGE_STOP])  # fmt: skip
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("msg_1", "error", "overloaded_error")]


def test_error_event_through_sse_framing() -> None:
    body = sse_body(start(), tool_start(0, "toolu_a", "lookup"), part(0, '{"q":'),
                    {"type": "error", "error": {"type": "api_error"}}, event_names=True)  # fmt: skip
    _, out = run(list(iter_provider_events(body)))
    assert response_endings(out) == [("msg_1", "error", "api_error")]


def test_truncated_mid_string_without_message_stop() -> None:
    _, out = run([start(), tool_start(0, "toolu_a", "write"), part(0, '{"text": "hel')])
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("msg_1", "incomplete", "stream_cut")]


def test_block_stopped_before_a_cut_stays_ended() -> None:
    _, out = run([start(), tool_start(0, "toolu_a", "lookup"), part(0, "{}"), stop(0),
                  tool_start(1, "toolu_b", "lookup"), part(1, '{"q"')])  # fmt: skip
    assert ended_call_ids(out) == ["toolu_a"]
    assert response_endings(out) == [("msg_1", "incomplete", "stream_cut")]


def test_refusal_ends_the_message_failed() -> None:
    _, out = run([start(), tool_start(0, "toolu_a", "lookup"), part(0, '{"q"'),
                  message_delta("refusal"), MESSAGE_STOP])  # fmt: skip
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("msg_1", "failed", "refusal")]


def test_repeated_block_start_and_stop_are_ignored() -> None:
    _, out = run([start(), tool_start(0, "toolu_a", "lookup"), tool_start(0, "toolu_a", "lookup"),
                        part(0, "{}"), stop(0), stop(0), MESSAGE_STOP])  # fmt: skip
    assert sum(isinstance(e, CallStarted) for e in out) == 1
    assert ended_call_ids(out) == ["toolu_a"]


def test_conflicting_block_start_withholds_the_call() -> None:
    adapter, out = run([start(), tool_start(0, "toolu_a", "read_file"),
                        tool_start(0, "toolu_b", "delete_file"), part(0, "{}"), stop(0),
                        message_delta("tool_use"), MESSAGE_STOP])  # fmt: skip
    assert ended_call_ids(out) == []
    assert [e.tool for e in out if isinstance(e, CallStarted)] == ["read_file"]
    assert response_endings(out) == [("msg_1", "completed", "tool_use")]
    assert "conflicting content_block_start: call withheld" in adapter.anomalies


def test_unexpected_delta_type_in_a_tool_block_withholds_the_call() -> None:
    odd = {"type": "content_block_delta", "index": 0, "delta": {"type": "new_delta", "x": SECRET}}
    _, out = run([start(), tool_start(0, "toolu_a", "lookup"), part(0, "{"), odd, part(0, "}"),
                  stop(0), MESSAGE_STOP])  # fmt: skip
    assert ended_call_ids(out) == []


def test_repeated_message_start_is_ignored() -> None:
    adapter, out = run([start(), tool_start(0, "toolu_a", "lookup"), start(), part(0, "{}"),
                        stop(0), *END])  # fmt: skip
    assert assembled_calls(out) == [call("lookup", "toolu_a", "0", {})]
    assert adapter.anomalies == ["repeated message_start ignored"]


def test_two_messages_in_sequence() -> None:
    _, out = run([start("msg_1"), tool_start(0, "toolu_a", "lookup"), stop(0), *END,
                  start("msg_2"), tool_start(0, "toolu_a", "lookup"), part(0, '{"q":2}'), stop(0),
                  *END])  # fmt: skip
    assert assembled_calls(out) == [
        call("lookup", "toolu_a", "0", {}, "msg_1"),
        call("lookup", "toolu_a", "0", {"q": 2}, "msg_2"),
    ]


def test_duplicated_delta_is_not_detectable_and_the_call_fails_to_parse() -> None:
    """Anthropic gives no positions: a duplicated delta event is a new position."""
    _, out = run([start(), tool_start(0, "toolu_a", "lookup"), part(0, '{"q":1}'),
                  part(0, '{"q":1}'), stop(0), MESSAGE_STOP])  # fmt: skip
    assert [e.seq for e in out if isinstance(e, CallDelta)] == [1, 2]
    assert assembled_calls(out) == []


def test_replay_into_a_fresh_adapter_gives_the_same_ids() -> None:
    events = load_events(FIXTURES / "text-then-tool-use.sse")
    _, first = run(events)
    _, again = run(events[:9])
    assert [e.event_id for e in again[:-1]] == [e.event_id for e in first[: len(again) - 1]]


def test_ended_seq_follows_the_last_delta() -> None:
    _, out = run(load_events(FIXTURES / "text-then-tool-use.sse"))
    ended = [e for e in out if isinstance(e, CallEnded)]
    assert [e.seq for e in ended] == [5]


# --------------------------------------------------------------------------- bad chunks

BAD_CHUNKS: list[tuple[str, Any]] = [
    ("not json", '{"type": "content_block_delta", ' + SECRET),
    ("not an object", orjson.dumps(SECRET).decode()),
    ("no type", {"index": 0, "delta": {"partial_json": SECRET}}),
    ("index missing", {"type": "content_block_delta", "delta": part(0, SECRET)["delta"]}),
    ("index a string", {**part(0, SECRET), "index": SECRET}),
    ("partial_json not a string", {**part(0, ""), "delta": {"type": "input_json_delta", "partial_json": [SECRET]}}),
    ("delta not an object", {"type": "content_block_delta", "index": 0, "delta": SECRET}),
    ("tool_use without id", {"type": "content_block_start", "index": 1,
                             "content_block": {"type": "tool_use", "name": "x"}}),
    ("message without id", {"type": "message_start", "message": {"content": SECRET}}),
    ("stop_reason not a string", {"type": "message_delta", "delta": {"stop_reason": [SECRET]}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "bad"), BAD_CHUNKS, ids=[n for n, _ in BAD_CHUNKS])
def test_bad_chunk_raises_adapter_error_and_ends_inert(name: str, bad: Any) -> None:
    adapter = AnthropicMessagesAdapter(CTX)
    out = []
    for event in (start(), tool_start(0, "toolu_a", "lookup"), part(0, '{"q":1}')):
        out += adapter.feed(event)
    with pytest.raises(AdapterError) as info:
        adapter.feed(bad)
    assert SECRET not in str(info.value)
    with pytest.raises(AdapterError):
        adapter.feed(stop(0))
    out += adapter.close()
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("msg_1", "error", "bad_chunk")]


def test_block_before_message_start_is_an_adapter_error() -> None:
    adapter = AnthropicMessagesAdapter(CTX)
    with pytest.raises(AdapterError):
        adapter.feed(tool_start(0, "toolu_a", "lookup"))
    assert adapter.close() == []


# --------------------------------------------------------------------------- response verdicts


@pytest.mark.parametrize(
    ("stop_reason", "status"),
    [("refusal", "failed"), ("max_tokens", "incomplete"), ("pause_turn", "incomplete")],
)
def test_a_stopped_tool_use_then_a_voiding_stop_reason_voids_the_message(
    stop_reason: str, status: str
) -> None:
    """The call's own terminal arrived (call.ended), then the message is refused or cut: the
    verdict travels in response.ended (test_verdicts_e2e: nothing dispatches)."""
    _, out = run([start(), tool_start(0, "toolu_a", "transfer"), part(0, '{"amount": 10}'),
                  stop(0), message_delta(stop_reason), MESSAGE_STOP])  # fmt: skip
    assert ended_call_ids(out) == ["toolu_a"]
    assert response_endings(out) == [("msg_1", status, stop_reason)]
    assert isinstance(out[-1], ResponseEnded)  # ended at message_delta; message_stop adds nothing


@pytest.mark.parametrize("stop_reason", ["end_turn", "tool_use", "stop_sequence"])
def test_a_normal_stop_reason_completes_only_at_message_stop(stop_reason: str) -> None:
    adapter = AnthropicMessagesAdapter(CTX)
    out = []
    for event in (start(), tool_start(0, "toolu_a", "lookup"), part(0, "{}"), stop(0),
                  message_delta(stop_reason)):  # fmt: skip
        out += adapter.feed(event)
    assert response_endings(out) == []
    out += adapter.feed(MESSAGE_STOP)
    assert response_endings(out) == [("msg_1", "completed", stop_reason)]
    assert assembled_calls(out) == [call("lookup", "toolu_a", "0", {})]


def test_an_unknown_stop_reason_is_voiding() -> None:
    _, out = run([start(), tool_start(0, "toolu_a", "lookup"), part(0, "{}"), stop(0),
                  message_delta("brand_new_reason"), MESSAGE_STOP])  # fmt: skip
    assert response_endings(out) == [("msg_1", "failed", "brand_new_reason")]


def test_message_stop_without_a_stop_reason_is_voiding() -> None:
    _, out = run([start(), tool_start(0, "toolu_a", "lookup"), part(0, "{}"), stop(0),
                  MESSAGE_STOP])  # fmt: skip
    assert response_endings(out) == [("msg_1", "failed", "unknown")]


def test_a_tool_use_stopped_before_the_stream_is_cut_does_not_act() -> None:
    _, out = run([start(), tool_start(0, "toolu_a", "lookup"), part(0, "{}"), stop(0)])
    assert ended_call_ids(out) == ["toolu_a"]
    assert response_endings(out) == [("msg_1", "incomplete", "stream_cut")]


def test_an_unknown_event_type_is_ignored_and_counted_and_the_call_acts() -> None:
    adapter, out = run([start(), tool_start(0, "toolu_a", "lookup"), part(0, '{"q":'),
                        {"type": "brand_new_event", "value": SECRET}, part(0, "1}"), stop(0),
                        message_delta("tool_use"), MESSAGE_STOP])  # fmt: skip
    assert adapter.unknown_events == 1
    assert not any(SECRET in a for a in adapter.anomalies)
    assert response_endings(out) == [("msg_1", "completed", "tool_use")]
    assert assembled_calls(out) == [call("lookup", "toolu_a", "0", {"q": 1})]
