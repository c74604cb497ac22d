"""OpenAIChatAdapter: every Chat Completions recording (OpenAI, compatible servers, Groq), plus
hand-written streams for what none shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.adapters.openai_chat import OpenAIChatAdapter
from processor.core.errors import AdapterError
from processor.core.events import CallDelta, CallEnded, CallStarted
from tests.adapters.harness import (
    CTX,
    DATA,
    assembled_calls,
    assert_replays_identically,
    dumped,
    ended_call_ids,
    load_events,
    response_endings,
    run_adapter,
)

SECRET = "s3cr3t-argument-value"
RECORDINGS = sorted(
    p for d in ("openai-chat", "openai-compat-chat", "groq") for p in (DATA / d).iterdir()
)


def run(events: list[Any]) -> tuple[OpenAIChatAdapter, list[Any]]:
    adapter = OpenAIChatAdapter(CTX)
    return adapter, run_adapter(adapter, events)


# --------------------------------------------------------------------------- builders


def chunk(*tool_calls: dict[str, Any], finish: str | None = None, choice: int = 0,
          cid: str = "chatcmpl-1", content: str | None = None) -> dict[str, Any]:  # fmt: skip
    delta: dict[str, Any] = {}
    if tool_calls:
        delta["tool_calls"] = list(tool_calls)
    if content is not None:
        delta["content"] = content
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "choices": [{"index": choice, "delta": delta, "finish_reason": finish}],
    }


def tc(index: int | None = 0, *, id: str | None = None, name: str | None = None,
       args: str | None = None) -> dict[str, Any]:  # fmt: skip
    entry: dict[str, Any] = {"type": "function", "function": {}}
    if index is not None:
        entry["index"] = index
    if id is not None:
        entry["id"] = id
    if name is not None:
        entry["function"]["name"] = name
    if args is not None:
        entry["function"]["arguments"] = args
    return entry


def call(tool: str, call_id: str, item_id: str, arguments: dict[str, Any],
         response_id: str = "chatcmpl-1") -> dict[str, Any]:  # fmt: skip
    return {"tool": tool, "call_id": call_id, "response_id": response_id, "item_id": item_id,
            "arguments": arguments}  # fmt: skip


# --------------------------------------------------------------------------- recordings


def recording(name: str) -> list[dict[str, Any]]:
    return load_events(next(p for p in RECORDINGS if p.name == name))


def test_openai_single_tool() -> None:
    _, out = run(recording("single-tool-gpt4o.sse"))
    rid = "chatcmpl-ABfw8AOXnoa2kzy11vVTSjuQhHCQr"
    assert assembled_calls(out) == [
        call("GetWeatherArgs", "call_c91SqDXlYFuETYv8mUHzz6pp", "0:0",
             {"city": "Edinburgh", "country": "UK", "units": "c"}, rid)
    ]  # fmt: skip
    assert response_endings(out) == [(rid, "completed", "tool_calls")]
    assert [e.seq for e in out if isinstance(e, CallDelta)] == list(range(1, 15))


def test_openai_parallel_two_tools() -> None:
    _, out = run(recording("parallel-two-tools-gpt4o.sse"))
    rid = "chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63"
    assert assembled_calls(out) == [
        call("GetWeatherArgs", "call_JMW1whyEaYG438VE1OIflxA2", "0:0",
             {"city": "Edinburgh", "country": "GB", "units": "c"}, rid),
        call("get_stock_price", "call_DNYTawLBoN8fj3KN6qU9N1Ou", "0:1",
             {"ticker": "AAPL", "exchange": "NASDAQ"}, rid),
    ]  # fmt: skip
    assert response_endings(out) == [(rid, "completed", "tool_calls")]


def test_gateway_index_starting_at_one() -> None:
    adapter, out = run(recording("anthropic-gateway-index-starts-at-1.sse"))
    assert assembled_calls(out) == [
        call("read_file", "toolu_sanitized", "0:1", {"path": "a.txt"}, "msg_sanitized")
    ]
    assert response_endings(out) == [("msg_sanitized", "completed", "tool_calls")]
    assert all(not isinstance(e, CallDelta) or "Reading" not in e.delta for e in out)
    assert adapter.anomalies == []


def test_glm_empty_name_on_continuation_is_not_a_rename() -> None:
    adapter, out = run(recording("glm-empty-name-continuation.jsonl"))
    rid = "735e434874a24f68a2390b3cab149242"
    assert assembled_calls(out) == [
        call("webSearchTool", "chatcmpl-tool-9f149c74c42f265b", "0:0",
             {"query": "current Berlin weather"}, rid)
    ]  # fmt: skip
    assert response_endings(out) == [(rid, "completed", "tool_calls")]
    assert adapter.anomalies == []


def test_mistral_without_index_whole_args_and_finish_in_one_chunk() -> None:
    _, out = run(recording("mistral-no-index-whole-args.jsonl"))
    rid = "b3999b8c93e04e11bcbff7bcab829667"
    assert assembled_calls(out) == [
        call("weather", "gSIMJiOkT", "0:_", {"location": "San Francisco"}, rid)
    ]
    assert response_endings(out) == [(rid, "completed", "tool_calls")]


def test_groq_retry_whole_args_in_one_chunk() -> None:
    _, out = run(recording("retry-whole-args-one-chunk.sse"))
    rid = "chatcmpl-e35442a8-12c0-4fb4-8be4-0e51727ce7b7"
    assert assembled_calls(out) == [
        call("get_something_by_name", "fc_bfb39741-3748-4def-9886-a93fc9c64a90", "0:0",
             {"name": "example"}, rid)
    ]  # fmt: skip
    assert response_endings(out) == [(rid, "completed", "tool_calls")]


def test_groq_midstream_error_with_http_200_is_inert() -> None:
    events = recording("tool-use-failed-midstream-error.sse")
    assert events[-1]["type"] == "error"
    _, out = run(events)
    rid = "chatcmpl-4f39f3af-3267-4ac1-a0cf-6aa7451877dc"
    assert assembled_calls(out) == []
    assert ended_call_ids(out) == []
    assert response_endings(out) == [(rid, "error", "tool_use_failed")]
    assert len(out) == 1


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recordings_are_deterministic_and_ids_unique(path: Path) -> None:
    assert_replays_identically(lambda: OpenAIChatAdapter(CTX), load_events(path))


# --------------------------------------------------------------------------- hand-written


def test_interleaved_parallel_calls() -> None:
    _, out = run([
        chunk(tc(0, id="call_a", name="get_weather", args="")),
        chunk(tc(1, id="call_b", name="get_time", args='{"tz":')),
        chunk(tc(0, args='{"city":')),
        chunk(tc(1, args='"UTC"}'), tc(0, args='"Paris"}')),
        chunk(finish="tool_calls"),
    ])  # fmt: skip
    assert assembled_calls(out) == [
        call("get_weather", "call_a", "0:0", {"city": "Paris"}),
        call("get_time", "call_b", "0:1", {"tz": "UTC"}),
    ]
    assert response_endings(out) == [("chatcmpl-1", "completed", "tool_calls")]


def test_reused_index_with_a_new_id_starts_a_new_call() -> None:
    _, out = run([
        chunk(tc(0, id="call_a", name="first", args='{"n":1}')),
        chunk(tc(0, id="call_b", name="second", args='{"n":')),
        chunk(tc(0, args="2}")),
        chunk(finish="tool_calls"),
    ])  # fmt: skip
    assert assembled_calls(out) == [
        call("first", "call_a", "0:0", {"n": 1}),
        call("second", "call_b", "0:0#1", {"n": 2}),
    ]


def test_reused_index_previous_call_is_not_ended_before_finish() -> None:
    _, out = run([
        chunk(tc(0, id="call_a", name="first", args='{"n":1}')),
        chunk(tc(0, id="call_b", name="second", args='{"n":2}')),
    ])  # fmt: skip
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("chatcmpl-1", "incomplete", "stream_cut")]


def test_id_resent_on_every_chunk_is_one_call() -> None:
    adapter, out = run([
        chunk(tc(0, id="call_a", name="lookup", args='{"q":')),
        chunk(tc(0, id="call_a", name="lookup", args='"x"}')),
        chunk(finish="tool_calls"),
    ])  # fmt: skip
    assert assembled_calls(out) == [call("lookup", "call_a", "0:0", {"q": "x"})]
    assert adapter.anomalies == []


def test_id_missing_on_first_chunk_uses_the_first_id_seen_later() -> None:
    _, out = run([
        chunk(tc(0, name="lookup", args='{"q":')),
        chunk(tc(0, id="call_late", args='"x"}')),
        chunk(finish="tool_calls"),
    ])  # fmt: skip
    started = [e for e in out if isinstance(e, CallStarted)]
    assert len(started) == 1 and started[0].call_id == "call_late"
    assert out.index(started[0]) == 0
    assert assembled_calls(out) == [call("lookup", "call_late", "0:0", {"q": "x"})]


def test_id_never_given_is_synthesised_deterministically() -> None:
    events = [chunk(tc(0, name="lookup", args='{"q":1}')), chunk(finish="tool_calls")]
    _, out = run(events)
    assert assembled_calls(out) == [call("lookup", "synthetic:0:0", "0:0", {"q": 1})]
    assert dumped(run(events)[1]) == dumped(out)


def test_conflicting_name_withholds_the_call() -> None:
    adapter, out = run([
        chunk(tc(0, id="call_a", name="read_file", args="{}")),
        chunk(tc(0, name="delete_file")),
        chunk(finish="tool_calls"),
    ])  # fmt: skip
    assert ended_call_ids(out) == []
    assert [e.tool for e in out if isinstance(e, CallStarted)] == ["read_file"]
    assert response_endings(out) == [("chatcmpl-1", "completed", "tool_calls")]
    assert "conflicting tool name: call withheld" in adapter.anomalies


def test_a_call_that_never_got_a_name_voids_its_response() -> None:
    # a nameless call cannot start, so it cannot reach the ledger: it must not vanish while its
    # siblings act as if the model had asked for them alone
    adapter, out = run([
        chunk(tc(0, id="call_a", name="lookup", args='{"q":1}')),
        chunk(tc(1, id="call_b", args='{"path":"/etc"}')),
        chunk(finish="tool_calls"),
    ])  # fmt: skip
    assert ended_call_ids(out) == []
    assert [e.tool for e in out if isinstance(e, CallStarted)] == ["lookup"]
    assert response_endings(out) == [("chatcmpl-1", "error", "unnamed_call")]
    assert "call without a name: its response is void" in adapter.anomalies


def test_no_argument_call_gets_braces() -> None:
    _, out = run([chunk(tc(0, id="call_a", name="ping", args="")), chunk(finish="tool_calls")])
    assert [e.delta for e in out if isinstance(e, CallDelta)] == ["{}"]
    assert assembled_calls(out) == [call("ping", "call_a", "0:0", {})]


def test_forced_tool_finishes_with_stop() -> None:
    _, out = run([chunk(tc(0, id="call_a", name="lookup", args='{"q":1}')), chunk(finish="stop")])
    assert assembled_calls(out) == [call("lookup", "call_a", "0:0", {"q": 1})]


@pytest.mark.parametrize(
    ("finish", "status"),
    [("length", "incomplete"), ("content_filter", "failed"), ("weird_new_reason", "failed")],
)
def test_non_tool_finish_reasons_make_open_calls_inert(finish: str, status: str) -> None:
    _, out = run([chunk(tc(0, id="call_a", name="lookup", args='{"q":"abc')), chunk(finish=finish)])
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("chatcmpl-1", status, finish)]


def test_truncated_mid_string_without_finish_reason() -> None:
    _, out = run([chunk(tc(0, id="call_a", name="write", args='{"text":"hel'))])
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("chatcmpl-1", "incomplete", "stream_cut")]


def test_openai_style_error_payload_mid_call() -> None:
    error = {"error": {"message": "overloaded", "type": "server_error", "code": None}}
    _, out = run([chunk(tc(0, id="call_a", name="lookup", args='{"q":')), error])
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("chatcmpl-1", "error", "server_error")]


def test_error_before_any_chunk_is_only_an_anomaly() -> None:
    adapter, out = run([{"error": {"code": "rate_limited"}}])
    assert out == []
    assert adapter.anomalies == ["error payload outside an open response"]


def test_several_choices_keep_their_calls_apart() -> None:
    _, out = run([
        chunk(tc(0, id="call_x", name="lookup", args='{"c":0}'), choice=0),
        chunk(tc(0, id="call_x", name="lookup", args='{"c":1}'), choice=1),
        chunk(finish="tool_calls", choice=0),
        chunk(finish="length", choice=1),
    ])  # fmt: skip
    # two alternatives: choice 0 acts (it completed), choice 1 is recorded, never acts
    assert assembled_calls(out) == [call("lookup", "call_x", "0:0", {"c": 0})]
    assert ended_call_ids(out) == ["call_x"]
    assert response_endings(out) == [  # choice 0's completed waits for the end of the stream
        ("chatcmpl-1~alt1", "not_chosen", "alternative"),
        ("chatcmpl-1", "completed", "tool_calls"),
    ]
    assert out[-1].type == "response.ended"


def test_each_choice_is_its_own_response_and_ends_at_its_finish_reason() -> None:
    _, out = run([
        chunk(tc(0, id="call_x", name="lookup", args="{}"), choice=0),
        chunk(tc(0, id="call_y", name="lookup", args="{}"), choice=1),
        chunk(finish="tool_calls", choice=0),
    ])  # fmt: skip
    assert ended_call_ids(out) == ["call_x"]
    assert response_endings(out) == [
        ("chatcmpl-1", "completed", "tool_calls"),
        ("chatcmpl-1~alt1", "not_chosen", "alternative"),
    ]


def test_chunk_id_change_mid_stream_stays_one_response() -> None:
    adapter, out = run([
        chunk(tc(0, id="call_a", name="lookup", args='{"q":'), cid="chatcmpl-1"),
        chunk(tc(0, args="1}"), cid="chatcmpl-2"),
        chunk(finish="tool_calls", cid="chatcmpl-2"),
    ])  # fmt: skip
    assert assembled_calls(out) == [call("lookup", "call_a", "0:0", {"q": 1})]
    assert "chunk id changed within a response" in adapter.anomalies


def test_new_chunk_id_after_the_response_ended_starts_a_new_response() -> None:
    _, out = run([
        chunk(tc(0, id="call_a", name="lookup", args="{}"), cid="r1"),
        chunk(finish="tool_calls", cid="r1"),
        {"id": "r1", "choices": [], "usage": {"total_tokens": 3}},
        chunk(tc(0, id="call_a", name="lookup", args='{"q":2}'), cid="r2"),
        chunk(finish="tool_calls", cid="r2"),
    ])  # fmt: skip
    assert assembled_calls(out) == [
        call("lookup", "call_a", "0:0", {}, "r1"),
        call("lookup", "call_a", "0:0", {"q": 2}, "r2"),
    ]


def test_text_content_is_never_published() -> None:
    _, out = run([
        chunk(content=SECRET),
        chunk(tc(0, id="call_a", name="lookup", args="{}"), content=SECRET),
        chunk(finish="tool_calls"),
    ])  # fmt: skip
    assert all(SECRET not in orjson.dumps(e.model_dump()).decode() for e in out)


def test_duplicated_chunk_is_not_detectable_and_the_call_fails_to_parse() -> None:
    """Chat Completions gives no positions: a duplicated delta chunk is a new position."""
    first = chunk(tc(0, id="call_a", name="lookup", args='{"q":1}'))
    _, out = run([first, first, chunk(finish="tool_calls")])
    assert [e.seq for e in out if isinstance(e, CallDelta)] == [1, 2]
    assert sum(isinstance(e, CallStarted) for e in out) == 1
    assert assembled_calls(out) == []


def test_replay_into_a_fresh_adapter_gives_the_same_ids() -> None:
    events = recording("parallel-two-tools-gpt4o.sse")
    _, first = run(events)
    _, again = run(events[:10])
    assert [e.event_id for e in again[:-1]] == [e.event_id for e in first[: len(again) - 1]]


def test_chunk_without_choices_is_ignored() -> None:
    _, out = run([{"id": "x", "object": "chat.completion.chunk", "usage": {}}])
    assert out == []


def test_non_function_tool_call_is_ignored() -> None:
    custom = {"index": 0, "type": "custom", "custom": {"name": "x", "input": SECRET}}
    adapter, out = run([chunk(custom)])
    assert [e.type for e in out] == ["response.ended"]
    assert "non-function tool call ignored" in adapter.anomalies


# --------------------------------------------------------------------------- issue 29


def legacy(function_call: dict[str, Any] | None = None, *, finish: str | None = None,
           choice: int = 0, cid: str = "chatcmpl-1") -> dict[str, Any]:  # fmt: skip
    """A chunk of the deprecated ``delta.function_call`` (openai-python
    ``ChoiceDeltaFunctionCall``: ``name`` and ``arguments``, both optional)."""
    delta: dict[str, Any] = {} if function_call is None else {"function_call": function_call}
    return {"id": cid, "object": "chat.completion.chunk",
            "choices": [{"index": choice, "delta": delta, "finish_reason": finish}]}  # fmt: skip


def test_legacy_function_call_is_assembled_as_one_call_per_choice() -> None:
    """Issue 29 item 3: ``delta.function_call`` with ``finish_reason: "function_call"`` was
    dropped without a trace; it is one call, with a synthetic id (the protocol has none)."""
    adapter, out = run([
        {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant",
         "content": None, "function_call": {"name": "get_weather", "arguments": ""}}}]},
        legacy({"arguments": '{"city":'}),
        legacy({"arguments": ' "Paris"}'}),
        legacy(finish="function_call"),
    ])  # fmt: skip
    assert assembled_calls(out) == [
        call("get_weather", "synthetic:0:function_call", "0:function_call", {"city": "Paris"})
    ]
    assert response_endings(out) == [("chatcmpl-1", "completed", "function_call")]
    assert adapter.anomalies == []


def test_legacy_function_call_of_two_choices_only_the_chosen_acts() -> None:
    _, out = run([
        legacy({"name": "lookup", "arguments": '{"c":0}'}, choice=0),
        legacy({"name": "lookup", "arguments": '{"c":1}'}, choice=1),
        legacy(finish="function_call", choice=0),
        legacy(finish="function_call", choice=1),
    ])  # fmt: skip
    assert assembled_calls(out) == [
        call("lookup", "synthetic:0:function_call", "0:function_call", {"c": 0})
    ]
    assert sorted(e.call_id for e in out if isinstance(e, CallStarted)) == [
        "synthetic:0:function_call", "synthetic:1:function_call"]  # fmt: skip


def test_legacy_function_call_cut_by_length_is_inert() -> None:
    _, out = run([legacy({"name": "lookup", "arguments": '{"q":'}), legacy(finish="length")])
    assert assembled_calls(out) == []
    assert response_endings(out) == [("chatcmpl-1", "incomplete", "length")]


def azure_annotation(results: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """Azure OpenAI's asynchronous filter: an annotation chunk after the content it judged
    (``id`` empty, no ``delta``, ``content_filter_results`` and ``content_filter_offsets``)."""
    return {"id": "", "object": "", "created": 0, "model": "", "system_fingerprint": None,
            "choices": [{"index": 0, "finish_reason": finish, "content_filter_results": results,
                         "content_filter_offsets": {"check_offset": 44, "start_offset": 44,
                                                    "end_offset": 198}}]}  # fmt: skip


SAFE = {c: {"filtered": False, "severity": "safe"}
        for c in ("hate", "self_harm", "sexual", "violence")}  # fmt: skip


@pytest.mark.parametrize(
    "tail",
    [
        azure_annotation({**SAFE, "violence": {"filtered": True, "severity": "high"}}),
        azure_annotation(
            {"protected_material_text": {"detected": True, "filtered": True}},
            finish="content_filter",
        ),
        azure_annotation({}, finish="content_filter"),
    ],
    ids=["filtered-true", "finish-content-filter", "finish-only"],
)
def test_azure_async_filter_after_tool_calls_voids_the_response(tail: dict[str, Any]) -> None:
    """Issue 29 item 1: the asynchronous filter's verdict arrives after ``finish_reason:
    "tool_calls"`` and before ``[DONE]``; the call must not dispatch."""
    adapter = OpenAIChatAdapter(CTX)
    out = adapter.feed(chunk(tc(0, id="call_a", name="transfer", args='{"amount": 10}')))
    out += adapter.feed(chunk(finish="tool_calls"))
    assert not any(e.type == "response.ended" for e in out)  # held for the stream's end
    out += adapter.feed(azure_annotation(SAFE))  # a clean annotation voids nothing
    out += adapter.feed(tail)
    out += adapter.close()
    assert ended_call_ids(out) == ["call_a"]
    assert assembled_calls(out) == []
    assert response_endings(out) == [("chatcmpl-1", "failed", "content_filter")]


def test_a_clean_azure_annotation_and_usage_after_the_stop_keep_the_call() -> None:
    _, out = run([
        chunk(tc(0, id="call_a", name="lookup", args="{}")),
        chunk(finish="tool_calls"),
        azure_annotation(SAFE),
        {"id": "chatcmpl-1", "choices": [], "usage": {"total_tokens": 3}},
    ])  # fmt: skip
    assert assembled_calls(out) == [call("lookup", "call_a", "0:0", {})]
    assert response_endings(out) == [("chatcmpl-1", "completed", "tool_calls")]


@pytest.mark.parametrize(
    ("tail", "ending"),
    [
        (chunk(tc(1, id="call_b", name="lookup", args="{}")), ("error", "after_stop")),
        (legacy({"name": "lookup", "arguments": "{}"}), ("error", "after_stop")),
        (chunk(content="more text"), ("error", "after_stop")),
        (chunk(finish="length"), ("incomplete", "length")),
        (chunk(finish="stop"), ("error", "after_stop")),
        ({"error": {"code": "server_error", "message": "x"}}, ("error", "server_error")),
    ],
    ids=["tool-call", "function-call", "text", "length", "another-normal", "error"],
)
def test_anything_voiding_after_the_stop_and_before_done_voids_it(
    tail: dict[str, Any], ending: tuple[str, str]
) -> None:
    _, out = run([chunk(tc(0, id="call_a", name="lookup", args="{}")),
                  chunk(finish="tool_calls"), tail])  # fmt: skip
    assert assembled_calls(out) == []
    assert response_endings(out) == [("chatcmpl-1", *ending)]


def test_a_repeated_finish_reason_is_harmless() -> None:
    adapter, out = run([chunk(tc(0, id="call_a", name="lookup", args="{}")),
                        chunk(finish="tool_calls"), chunk(finish="tool_calls")])  # fmt: skip
    assert assembled_calls(out) == [call("lookup", "call_a", "0:0", {})]
    assert "repeated finish_reason ignored" in adapter.anomalies


def test_a_filtered_choice_before_its_finish_is_voided_at_once() -> None:
    tagged = chunk(tc(0, id="call_a", name="lookup", args="{}"))
    tagged["choices"][0]["content_filter_results"] = {"hate": {"filtered": True}}
    _, out = run([tagged, chunk(finish="tool_calls")])
    assert assembled_calls(out) == []
    assert response_endings(out) == [("chatcmpl-1", "failed", "content_filter")]


# --------------------------------------------------------------------------- bad chunks

BAD_CHUNKS: list[tuple[str, Any]] = [
    ("not json", "data: {" + SECRET),
    ("not an object", orjson.dumps([SECRET]).decode()),
    ("unknown type with choices", {"type": "brand_new", "choices": [], "value": SECRET}),
    ("choices not a list", {"id": "chatcmpl-1", "choices": {"0": SECRET}}),
    ("choice not an object", {"id": "chatcmpl-1", "choices": [SECRET]}),
    ("tool_calls not a list", {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": SECRET}}]}),
    ("tool call not an object", chunk(SECRET)),  # type: ignore[arg-type]
    ("index a string", chunk({"index": SECRET, "function": {"arguments": "x"}})),
    ("arguments a number", chunk({"index": 0, "function": {"arguments": 12}})),
    ("name too long", chunk(tc(1, id="c", name="n" * 500))),
    ("finish_reason not a string", {"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": [SECRET]}]}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "bad"), BAD_CHUNKS, ids=[n for n, _ in BAD_CHUNKS])
def test_bad_chunk_raises_adapter_error_and_ends_inert(name: str, bad: Any) -> None:
    adapter = OpenAIChatAdapter(CTX)
    out = adapter.feed(chunk(tc(0, id="call_a", name="lookup", args='{"q":1}')))
    with pytest.raises(AdapterError) as info:
        adapter.feed(bad)
    assert SECRET not in str(info.value)
    with pytest.raises(AdapterError):
        adapter.feed(chunk(finish="tool_calls"))
    out += adapter.close()
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("chatcmpl-1", "error", "bad_chunk")]


def test_never_ends_a_call_of_a_closed_adapter() -> None:
    adapter = OpenAIChatAdapter(CTX)
    adapter.feed(chunk(tc(0, id="call_a", name="lookup", args="{}")))
    assert [e.type for e in adapter.close()] == ["response.ended"]
    with pytest.raises(AdapterError):
        adapter.feed(chunk(finish="tool_calls"))
    assert adapter.close() == []


def test_every_ended_call_carries_its_position() -> None:
    _, out = run(recording("parallel-two-tools-gpt4o.sse"))
    for ended in (e for e in out if isinstance(e, CallEnded)):
        n = sum(isinstance(e, CallDelta) and e.call_id == ended.call_id for e in out)
        assert ended.seq == n + 1


# --------------------------------------------------------------------------- verdicts, alternatives


def test_two_alternatives_of_one_request_only_the_first_acts() -> None:
    """n=2: both choices call transfer; only choice 0 may act, choice 1 reaches the core under
    its own response id, with no terminal, and ends not_chosen (test_verdicts_e2e: one
    dispatch)."""
    _, out = run([
        chunk(tc(0, id="call_a", name="transfer", args='{"to":"alice"}'), choice=0),
        chunk(tc(0, id="call_b", name="transfer", args='{"to":"bob"}'), choice=1),
        chunk(finish="tool_calls", choice=0),
        chunk(finish="tool_calls", choice=1),
    ])  # fmt: skip
    started = [(e.response_id, e.call_id) for e in out if isinstance(e, CallStarted)]
    assert started == [("chatcmpl-1", "call_a"), ("chatcmpl-1~alt1", "call_b")]
    assert ended_call_ids(out) == ["call_a"]
    assert response_endings(out) == [
        ("chatcmpl-1", "completed", "tool_calls"),
        ("chatcmpl-1~alt1", "not_chosen", "alternative"),
    ]


@pytest.mark.parametrize(("alternative", "acting"), [(1, "call_b"), (None, None)])
def test_the_acting_alternative_is_configurable(alternative: int | None, acting: str | None) -> None:
    adapter = OpenAIChatAdapter(CTX, alternative=alternative)
    out = run_adapter(adapter, [
        chunk(tc(0, id="call_a", name="transfer", args='{"to":"alice"}'), choice=0),
        chunk(tc(0, id="call_b", name="transfer", args='{"to":"bob"}'), choice=1),
        chunk(finish="tool_calls", choice=0),
        chunk(finish="tool_calls", choice=1),
    ])  # fmt: skip
    assert ended_call_ids(out) == ([acting] if acting else [])
    statuses = {rid: status for rid, status, _ in response_endings(out)}
    assert statuses == {
        "chatcmpl-1~alt0": "not_chosen",
        ("chatcmpl-1" if alternative == 1 else "chatcmpl-1~alt1"): (
            "completed" if alternative == 1 else "not_chosen"
        ),
    }


def test_an_unfinished_alternative_at_close_ends_not_chosen() -> None:
    _, out = run([
        chunk(tc(0, id="call_a", name="lookup", args="{}"), choice=0),
        chunk(tc(0, id="call_b", name="lookup", args="{}"), choice=1),
    ])  # fmt: skip
    assert response_endings(out) == [
        ("chatcmpl-1", "incomplete", "stream_cut"),
        ("chatcmpl-1~alt1", "not_chosen", "alternative"),
    ]


def test_an_unknown_payload_type_without_choices_is_ignored_and_counted() -> None:
    adapter, out = run([
        chunk(tc(0, id="call_a", name="lookup", args='{"q":')),
        {"type": "brand_new", "value": SECRET},
        chunk(tc(0, args="1}")),
        chunk(finish="tool_calls"),
    ])  # fmt: skip
    assert adapter.unknown_events == 1
    assert not any(SECRET in a for a in adapter.anomalies)
    assert assembled_calls(out) == [call("lookup", "call_a", "0:0", {"q": 1})]
