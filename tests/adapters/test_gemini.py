"""The Gemini / Vertex adapter: recorded streams, hand-written edge cases, partialArgs as text."""

from __future__ import annotations

import contextlib
import copy
import json
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.adapters.gemini import GeminiAdapter
from processor.adapters.vertex_args import PartialArgsError, parse_json_path
from processor.core.errors import AdapterError
from processor.core.events import CallDelta, CallEnded, CallStarted, FragmentEvent, ResponseEnded
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

GEMINI = DATA / "gemini"


def recording(name: str) -> list[dict[str, Any]]:
    return load_events(GEMINI / name)


def run(events: list[dict[str, Any]]) -> tuple[list[FragmentEvent], GeminiAdapter]:
    adapter = GeminiAdapter(CTX)
    return run_adapter(adapter, events), adapter


def calls(events: list[FragmentEvent]) -> list[tuple[str, Any]]:
    return [(c["tool"], c["arguments"]) for c in assembled_calls(events)]


# --------------------------------------------------------------------------- chunk builders


def chunk(
    *parts: dict[str, Any], finish: str | None = None, rid: str | None = "r1"
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}}
    if finish is not None:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [candidate]}
    if rid is not None:
        out["responseId"] = rid
    return out


def fc(**fields: Any) -> dict[str, Any]:
    return {"functionCall": fields}


def item(path: str, value: Any, *, more: bool = False, kind: str = "stringValue") -> dict[str, Any]:
    out: dict[str, Any] = {"jsonPath": path, kind: value}
    if more:
        out["willContinue"] = True
    return out


def args_part(*items: dict[str, Any], more: bool = True) -> dict[str, Any]:
    return fc(partialArgs=list(items), willContinue=True) if more else fc(partialArgs=list(items))


def start(name: str, **extra: Any) -> dict[str, Any]:
    return fc(name=name, willContinue=True, **extra)


END = fc()


# --------------------------------------------------------------------------- recordings


def test_whole_call_one_chunk() -> None:
    events, adapter = run(recording("whole-call-one-chunk.jsonl"))
    rid = "b36LacjwM668nsEP2tbsgQQ"
    assert assembled_calls(events) == [
        {
            "tool": "weather",
            "call_id": f"{rid}:0",
            "response_id": rid,
            "item_id": "0",
            "arguments": {"location": "San Francisco"},
        }
    ]
    assert response_endings(events) == [(rid, "completed", "STOP")]
    ended = [e for e in events if isinstance(e, CallEnded)]
    assert ended[0].arguments == '{"location":"San Francisco"}'
    assert adapter.anomalies == []


def test_partial_args_two_sequential_calls() -> None:
    events, adapter = run(recording("partial-args-two-sequential-calls.jsonl"))
    rid = "dqHOab6xGLzWodAPkPuViA4"
    assert calls(events) == [
        ("getWeather", {"location": "Boston"}),
        ("getWeather", {"location": "San Francisco"}),
    ]
    assert [(c["item_id"], c["call_id"]) for c in assembled_calls(events)] == [
        ("0", f"{rid}:0"),
        ("1", f"{rid}:1"),
    ]
    assert response_endings(events) == [(rid, "completed", "STOP")]
    assert adapter.anomalies == []


def test_partial_args_noargs_then_three_calls() -> None:
    events, adapter = run(recording("partial-args-noargs-then-three-calls.jsonl"))
    assert calls(events) == [
        ("read_theme", {}),
        ("read_screen", {"id": "A"}),
        ("read_screen", {"id": "B"}),
        ("read_screen", {"id": "C"}),
    ]
    no_args = [e for e in events if isinstance(e, CallDelta) and e.item_id == "0"]
    assert [d.delta for d in no_args] == ["{}"]
    assert response_endings(events)[0][1:] == ("completed", "STOP")
    assert adapter.anomalies == []


WRITE_ITEMS = {
    "operations": [
        {"action": "add", "description": "Fresh red apple", "itemid": "apple_001", "price": 0.5},
        {
            "action": "add",
            "description": "Ripe yellow banana",
            "itemid": "banana_001",
            "price": 0.3,
        },
    ]
}


def test_partial_args_missing_terminal_ends_at_the_last_part() -> None:
    stream = recording("partial-args-missing-terminal.jsonl")
    adapter = GeminiAdapter(CTX)
    before: list[FragmentEvent] = []
    for event in stream[:-1]:
        before.extend(adapter.feed(event))
    # The last part without willContinue is the terminal, trusted once the response stops.
    assert ended_call_ids(before) == []
    after = adapter.feed(stream[-1]) + adapter.close()
    events = before + after
    assert calls(events) == [("writeItems", WRITE_ITEMS)]
    assert [type(e) for e in after] == [CallEnded, ResponseEnded]
    assert response_endings(events)[0][1:] == ("completed", "STOP")


def test_partial_args_missing_terminal_cut_at_max_tokens_is_inert() -> None:
    stream = recording("partial-args-missing-terminal.jsonl")
    stream[-1]["candidates"][0]["finishReason"] = "MAX_TOKENS"
    events, _ = run(stream)
    assert calls(events) == []
    assert ended_call_ids(events) == []
    (ending,) = response_endings(events)
    assert ending[1] == "incomplete"
    assert ending[2] == "MAX_TOKENS"


@pytest.mark.parametrize(
    "name",
    [
        "whole-call-one-chunk.jsonl",
        "partial-args-two-sequential-calls.jsonl",
        "partial-args-noargs-then-three-calls.jsonl",
        "partial-args-missing-terminal.jsonl",
    ],
)
def test_recordings_are_deterministic_and_well_positioned(name: str) -> None:
    first, _ = run(recording(name))
    second, _ = run(recording(name))
    assert dumped(first) == dumped(second)
    assert len({e.event_id for e in first}) == len(first)
    by_call: dict[str, list[int]] = {}
    for event in first:
        if isinstance(event, CallStarted | CallDelta | CallEnded):
            by_call.setdefault(event.call_id, []).append(event.seq)
    for seqs in by_call.values():
        assert seqs == list(range(len(seqs)))


@pytest.mark.parametrize(
    "name",
    [
        "whole-call-one-chunk.jsonl",
        "partial-args-two-sequential-calls.jsonl",
        "partial-args-noargs-then-three-calls.jsonl",
        "partial-args-missing-terminal.jsonl",
    ],
)
def test_recording_cut_before_its_last_chunk_is_inert(name: str) -> None:
    stream = recording(name)[:-1]
    events, _ = run(stream)
    (ending,) = response_endings(events)
    assert ending[1] == "incomplete"
    assert ending[2] == "stream_cut"
    # A cut stream is no normal completion: not even calls whose terminal arrived may act.
    assert calls(events) == []


# --------------------------------------------------------------------------- nested paths


def recipe_stream() -> list[dict[str, Any]]:
    """Shaped like vercel/ai's google-vertex-stream-tool-call-arguments-nested fixture."""
    ingredients = [("16 oz", "Lasagna noodles"), ("1 lb", "Ground beef")]
    out = [chunk(start("cookRecipe"))]
    for i, (amount, name) in enumerate(ingredients):
        for key, value in (("amount", amount), ("name", name)):
            path = f"$.recipe.ingredients[{i}].{key}"
            out.append(chunk(args_part(item(path, value, more=True))))
            out.append(chunk(args_part(item(path, ""))))
        out.append(chunk(fc(willContinue=True)))
    out.append(chunk(args_part(item("$.recipe.name", "Lasa", more=True))))
    out.append(chunk(args_part(item("$.recipe.name", "gna"))))
    out.append(chunk(args_part(item("$.recipe.steps[0]", "Preheat to 375°F.", more=True))))
    out.append(chunk(args_part(item("$.recipe.steps[0]", ""))))
    out.append(chunk(args_part(item("$.recipe.steps[1]", 'Say "hi"\\\n', more=True))))
    out.append(chunk(args_part(item("$.recipe.steps[1]", "."))))
    out.append(chunk(args_part(item("$.recipe.servings", 8, kind="numberValue"))))
    out.append(chunk(args_part(item("$.recipe.vegetarian", False, kind="boolValue"))))
    out.append(chunk(args_part(item("$.recipe.notes", None, kind="nullValue"))))
    out.append(chunk(END, finish="STOP"))
    return out


RECIPE = {
    "recipe": {
        "ingredients": [
            {"amount": "16 oz", "name": "Lasagna noodles"},
            {"amount": "1 lb", "name": "Ground beef"},
        ],
        "name": "Lasagna",
        "steps": ["Preheat to 375°F.", 'Say "hi"\\\n.'],
        "servings": 8,
        "vegetarian": False,
        "notes": None,
    }
}


def test_nested_paths_arrays_and_all_value_kinds() -> None:
    events, adapter = run(recipe_stream())
    assert calls(events) == [("cookRecipe", RECIPE)]
    assert adapter.anomalies == []


def test_nested_text_is_streamed_not_held() -> None:
    events, _ = run(recipe_stream())
    deltas = [e.delta for e in events if isinstance(e, CallDelta)]
    assert deltas[:3] == [
        '{"recipe":{"ingredients":[{"amount":"16 oz',
        '"',
        ',"name":"Lasagna noodles',
    ]
    assert '}],"name":"Lasa' in deltas
    assert deltas[-1] == "}}"


@pytest.mark.parametrize(
    ("path", "segments"),
    [
        ("$.a", ("a",)),
        ("$.operations[1].price", ("operations", 1, "price")),
        ("$.a.b.c", ("a", "b", "c")),
        ("$.m[0][12]", ("m", 0, 12)),
        ("$['a.b']", ("a.b",)),
        ('$["x\\"y"].z', ('x"y', "z")),
        ("$['it\\'s']", ("it's",)),
        ("$['']", ("",)),
        ("$.ключ", ("ключ",)),
    ],
)
def test_json_path_grammar(path: str, segments: tuple[Any, ...]) -> None:
    assert parse_json_path(path) == segments


@pytest.mark.parametrize(
    "path", ["", "$", "a.b", "$.", "$..a", "$.a[", "$.a[x]", "$.a[-1]", "$.a]", "$[1234567890]"]
)
def test_bad_json_paths(path: str) -> None:
    with pytest.raises(PartialArgsError):
        parse_json_path(path)


def test_bad_json_path_in_a_stream_makes_the_response_inert() -> None:
    events, adapter = run([chunk(start("f")), chunk(args_part(item("$.a[", "x"), more=False))])
    assert calls(events) == []
    assert response_endings(events)[0][1] == "error"
    assert adapter.anomalies


# --------------------------------------------------------------------------- order problems


@pytest.mark.parametrize(
    ("items", "reason"),
    [
        ([item("$.a", "1"), item("$.b", "2"), item("$.a", "3")], "partial_args_order"),
        ([item("$.a.x", "1"), item("$.b", "2"), item("$.a.y", "3")], "partial_args_order"),
        ([item("$.l[0]", "1"), item("$.l[2]", "2")], "partial_args_order"),
        ([item("$.l[1]", "1")], "partial_args_order"),
        ([item("$.l[0]", "1"), item("$.l[0]", "2")], "partial_args_order"),
        ([item("$.a", "1", more=True), item("$.b", "2")], "partial_args_order"),
        ([item("$.a", "1", more=True), item("$.a", 2, kind="numberValue")], "partial_args_order"),
        ([item("$.a[0]", "1"), item("$.a.b", "2")], "partial_args_order"),
        ([item("$[0]", "1")], "partial_args_order"),
        ([item("$.a", "1", kind="numberValue")], "bad_partial_args"),
        ([item("$.a", float("nan"), kind="numberValue")], "bad_partial_args"),
        ([item("$.a", True, kind="numberValue")], "bad_partial_args"),
        ([{"jsonPath": "$.a", "stringValue": "x", "boolValue": True}], "bad_partial_args"),
        (["not an item"], "bad_partial_args"),
    ],
)
def test_unstreamable_partial_args_make_the_response_inert(
    items: list[dict[str, Any]], reason: str
) -> None:
    stream = [chunk(start("f")), chunk(args_part(*items)), chunk(END), chunk(finish="STOP")]
    events, adapter = run(stream)
    assert ended_call_ids(events) == []
    (ending,) = response_endings(events)
    assert ending[1] == "error"
    assert ending[2].startswith(reason)
    assert any("inert" in a for a in adapter.anomalies)


def test_terminal_inside_a_continued_string_is_inert() -> None:
    stream = [chunk(start("f")), chunk(args_part(item("$.cmd", "rm -rf /", more=True))), chunk(END)]
    events, _ = run(stream)
    assert ended_call_ids(events) == []
    assert response_endings(events)[0][2].startswith("partial_args_cut")


def test_inert_response_ignores_its_later_chunks_and_voids_finished_calls() -> None:
    stream = [
        chunk(fc(name="ok", args={"a": 1})),
        chunk(start("bad")),
        chunk(args_part(item("$.a", "1"), item("$.a", "2"))),
        chunk(start("later")),
        chunk(END, finish="STOP"),
    ]
    events, adapter = run(stream)
    assert calls(events) == []  # the response ended inert: its finished call does not act
    assert len(response_endings(events)) == 1
    assert "chunk ignored: its response already finished" in adapter.anomalies


def test_calls_earlier_in_the_same_chunk_are_voided_by_an_inert_ending() -> None:
    bad = fc(name="g", partialArgs=[item("$.a", "1"), item("$.a", "2")])
    events, _ = run([chunk(fc(name="f", args={"k": True}), bad)])
    assert calls(events) == []
    assert response_endings(events)[0][1] == "error"


def test_value_less_items_are_skipped_and_may_close_a_string() -> None:
    stream = [
        chunk(start("f")),
        chunk(args_part({"jsonPath": "$.skip"}, item("$.s", "ab", more=True))),
        chunk(args_part({"jsonPath": "$.s"})),
        chunk(END, finish="STOP"),
    ]
    events, _ = run(stream)
    assert calls(events) == [("f", {"s": "ab"})]


# --------------------------------------------------------------------------- escaping


@pytest.mark.parametrize(
    "pieces",
    [
        ['quote " and ', "back\\slash", "\n\t\u0000\u001f"],
        ["emoji 😀 ", "CJK 漢字", "\u2028\u2029"],
        ["\ud83d", "\ude00"],  # a surrogate pair split across pieces
        ["", "", "x", ""],
    ],
)
def test_split_strings_are_escaped_piece_by_piece(pieces: list[str]) -> None:
    items = [item("$.s", p, more=True) for p in pieces[:-1]] + [item("$.s", pieces[-1])]
    stream = [chunk(start("f")), *[chunk(args_part(i)) for i in items], chunk(END, finish="STOP")]
    events, _ = run(stream)
    deltas = "".join(e.delta for e in events if isinstance(e, CallDelta))
    joined = "".join(pieces).encode("utf-16", "surrogatepass").decode("utf-16")
    assert json.loads(deltas) == {"s": joined}


def test_keys_are_escaped() -> None:
    stream = [
        chunk(start("f")),
        chunk(args_part(item("$['a\"b']", "1"), item("$['c\\\\d']", "2"), more=False)),
        chunk(finish="STOP"),
    ]
    events, _ = run(stream)
    assert calls(events) == [("f", {'a"b': "1", "c\\d": "2"})]


# --------------------------------------------------------------------------- calls and ids


def test_parallel_whole_calls_in_one_chunk() -> None:
    parts = [
        fc(name="get_weather", args={"city": "Paris"}),
        {"text": "between"},
        fc(name="get_weather", args={"city": "Rome"}),
        fc(name="get_time", args={}),
    ]
    events, _ = run([chunk(*parts), chunk(finish="STOP")])
    got = assembled_calls(events)
    assert [(c["tool"], c["arguments"], c["item_id"]) for c in got] == [
        ("get_weather", {"city": "Paris"}, "0"),
        ("get_weather", {"city": "Rome"}, "1"),
        ("get_time", {}, "2"),
    ]
    assert len({c["call_id"] for c in got}) == 3


def test_provider_call_ids_are_used() -> None:
    stream = [
        chunk(start("f", id="call-a")),
        chunk(fc(id="call-a", partialArgs=[item("$.x", "1")], willContinue=True)),
        chunk(fc(id="call-a")),
        chunk(fc(name="g", id="call-b", args={"y": 2}), finish="STOP"),
    ]
    events, adapter = run(stream)
    assert [(c["call_id"], c["arguments"]) for c in assembled_calls(events)] == [
        ("call-a", {"x": "1"}),
        ("call-b", {"y": 2}),
    ]
    assert adapter.anomalies == []


def test_a_name_with_the_open_call_id_continues_it() -> None:
    stream = [
        chunk(start("f", id="c1")),
        chunk(fc(name="f", id="c1", partialArgs=[item("$.x", "1")])),
        chunk(finish="STOP"),
    ]
    events, _ = run(stream)
    assert calls(events) == [("f", {"x": "1"})]


@pytest.mark.parametrize(
    "continuation",
    [
        fc(name="other", id="c1", partialArgs=[item("$.x", "1")]),
        fc(id="c2", partialArgs=[item("$.x", "1")]),
    ],
)
def test_identity_conflicts_make_the_response_inert(continuation: dict[str, Any]) -> None:
    events, _ = run([chunk(start("f", id="c1")), chunk(continuation), chunk(finish="STOP")])
    assert ended_call_ids(events) == []
    assert response_endings(events)[0][1:] == (
        "error",
        response_endings(events)[0][2],
    )
    assert response_endings(events)[0][2].startswith("identity_conflict")


def test_late_call_id_keeps_the_positional_id() -> None:
    stream = [
        chunk(start("f")),
        chunk(fc(id="late", partialArgs=[item("$.x", "1")])),
        chunk(finish="STOP"),
    ]
    events, adapter = run(stream)
    assert [c["call_id"] for c in assembled_calls(events)] == ["r1:0"]
    assert any("positional id is kept" in a for a in adapter.anomalies)


def test_duplicated_chunk_with_a_call_id_is_ignored() -> None:
    whole = chunk(fc(name="f", id="c1", args={"a": 1}))
    events, adapter = run([whole, copy.deepcopy(whole), chunk(finish="STOP")])
    assert calls(events) == [("f", {"a": 1})]
    assert len([e for e in events if isinstance(e, CallStarted)]) == 1
    assert "duplicate functionCall part ignored" in adapter.anomalies


def test_reused_call_id_for_another_call_is_a_conflict() -> None:
    stream = [
        chunk(fc(name="f", id="c1", args={"a": 1})),
        chunk(fc(name="f", id="c1", args={"a": 2})),
    ]
    events, _ = run(stream)
    # The first call had already ended; the conflicting second one never starts, and the
    # response ends inert, which voids the first one too.
    assert calls(events) == []
    assert len([e for e in events if isinstance(e, CallStarted)]) == 1
    assert response_endings(events)[0][2].startswith("identity_conflict")


def test_replay_through_a_fresh_adapter_gives_the_same_event_ids() -> None:
    stream = recipe_stream()
    first, _ = run(stream)
    replay, _ = run(copy.deepcopy(stream))
    assert [e.event_id for e in first] == [e.event_id for e in replay]


def test_response_ids_without_response_id_are_deterministic_and_distinct() -> None:
    one = [chunk(fc(name="f", args={}), finish="STOP", rid=None)]
    events, _ = run(one + copy.deepcopy(one))
    ids = [e.response_id for e in events if isinstance(e, ResponseEnded)]
    assert len(ids) == 2
    assert ids[0] != ids[1]
    again, _ = run(one + copy.deepcopy(one))
    assert ids == [e.response_id for e in again if isinstance(e, ResponseEnded)]
    assert [c["call_id"] for c in assembled_calls(events)] == [f"{ids[0]}:0", f"{ids[1]}:0"]


def test_a_new_response_id_supersedes_an_unfinished_response() -> None:
    stream = [
        chunk(start("f")),
        chunk(fc(name="g", args={}), rid="r2"),
        chunk(finish="STOP", rid="r2"),
    ]
    events, _ = run(stream)
    assert response_endings(events) == [
        ("r1", "incomplete", "superseded"),
        ("r2", "completed", "STOP"),
    ]
    assert calls(events) == [("g", {})]


def test_a_new_call_before_the_terminal_abandons_the_open_one() -> None:
    stream = [
        chunk(start("f")),
        chunk(args_part(item("$.a", "1"))),
        chunk(start("g")),
        chunk(args_part(item("$.b", "2"), more=False)),
        chunk(finish="STOP"),
    ]
    events, adapter = run(stream)
    assert calls(events) == [("g", {"b": "2"})]
    assert "1 call(s) without a trusted terminal made inert" in adapter.anomalies
    assert "a new call started before the open call's terminal" in adapter.anomalies


def test_stray_continuations_are_ignored() -> None:
    stream = [chunk(args_part(item("$.a", "1"))), chunk(END), chunk(fc(name="f"), finish="STOP")]
    events, adapter = run(stream)
    assert calls(events) == [("f", {})]
    assert adapter.anomalies.count("functionCall continuation without an open call ignored") == 2


def test_text_is_not_published() -> None:
    events, _ = run([chunk({"text": "hello"}, {"text": "x", "thought": True}, finish="STOP")])
    assert [type(e) for e in events] == [ResponseEnded]


def test_candidates_are_alternatives_and_only_the_first_acts() -> None:
    """candidateCount=2: candidate 1 reaches the core under its own response id, without a
    terminal, and ends not_chosen (test_verdicts_e2e: only candidate 0 dispatches)."""
    two = chunk(fc(name="f", args={"a": 1}), finish="STOP")
    other = copy.deepcopy(two["candidates"][0])
    other["index"] = 1
    other["content"]["parts"] = [fc(name="evil", args={})]
    two["candidates"].append(other)
    events, _ = run([two])
    started = [(e.response_id, e.tool) for e in events if isinstance(e, CallStarted)]
    assert started == [("r1", "f"), ("r1~alt1", "evil")]
    assert ended_call_ids(events) == ["r1:0"]
    assert response_endings(events) == [
        ("r1", "completed", "STOP"),
        ("r1~alt1", "not_chosen", "alternative"),
    ]


# --------------------------------------------------------------------------- endings


@pytest.mark.parametrize(
    ("finish", "status"),
    [
        ("MAX_TOKENS", "incomplete"),
        ("SAFETY", "failed"),
        ("MALFORMED_FUNCTION_CALL", "failed"),
        ("SOMETHING_NEW", "failed"),
    ],
)
def test_truncation_mid_string_is_inert(finish: str, status: str) -> None:
    stream = [
        chunk(start("f")),
        chunk(args_part(item("$.path", "/tmp/bu", more=True)), finish=finish),
    ]
    events, _ = run(stream)
    assert ended_call_ids(events) == []
    (ending,) = response_endings(events)
    assert ending[1] == status
    assert ending[2] == finish


def test_implicit_terminal_in_a_max_tokens_chunk_is_not_trusted() -> None:
    stream = [
        chunk(start("f")),
        chunk(args_part(item("$.a", "1"), more=False), finish="MAX_TOKENS"),
    ]
    events, _ = run(stream)
    assert ended_call_ids(events) == []


def test_explicit_terminal_before_max_tokens_is_voided_by_it() -> None:
    stream = [
        chunk(start("f")),
        chunk(args_part(item("$.a", "1")), END),
        chunk({"text": "and then"}, finish="MAX_TOKENS"),
    ]
    events, _ = run(stream)
    assert len(ended_call_ids(events)) == 1  # the call itself ended ...
    assert calls(events) == []  # ... but its response was cut: it never acts
    assert response_endings(events)[0][1:] == ("incomplete", "MAX_TOKENS")


def test_error_chunk_mid_call_fails_the_response() -> None:
    stream = [
        chunk(start("f")),
        chunk(args_part(item("$.a", "1"))),
        {"error": {"code": 500, "message": "internal secret text", "status": "INTERNAL"}},
    ]
    events, adapter = run(stream)
    assert ended_call_ids(events) == []
    assert response_endings(events) == [
        ("r1", "failed", "INTERNAL")
    ]
    assert "secret" not in " ".join(adapter.anomalies)


def test_prompt_blocked() -> None:
    events, _ = run([{"promptFeedback": {"blockReason": "SAFETY"}, "responseId": "r9"}])
    assert response_endings(events) == [("r9", "failed", "SAFETY")]


def test_usage_only_chunks_do_not_open_responses() -> None:
    events, _ = run([{"usageMetadata": {"totalTokenCount": 3}}])
    assert events == []


def test_close_is_idempotent_and_ends_the_stream() -> None:
    adapter = GeminiAdapter(CTX)
    adapter.feed(chunk(start("f")))
    first = adapter.close()
    assert [type(e) for e in first] == [ResponseEnded]
    assert adapter.close() == []
    assert adapter.feed(chunk(END, finish="STOP")) == []


# --------------------------------------------------------------------------- bad chunks


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        b"\xff\xfe",
        "[1, 2]",
        {"candidates": "x"},
        {"candidates": [1]},
        {"candidates": [{"content": {"parts": "x"}}]},
        {"candidates": [{"content": {"parts": [{"functionCall": "x"}]}}]},
        {"candidates": [{"content": {"parts": [fc(name="", args={})]}}]},
        {"candidates": [{"content": {"parts": [fc(name="f" * 200, args={})]}}]},
        {"candidates": [{"content": {"parts": [fc(name="f", args=[1])]}}]},
        {"candidates": [{"content": {"parts": [fc(name="f", id=7, args={})]}}]},
        {"candidates": [{"finishReason": 3}]},
        {"candidates": [], "responseId": 5},
    ],
)
def test_bad_chunks_raise_adapter_error_then_the_response_ends_inert(bad: Any) -> None:
    adapter = GeminiAdapter(CTX)
    opened = adapter.feed(chunk(start("f")))
    assert [type(e) for e in opened] == [CallStarted]
    with pytest.raises(AdapterError) as info:
        adapter.feed(bad)
    assert info.value.reason == "bad_chunk"
    assert "ffff" not in str(info.value)
    ending = adapter.close()
    assert [
        (e.status.value, e.reason.split(";")[0]) for e in ending if isinstance(e, ResponseEnded)
    ] == [("error", "adapter_error: bad_chunk")]


def test_after_a_bad_chunk_the_stream_is_refused() -> None:
    adapter = GeminiAdapter(CTX)
    adapter.feed(chunk(start("f")))
    with pytest.raises(AdapterError):
        adapter.feed("{")
    refused = adapter.feed(chunk(END, finish="STOP"))
    assert [type(e) for e in refused] == [ResponseEnded]
    assert adapter.feed(chunk(END, finish="STOP")) == []
    assert adapter.close() == []


JSON_ISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.floats(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        "candidates",
        "content",
        "parts",
        "functionCall",
        "name",
        "args",
        "partialArgs",
        "jsonPath",
        "stringValue",
        "numberValue",
        "willContinue",
        "finishReason",
        "responseId",
        "id",
        "index",
        "error",
        "promptFeedback",
        "blockReason",
        "text",
    ]
)
FUZZ = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.sampled_from(["$.a", "$.a[0]", "STOP"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=16,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(KEYS, FUZZ, max_size=4), max_size=6))
def test_fuzzed_chunks_raise_only_adapter_errors(stream: list[dict[str, Any]]) -> None:
    adapter = GeminiAdapter(CTX)
    for event in stream:
        with contextlib.suppress(AdapterError):
            adapter.feed(event)
    adapter.close()


# --------------------------------------------------------------------------- the property


# I-JSON text (RFC 7493 §2.1): no surrogates, no noncharacters, which the Assembler refuses
_NONCHARACTERS = [chr(cp) for cp in range(0xFDD0, 0xFDF0)] + [
    chr((plane << 16) | low) for plane in range(17) for low in (0xFFFE, 0xFFFF)
]
_IJSON_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters=_NONCHARACTERS)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)  # I-JSON safe range
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(_IJSON_CHARS, max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, min_size=1, max_size=4)
        | st.dictionaries(st.text(_IJSON_CHARS, max_size=6), inner, min_size=1, max_size=4)
    ),
    max_leaves=20,
)
OBJECTS = st.dictionaries(st.text(_IJSON_CHARS, max_size=6), VALUES, max_size=5)
_PLAIN_KEY = re.compile(r"[^.\[\]]+")


def _step(key: str) -> str:
    if _PLAIN_KEY.fullmatch(key):
        return "." + key
    return "['" + key.replace("\\", "\\\\").replace("'", "\\'") + "']"


def _leaves(value: Any, path: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, path + _step(k))]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, value)]


def _items(data: st.DataObject, path: str, value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        cuts = sorted(data.draw(st.lists(st.integers(0, len(value)), max_size=3)))
        pieces = [value[a:b] for a, b in zip([0, *cuts], [*cuts, len(value)], strict=True)]
        if data.draw(st.booleans()):
            pieces.append("")  # Vertex's habit: an empty piece closes the string
        return [item(path, p, more=True) for p in pieces[:-1]] + [item(path, pieces[-1])]
    if value is None:
        return [{"jsonPath": path, "nullValue": None}]
    kind = "boolValue" if isinstance(value, bool) else "numberValue"
    return [item(path, value, kind=kind)]


def _groups(data: st.DataObject, things: list[Any]) -> list[list[Any]]:
    groups: list[list[Any]] = []
    rest = list(things)
    while rest:
        size = data.draw(st.integers(1, 3))
        groups.append(rest[:size])
        rest = rest[size:]
    return groups


@settings(max_examples=200, deadline=None)
@given(OBJECTS, st.data())
def test_any_object_streamed_as_partial_args_parses_back(
    obj: dict[str, Any], data: st.DataObject
) -> None:
    items = [i for path, value in _leaves(obj, "$") for i in _items(data, path, value)]
    parts: list[dict[str, Any]] = [start("tool")]
    parts += [args_part(*group) for group in _groups(data, items)]
    explicit = data.draw(st.booleans())
    if explicit:
        parts.append(END)
    elif len(parts) > 1:
        parts[-1]["functionCall"].pop("willContinue")
    else:
        parts.append(fc())
    chunks = [chunk(*group) for group in _groups(data, parts)]
    chunks.append(chunk(finish="STOP"))
    events, adapter = run(chunks)
    text = "".join(e.delta for e in events if isinstance(e, CallDelta))
    assert orjson.loads(text) == obj
    assert calls(events) == [("tool", obj)]
    assert adapter.anomalies == []
    again, _ = run(copy.deepcopy(chunks))
    assert dumped(again) == dumped(events)


# --------------------------------------------------------------------------- response verdicts


@pytest.mark.parametrize("finish", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"])
def test_a_whole_call_in_a_chunk_with_a_voiding_finish_reason_gets_no_terminal(
    finish: str,
) -> None:
    events, _ = run([chunk(fc(name="transfer", args={"amount": 10}), finish=finish)])
    assert [type(e) for e in events] == [CallStarted, CallDelta, ResponseEnded]
    assert response_endings(events) == [("r1", "failed", finish)]
    assert calls(events) == []


def test_a_whole_call_then_a_later_safety_chunk_voids_the_response() -> None:
    """The call ended in its own chunk; the verdict travels in response.ended
    (test_verdicts_e2e: nothing dispatches)."""
    events, _ = run([chunk(fc(name="transfer", args={"amount": 10})), chunk(finish="SAFETY")])
    assert ended_call_ids(events) == ["r1:0"]
    assert response_endings(events) == [("r1", "failed", "SAFETY")]


@pytest.mark.parametrize(("alternative", "acting"), [(1, "g"), (None, None)])
def test_the_acting_candidate_is_configurable(alternative: int | None, acting: str | None) -> None:
    two = chunk(fc(name="f", args={}), finish="STOP")
    other = copy.deepcopy(two["candidates"][0])
    other["index"] = 1
    other["content"]["parts"] = [fc(name="g", args={})]
    two["candidates"].append(other)
    events = run_adapter(GeminiAdapter(CTX, alternative=alternative), [two])
    ended = [e.tool for e in events if isinstance(e, CallStarted) and e.call_id in
             ended_call_ids(events)]  # fmt: skip
    assert ended == ([acting] if acting else [])
    statuses = sorted(status for _, status, _ in response_endings(events))
    assert statuses == (["completed", "not_chosen"] if acting else ["not_chosen", "not_chosen"])


def test_an_unknown_chunk_is_ignored_and_counted() -> None:
    events, adapter = run([chunk(fc(name="f", args={"a": 1})), {"brandNew": {"x": "secret"}},
                           chunk(finish="STOP")])  # fmt: skip
    assert adapter.unknown_events == 1
    assert calls(events) == [("f", {"a": 1})]


def test_an_unknown_field_in_a_whole_function_call_withholds_it() -> None:
    events, adapter = run([chunk(fc(name="f", args={"a": 1}, brandNew=True), finish="STOP")])
    assert ended_call_ids(events) == []
    assert "unknown field in a functionCall: call withheld" in adapter.anomalies


def test_an_unknown_field_in_a_streamed_call_part_withholds_it() -> None:
    stream = [chunk(start("f")), chunk(fc(partialArgs=[item("$.a", "1")], willContinue=True,
                                          brandNew=1)), chunk(END), chunk(finish="STOP")]  # fmt: skip
    events, _ = run(stream)
    assert ended_call_ids(events) == []
    assert response_endings(events) == [("r1", "completed", "STOP")]


def test_an_unknown_field_in_a_partial_argument_fails_the_response() -> None:
    odd = {"jsonPath": "$.a", "structValue": {"x": 1}}
    events, _ = run([chunk(start("f")), chunk(args_part(odd)), chunk(END, finish="STOP")])
    assert ended_call_ids(events) == []
    assert response_endings(events) == [("r1", "error", "bad_partial_args")]


def test_whole_args_after_partials_that_agree_are_the_cross_check() -> None:
    stream = [chunk(start("f", id="c1")), chunk(args_part(item("$.a", "1"), more=False)),
              chunk(fc(name="f", id="c1", args={"a": "1"})), chunk(finish="STOP")]  # fmt: skip
    events, _ = run(stream)
    (ended,) = [e for e in events if isinstance(e, CallEnded)]
    assert ended.arguments == '{"a":"1"}'
    assert calls(events) == [("f", {"a": "1"})]


def test_whole_args_that_contradict_the_partials_before_the_terminal_fail_the_call() -> None:
    stream = [chunk(start("f", id="c1")), chunk(args_part(item("$.to", "alice"), more=False)),
              chunk(fc(name="f", id="c1", args={"to": "mallory"})), chunk(finish="STOP")]  # fmt: skip
    events, _ = run(stream)
    (ended,) = [e for e in events if isinstance(e, CallEnded)]
    assert ended.arguments == '{"to":"mallory"}'
    assert response_endings(events) == [("r1", "completed", "STOP")]
    assert calls(events) == []  # the Assembler's cross-check: arguments_mismatch


def test_whole_args_that_contradict_the_partials_after_the_terminal_end_the_response() -> None:
    stream = [chunk(start("f", id="c1")), chunk(args_part(item("$.to", "alice")), END),
              chunk(fc(name="f", id="c1", args={"to": "mallory"})), chunk(finish="STOP")]  # fmt: skip
    events, _ = run(stream)
    assert ended_call_ids(events) == ["c1"]
    assert response_endings(events) == [("r1", "error", "arguments_mismatch")]


# --------------------------------------------------------------------------- issue 29


def test_stop_is_completed_only_at_the_end_of_the_stream() -> None:
    adapter = GeminiAdapter(CTX)
    out = adapter.feed(chunk(fc(name="lookup", args={"q": 1}), finish="STOP"))
    assert not any(isinstance(e, ResponseEnded) for e in out)  # held: a later chunk may void it
    out += adapter.feed({"usageMetadata": {"totalTokenCount": 9}, "responseId": "r1"})
    out += adapter.close()
    assert calls(out) == [("lookup", {"q": 1})]
    assert response_endings(out) == [("r1", "completed", "STOP")]


@pytest.mark.parametrize(
    ("tail", "ending"),
    [
        (
            {"error": {"code": 503, "status": "UNAVAILABLE", "message": "x"}},
            ("failed", "UNAVAILABLE"),
        ),
        (chunk(finish="SAFETY"), ("failed", "SAFETY")),
        (chunk(fc(name="lookup", args={"q": 2})), ("error", "after_stop")),
        (chunk({"text": "more"}), ("error", "after_stop")),
        ({"responseId": "r1", "promptFeedback": {"blockReason": "SAFETY"}}, ("failed", "SAFETY")),
    ],
    ids=["error-chunk", "another-finish-reason", "call-after-stop", "text-after-stop", "blocked"],
)
def test_a_voiding_chunk_after_stop_voids_the_response(
    tail: dict[str, Any], ending: tuple[str, str]
) -> None:
    """Issue 29 item 1: the last chunk is Gemini's end; anything voiding before it voids."""
    out, _ = run([chunk(fc(name="transfer", args={"amount": 10}), finish="STOP"), tail])
    assert ended_call_ids(out) != []  # the call ended; it waits for the verdict
    assert calls(out) == []
    assert response_endings(out) == [("r1", *ending)]


def test_a_repeated_stop_and_usage_after_stop_keep_the_call() -> None:
    out, _ = run([chunk(fc(name="lookup", args={}), finish="STOP"), chunk(finish="STOP"),
                  {"responseId": "r1", "usageMetadata": {"totalTokenCount": 3}}])  # fmt: skip
    assert calls(out) == [("lookup", {})]


@pytest.mark.parametrize(
    "part",
    [
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1\n"}},
        {"toolCall": {"id": "t1", "toolType": "GOOGLE_SEARCH_WEB", "args": {"q": "x"}}},
        {"toolResponse": {"id": "t1", "toolType": "GOOGLE_SEARCH_WEB", "response": {}}},
    ],
    ids=["executableCode", "codeExecutionResult", "toolCall", "toolResponse"],
)
def test_built_in_tools_never_become_calls(part: dict[str, Any]) -> None:
    """Issue 29 item 2: Gemini's built-ins (code execution, server-side ``toolCall``) are run
    by Google; only ``functionCall`` parts are client calls (fail closed: the allowlist)."""
    out, _ = run([chunk(part, finish="STOP")])
    assert not any(isinstance(e, CallStarted) for e in out)
    assert response_endings(out) == [("r1", "completed", "STOP")]
