"""`processor replay` as a black box: JSON lines in, JSON lines with a `kind` out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson

from processor.core.events import encode
from tests.unit.replay_run import ROOT, replay, scenario
from tests.unit.scenario import Call, turn_started


def test_dispatch_lines_carry_the_contract_fields() -> None:
    out, _ = replay(scenario())
    [dispatch] = [o for o in out if o["kind"] == "dispatch"]
    assert dispatch["tool"] == "get_weather"
    assert dispatch["arguments"] == {"city": "Paris"}
    assert (dispatch["call_id"], dispatch["turn_id"]) == ("call_0", "turn-1")
    assert isinstance(dispatch["dispatch_id"], str) and dispatch["dispatch_id"]
    kinds = {o["kind"] for o in out}
    assert kinds == {"dispatch", "status", "ledger", "audit"}


def test_bad_lines_become_dead_letters_and_replay_continues() -> None:
    lines = scenario()
    lines.insert(3, b"{this is not json")
    lines.insert(5, b'{"v": 9, "type": "call.delta"}')
    out, _ = replay(lines)
    dead = [o for o in out if o["kind"] == "deadletter"]
    assert [(d["reason"], d["offset"]) for d in dead] == [
        ("undecodable", 4),
        ("unknown_version", 6),
    ]
    assert len([o for o in out if o["kind"] == "dispatch"]) == 1


def test_replay_is_deterministic() -> None:
    first, _ = replay(scenario())
    second, _ = replay(scenario())
    assert first == second


def test_summary_goes_to_stderr() -> None:
    _, err = replay(scenario(), "--summary")
    assert "dispatch=1" in err


def test_a_recursive_schema_validates_an_argument_at_the_depth_limit(tmp_path: Path) -> None:
    """Eight ``allOf`` around each level of a recursive schema need about 1,270 frames for an
    argument 63 deep: past CPython's default recursion limit. ``replay`` (like the worker)
    raises the limit at start, so the valid call dispatches instead of failing
    ``schema_invalid`` (tests/unit/test_toolschema.py shows the failure without it)."""
    inner: dict[str, object] = {"type": "object", "additionalProperties": {"$ref": "#/$defs/n"}}
    for _ in range(8):
        inner = {"allOf": [inner]}
    schema = {"type": "object", "$defs": {"n": inner}, "$ref": "#/$defs/n"}
    value: dict[str, object] = {}
    for _ in range(62):
        value = {"a": value}
    assert dispatched_tools(tmp_path, "tree", schema, orjson.dumps(value).decode()) == ["tree"]


def test_a_deep_schema_loads_in_replay(tmp_path: Path) -> None:
    """jsonschema's check of a schema at load takes about seven frames for each level: a schema
    150 properties deep passed CPython's default limit, and ``replay`` stopped with an internal
    error. It raises the limit before it loads the tools (as the worker does)."""
    schema: dict[str, object] = {"type": "object"}
    for _ in range(150):
        schema = {"type": "object", "properties": {"a": schema}}
    assert dispatched_tools(tmp_path, "deep", schema, '{"a": {"a": {}}}') == ["deep"]


def dispatched_tools(folder: Path, name: str, schema: dict[str, object], text: str) -> list[str]:
    """``replay`` of one call of a tool ``name`` with ``schema`` (a tools file written with the
    standard library's JSON writer, which takes deep nesting): the tools it dispatched."""
    tools = folder / "tools.json"
    tools.write_text(json.dumps({"tools": [{"name": name, "parameters": schema}]}))
    events = [turn_started(), *Call().stream(text, 7, tool=name)]
    result = subprocess.run(
        [sys.executable, "-m", "processor.cli", "replay", "--tools", str(tools), "-"],
        input=b"\n".join(encode(e) for e in events) + b"\n",
        capture_output=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return [
        o["tool"] for o in map(orjson.loads, result.stdout.splitlines()) if o["kind"] == "dispatch"
    ]
