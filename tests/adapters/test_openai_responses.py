"""OpenAIResponsesAdapter: every recording, plus hand-written streams for what none shows."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from processor.adapters.openai_responses import OpenAIResponsesAdapter
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
)

FIXTURES = DATA / "openai-responses"
SECRET = "s3cr3t-argument-value"


def run(events: list[dict[str, Any]]) -> tuple[OpenAIResponsesAdapter, list[Any]]:
    adapter = OpenAIResponsesAdapter(CTX)
    return adapter, run_adapter(adapter, events)


# --------------------------------------------------------------------------- builders


def numbered(*events: dict[str, Any]) -> list[dict[str, Any]]:
    """Give the events consecutive sequence_numbers from 0, as the API does."""
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def created(rid: str = "resp_1") -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}


def added(item: str, call_id: str, name: str, index: int) -> dict[str, Any]:
    return {
        "type": "response.output_item.added",
        "output_index": index,
        "item": {"type": "function_call", "id": item, "call_id": call_id, "name": name},
    }


def delta(item: str, index: int, text: str) -> dict[str, Any]:
    return {
        "type": "response.function_call_arguments.delta",
        "item_id": item,
        "output_index": index,
        "delta": text,
    }


def args_done(item: str, index: int, arguments: str | None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "response.function_call_arguments.done",
        "item_id": item,
        "output_index": index,
    }
    if arguments is not None:
        event["arguments"] = arguments
    return event


def item_done(
    item: str, call_id: str, name: str, index: int, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "response.output_item.done",
        "output_index": index,
        "item": {
            "type": "function_call",
            "id": item,
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": status,
        },
    }


def completed(rid: str = "resp_1") -> dict[str, Any]:
    return {"type": "response.completed", "response": {"id": rid, "status": "completed"}}


def one_call(*middle: dict[str, Any], end: bool = True) -> list[dict[str, Any]]:
    tail = [completed()] if end else []
    return numbered(created(), added("fc_1", "call_1", "lookup", 0), *middle, *tail)


# --------------------------------------------------------------------------- recordings


def test_azure_single_call() -> None:
    _, events = run(load_events(FIXTURES / "azure-single-call.jsonl"))
    rid = "resp_04041325ab8ae30400698c519fb7fc81979972618138fc336d"
    assert assembled_calls(events) == [
        {
            "tool": "weather",
            "call_id": "call_H5DxLSFnsGhiROnUiDHmgyc8",
            "response_id": rid,
            "item_id": "fc_04041325ab8ae30400698c51c5468c8197a395f18875a5339f",
            "arguments": {"location": "San Francisco"},
        }
    ]
    assert response_endings(events) == [(rid, "completed", "completed")]
    deltas = [e for e in events if isinstance(e, CallDelta)]
    assert [d.seq for d in deltas] == [1, 2, 3, 4, 5, 6]
    ended = [e for e in events if isinstance(e, CallEnded)]
    assert ended[0].seq == 7
    assert ended[0].arguments == '{"location":"San Francisco"}'


def test_bedrock_mantle_turn1_positional_call_id_and_braces_in_one_delta() -> None:
    _, events = run(load_events(FIXTURES / "bedrock-mantle-call-ids-turn1.sse"))
    rid = "resp_yqqp3b5eoaaatwfitarja6yi42umok5glfymrqxbh4wwznmisz2q"
    assert assembled_calls(events) == [
        {
            "tool": "first_tool",
            "call_id": "call_0",
            "response_id": rid,
            "item_id": "fc_8189b908df5d54828dd1a219b8f647cb",
            "arguments": {},
        }
    ]
    assert response_endings(events) == [(rid, "completed", "completed")]
    assert [e.delta for e in events if isinstance(e, CallDelta)] == ["{}"]


def test_bedrock_mantle_turn2_reasoning_then_call() -> None:
    _, events = run(load_events(FIXTURES / "bedrock-mantle-call-ids-turn2.sse"))
    rid = "resp_3irkem3mb4qjb6cw3bfrozqwtev62iuhg5ygpmhx2j775j2hft5q"
    assert assembled_calls(events) == [
        {
            "tool": "second_tool",
            "call_id": "call_1",
            "response_id": rid,
            "item_id": "fc_90eeebebbc0858fb8cfcf850d451caf8",
            "arguments": {},
        }
    ]
    assert response_endings(events) == [(rid, "completed", "completed")]


def test_positional_call_ids_of_two_turns_never_share_a_key() -> None:
    _, first = run(load_events(FIXTURES / "bedrock-mantle-call-ids-turn1.sse"))
    _, second = run(load_events(FIXTURES / "bedrock-mantle-call-ids-turn2.sse"))
    keys = {(e.response_id, e.item_id, e.call_id) for e in first + second if not _is_end(e)}
    assert len(keys) == 2


def _is_end(event: Any) -> bool:
    return isinstance(event, ResponseEnded)


def test_error_then_response_failed_is_one_inert_ending() -> None:
    _, events = run(load_events(FIXTURES / "error-then-response-failed.jsonl"))
    rid = "resp_05500b38c2cd9bfc00691c7c9d222481a3b595421266dab424"
    assert assembled_calls(events) == []
    assert ended_call_ids(events) == []
    assert response_endings(events) == [(rid, "error", "insufficient_quota")]
    assert len(events) == 1


def test_reasoning_then_call_four_concatenated_turns() -> None:
    adapter, events = run(load_events(FIXTURES / "reasoning-then-call-4-turns.jsonl"))
    expected = [
        ("resp_01830d662ab3856501693c321345c88190b0de00f3b9975691",
         "fc_01830d662ab3856501693c32151234819091cfca267e98cc5f",
         "call_AB6AaRZ1FYZB2RwS6A5vbdqn", {"a": 12, "b": 7, "op": "add"}),
        ("resp_01830d662ab3856501693c3215903881909b710d150ff65014",
         "fc_01830d662ab3856501693c32165be4819098c08f205f8932ef",
         "call_Q6pW65MUgW9vF59BmItYGos3", {"a": 19, "b": 3, "op": "multiply"}),
        ("resp_01830d662ab3856501693c3216bef88190bf0e034cff24137b",
         "fc_01830d662ab3856501693c32173d5081908f2121e1c3ff2901",
         "call_Zl5vIMnD7dVAjgU6FkhmiCZh", {"a": 57, "b": 10, "op": "multiply"}),
    ]  # fmt: skip
    assert assembled_calls(events) == [
        {"tool": "calculator", "call_id": c, "response_id": r, "item_id": i, "arguments": a}
        for r, i, c, a in expected
    ]
    last = "resp_01830d662ab3856501693c3217ba4c8190a3ddf6c839d4f12a"
    assert response_endings(events) == [
        *[(r, "completed", "completed") for r, *_ in expected],
        (last, "completed", "completed"),
    ]
    # sequence_number restarts at 0 with each response.created: no gap, no replay
    assert adapter.anomalies == []
    # the reasoning summary and the final text are never published
    assert all(not isinstance(e, CallDelta) or "final" not in e.delta for e in events)


@pytest.mark.parametrize("path", sorted(FIXTURES.iterdir()), ids=lambda p: p.name)
def test_recordings_are_deterministic_and_ids_unique(path: Any) -> None:
    assert_replays_identically(lambda: OpenAIResponsesAdapter(CTX), load_events(path))


# --------------------------------------------------------------------------- hand-written


def test_interleaved_parallel_calls() -> None:
    events = numbered(
        created(),
        added("fc_a", "call_a", "get_weather", 0),
        added("fc_b", "call_b", "get_time", 1),
        delta("fc_a", 0, '{"city":'),
        delta("fc_b", 1, '{"tz":'),
        delta("fc_a", 0, '"Paris"}'),
        delta("fc_b", 1, '"UTC"}'),
        args_done("fc_b", 1, '{"tz":"UTC"}'),
        args_done("fc_a", 0, '{"city":"Paris"}'),
        completed(),
    )
    _, out = run(events)
    assert assembled_calls(out) == [
        {"tool": "get_time", "call_id": "call_b", "response_id": "resp_1", "item_id": "fc_b",
         "arguments": {"tz": "UTC"}},
        {"tool": "get_weather", "call_id": "call_a", "response_id": "resp_1", "item_id": "fc_a",
         "arguments": {"city": "Paris"}},
    ]  # fmt: skip
    seqs = [(e.item_id, e.seq) for e in out if isinstance(e, CallDelta)]
    assert seqs == [("fc_a", 1), ("fc_b", 1), ("fc_a", 2), ("fc_b", 2)]


def test_delta_found_by_output_index_when_item_id_is_missing() -> None:
    no_item = {k: v for k, v in delta("fc_1", 0, '{"q":1}').items() if k != "item_id"}
    _, out = run(one_call(no_item, args_done("fc_1", 0, '{"q":1}')))
    assert [c["arguments"] for c in assembled_calls(out)] == [{"q": 1}]


def test_no_argument_call_gets_braces() -> None:
    _, out = run(one_call(args_done("fc_1", 0, "")))
    deltas = [e for e in out if isinstance(e, CallDelta)]
    assert [d.delta for d in deltas] == ["{}"]
    ended = [e for e in out if isinstance(e, CallEnded)]
    assert ended[0].seq == 2 and ended[0].arguments is None
    assert [c["arguments"] for c in assembled_calls(out)] == [{}]


def test_arguments_only_in_done_become_the_one_delta() -> None:
    _, out = run(one_call(args_done("fc_1", 0, '{"q":"x"}')))
    assert [e.delta for e in out if isinstance(e, CallDelta)] == ['{"q":"x"}']
    assert [c["arguments"] for c in assembled_calls(out)] == [{"q": "x"}]


def test_output_item_done_ends_a_call_without_arguments_done() -> None:
    _, out = run(
        one_call(delta("fc_1", 0, '{"q":2}'), item_done("fc_1", "call_1", "lookup", 0, '{"q":2}'))
    )
    ended = [e for e in out if isinstance(e, CallEnded)]
    assert len(ended) == 1 and ended[0].arguments == '{"q":2}'
    assert [c["arguments"] for c in assembled_calls(out)] == [{"q": 2}]


def test_arguments_done_then_item_done_end_the_call_once() -> None:
    _, out = run(
        one_call(
            delta("fc_1", 0, "{}"),
            args_done("fc_1", 0, "{}"),
            item_done("fc_1", "call_1", "lookup", 0, "{}"),
        )
    )
    assert ended_call_ids(out) == ["call_1"]


def test_incomplete_item_done_is_not_a_terminal() -> None:
    incomplete = {
        "type": "response.incomplete",
        "response": {"id": "resp_1", "incomplete_details": {"reason": "max_output_tokens"}},
    }
    _, out = run(
        one_call(
            delta("fc_1", 0, '{"q":'),
            item_done("fc_1", "call_1", "lookup", 0, '{"q":', status="incomplete"),
            incomplete,
            end=False,
        )
    )
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("resp_1", "incomplete", "max_output_tokens")]


def test_conflicting_name_in_item_done_withholds_the_call() -> None:
    adapter, out = run(
        one_call(delta("fc_1", 0, "{}"), item_done("fc_1", "call_1", "rm_rf", 0, "{}"))
    )
    assert ended_call_ids(out) == []
    assert assembled_calls(out) == []
    assert response_endings(out) == [("resp_1", "completed", "completed")]
    assert any("conflicting" in a for a in adapter.anomalies)


def test_repeated_output_item_added_is_ignored() -> None:
    _, out = run(
        one_call(
            added("fc_1", "call_1", "lookup", 0),
            delta("fc_1", 0, "{}"),
            args_done("fc_1", 0, "{}"),
        )
    )
    assert sum(isinstance(e, CallStarted) for e in out) == 1
    assert ended_call_ids(out) == ["call_1"]


def test_completed_with_an_unterminated_call_makes_it_inert() -> None:
    adapter, out = run(one_call(delta("fc_1", 0, '{"q":1}')))
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("resp_1", "completed", "completed")]
    assert adapter.anomalies == ["response completed with calls that never ended"]


def test_truncated_mid_string_then_stream_ends() -> None:
    _, out = run(one_call(delta("fc_1", 0, '{"path":"/etc/pas'), end=False))
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("resp_1", "incomplete", "stream_cut")]


def test_error_mid_call_makes_it_inert_and_later_terminals_are_ignored() -> None:
    error = {"type": "error", "code": "server_error", "message": "boom"}
    _, out = run(
        one_call(
            delta("fc_1", 0, '{"q":'),
            error,
            delta("fc_1", 0, "1}"),
            args_done("fc_1", 0, '{"q":1}'),
        )
    )
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("resp_1", "error", "server_error")]
    assert [e.delta for e in out if isinstance(e, CallDelta)] == ['{"q":']


def test_response_failed_with_an_open_call() -> None:
    failed = {"type": "response.failed",
              "response": {"id": "resp_1", "error": {"code": "server_error", "message": "x"}}}  # fmt: skip
    _, out = run(one_call(delta("fc_1", 0, '{"q":'), failed, end=False))
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("resp_1", "failed", "server_error")]


def test_second_response_created_while_open_is_a_splice() -> None:
    events = numbered(
        created("resp_1"), added("fc_1", "call_1", "lookup", 0), delta("fc_1", 0, "{")
    )
    events += numbered(
        created("resp_2"),
        added("fc_2", "call_2", "lookup", 0),
        delta("fc_2", 0, "{}"),
        args_done("fc_2", 0, "{}"),
        completed("resp_2"),
    )
    _, out = run(events)
    assert response_endings(out) == [
        ("resp_1", "error", "spliced"),
        ("resp_2", "completed", "completed"),
    ]
    assert [(c["response_id"], c["call_id"]) for c in assembled_calls(out)] == [("resp_2", "call_2")]


def test_replayed_delta_keeps_its_event_id() -> None:
    events = one_call(
        delta("fc_1", 0, '{"q":'), delta("fc_1", 0, "1}"), args_done("fc_1", 0, '{"q":1}')
    )
    replayed = [*events[:4], events[2], events[3], *events[4:]]
    adapter, out = run(replayed)
    deltas = [e for e in out if isinstance(e, CallDelta)]
    assert [(d.seq, d.delta) for d in deltas] == [(1, '{"q":'), (2, "1}"), (1, '{"q":'), (2, "1}")]
    assert deltas[0].event_id == deltas[2].event_id and deltas[1].event_id == deltas[3].event_id
    assert assembled_calls(out)[0]["arguments"] == {"q": 1}
    assert "replayed sequence_number" in adapter.anomalies


def test_replayed_terminal_events_are_ignored() -> None:
    events = one_call(delta("fc_1", 0, "{}"), args_done("fc_1", 0, "{}"))
    _, out = run([*events[:4], events[3], events[1], *events[4:]])
    assert ended_call_ids(out) == ["call_1"]
    assert sum(isinstance(e, CallStarted) for e in out) == 1


def test_sequence_gap_withholds_open_calls() -> None:
    events = one_call(
        delta("fc_1", 0, '{"q":'), delta("fc_1", 0, "12}"), args_done("fc_1", 0, '{"q":12}')
    )
    del events[3]  # a lost delta: sequence_number 3 never arrives
    adapter, out = run(events)
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("resp_1", "completed", "completed")]
    assert "sequence_number gap: open calls withheld" in adapter.anomalies


def test_replay_into_a_fresh_adapter_gives_the_same_ids() -> None:
    events = load_events(FIXTURES / "azure-single-call.jsonl")
    _, first = run(events)
    _, again = run(events[:6])
    assert [e.event_id for e in again[:-1]] == [e.event_id for e in first[: len(again) - 1]]


def test_harmless_and_unsupported_items_are_ignored() -> None:
    events = numbered(
        created(),
        {"type": "response.in_progress", "response": {"id": "resp_1"}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"type": "message", "id": "msg_1"}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
         "delta": SECRET},
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs", "delta": "x"},
        {"type": "response.output_item.added", "output_index": 1,
         "item": {"type": "custom_tool_call", "id": "ct_1", "call_id": "c", "name": "n"}},
        {"type": "response.custom_tool_call_input.delta", "item_id": "ct_1", "delta": "x"},
        completed(),
    )  # fmt: skip
    adapter, out = run(events)
    assert response_endings(out) == [("resp_1", "completed", "completed")]
    assert len(out) == 1
    assert adapter.anomalies == ["unsupported client tool item ignored"]


# --------------------------------------------------------------------------- bad chunks

BAD_CHUNKS: list[tuple[str, Any]] = [
    ("not json", "{not json " + SECRET),
    ("not an object", orjson.dumps([SECRET]).decode()),
    ("no type", {"delta": SECRET}),
    ("delta not a string", {**delta("fc_1", 0, ""), "delta": {"v": SECRET}}),
    ("delta missing", {"type": "response.function_call_arguments.delta", "item_id": "fc_1"}),
    ("item not an object", {"type": "response.output_item.added", "item": SECRET}),
    ("call without a name", {"type": "response.output_item.added", "output_index": 1,
                             "item": {"type": "function_call", "id": "fc_2", "call_id": "c2"}}),
    ("sequence_number not int", {**delta("fc_1", 0, "x"), "sequence_number": SECRET}),
    ("terminal for another response", completed("resp_other")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "chunk"), BAD_CHUNKS, ids=[n for n, _ in BAD_CHUNKS])
def test_bad_chunk_raises_adapter_error_and_ends_inert(name: str, chunk: Any) -> None:
    adapter = OpenAIResponsesAdapter(CTX)
    out = []
    for event in one_call(delta("fc_1", 0, '{"q":'), end=False):
        out += adapter.feed(event)
    with pytest.raises(AdapterError) as info:
        adapter.feed(chunk)
    assert SECRET not in str(info.value)
    with pytest.raises(AdapterError):
        adapter.feed(args_done("fc_1", 0, '{"q":1}'))
    out += adapter.close()
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("resp_1", "error", "bad_chunk")]


def test_event_before_response_created_is_an_adapter_error() -> None:
    adapter = OpenAIResponsesAdapter(CTX)
    with pytest.raises(AdapterError):
        adapter.feed(added("fc_1", "call_1", "lookup", 0))
    assert adapter.close() == []


def test_feed_after_close_is_an_adapter_error() -> None:
    adapter = OpenAIResponsesAdapter(CTX)
    adapter.close()
    with pytest.raises(AdapterError):
        adapter.feed(created())


def test_oversized_tool_name_is_an_adapter_error_not_a_validation_error() -> None:
    adapter = OpenAIResponsesAdapter(CTX)
    adapter.feed(created())
    with pytest.raises(AdapterError):
        adapter.feed(added("fc_1", "call_1", "x" * 500, 0))


# --------------------------------------------------------------------------- response verdicts


def incomplete(reason: str, rid: str = "resp_1") -> dict[str, Any]:
    details = {"reason": reason}
    response = {"id": rid, "status": "incomplete", "incomplete_details": details}
    return {"type": "response.incomplete", "response": response}


@pytest.mark.parametrize(
    ("reason", "status"),
    [("content_filter", "failed"), ("max_output_tokens", "incomplete"), ("brand_new", "failed")],
)
def test_arguments_done_then_response_incomplete_voids_the_response(
    reason: str, status: str
) -> None:
    """The call ended at arguments.done; the response then ended incomplete: the verdict travels
    in response.ended (test_verdicts_e2e: nothing dispatches)."""
    _, out = run(one_call(delta("fc_1", 0, '{"q":1}'), args_done("fc_1", 0, '{"q":1}'),
                          item_done("fc_1", "call_1", "lookup", 0, '{"q":1}', "incomplete"),
                          incomplete(reason), end=False))  # fmt: skip
    assert ended_call_ids(out) == ["call_1"]
    assert response_endings(out) == [("resp_1", status, reason)]


def test_two_provider_finals_that_disagree_end_the_response_arguments_mismatch() -> None:
    """arguments.done agrees with the deltas, output_item.done contradicts both: fail safe."""
    _, out = run(one_call(delta("fc_1", 0, '{"to":"alice"}'),
                          args_done("fc_1", 0, '{"to":"alice"}'),
                          item_done("fc_1", "call_1", "lookup", 0, '{"to":"mallory"}')))  # fmt: skip
    assert response_endings(out) == [("resp_1", "error", "arguments_mismatch")]


def test_item_done_first_then_a_disagreeing_arguments_done_is_a_mismatch() -> None:
    _, out = run(one_call(delta("fc_1", 0, '{"to":"alice"}'),
                          item_done("fc_1", "call_1", "lookup", 0, '{"to":"alice"}'),
                          args_done("fc_1", 0, '{"to":"mallory"}')))  # fmt: skip
    assert ended_call_ids(out) == ["call_1"]
    assert response_endings(out) == [("resp_1", "error", "arguments_mismatch")]


def test_a_second_final_that_contradicts_the_deltas_when_the_first_had_none() -> None:
    _, out = run(one_call(delta("fc_1", 0, '{"to":"alice"}'), args_done("fc_1", 0, None),
                          item_done("fc_1", "call_1", "lookup", 0, '{"to":"mallory"}')))  # fmt: skip
    assert response_endings(out) == [("resp_1", "error", "arguments_mismatch")]


def test_two_finals_that_agree_as_json_complete_normally() -> None:
    _, out = run(one_call(delta("fc_1", 0, '{"q": 1}'), args_done("fc_1", 0, '{"q": 1}'),
                          item_done("fc_1", "call_1", "lookup", 0, '{"q":1}')))  # fmt: skip
    assert response_endings(out) == [("resp_1", "completed", "completed")]
    assert assembled_calls(out) == [
        {"tool": "lookup", "call_id": "call_1", "response_id": "resp_1", "item_id": "fc_1",
         "arguments": {"q": 1}}
    ]  # fmt: skip


def test_an_unknown_event_type_is_ignored_and_counted() -> None:
    adapter, out = run(one_call(delta("fc_1", 0, '{"q":'),
                                {"type": "response.brand_new_thing", "output_index": 3,
                                 "delta": SECRET},
                                delta("fc_1", 0, "1}"), args_done("fc_1", 0, '{"q":1}')))  # fmt: skip
    assert adapter.unknown_events == 1
    assert not any(SECRET in a for a in adapter.anomalies)
    assert ended_call_ids(out) == ["call_1"]
    assert response_endings(out) == [("resp_1", "completed", "completed")]


def test_an_unknown_event_inside_a_call_withholds_it() -> None:
    odd = {"type": "response.function_call_arguments.patch", "item_id": "fc_1", "delta": SECRET}
    adapter, out = run(one_call(delta("fc_1", 0, '{"q":1}'), odd,
                                args_done("fc_1", 0, '{"q":1}')))  # fmt: skip
    assert adapter.unknown_events == 1
    assert ended_call_ids(out) == []
    assert response_endings(out) == [("resp_1", "completed", "completed")]


def test_an_incomplete_item_after_its_call_ended_forbids_completion() -> None:
    _, out = run(one_call(delta("fc_1", 0, '{"q":1}'), args_done("fc_1", 0, '{"q":1}'),
                          item_done("fc_1", "call_1", "lookup", 0, '{"q":1}', "incomplete")))  # fmt: skip
    assert ended_call_ids(out) == ["call_1"]
    assert response_endings(out) == [("resp_1", "error", "item_incomplete")]
