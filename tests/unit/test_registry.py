"""The tool registry: loading, errors that name file/tool/reason, aliases, validators."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from processor.core.errors import RegistryError
from processor.core.registry import Registry, ValidationContext, expanded_size
from processor.core.validation import Rejected, Validated, validate_call
from processor.registry_file import load_registry

TOOL = {"name": "t", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}


def no_thirteen(arguments: Mapping[str, Any], ctx: ValidationContext) -> Sequence[str]:
    return ["n must not be 13"] if arguments.get("n") == 13 else []


def test_yaml_and_json_files_load(tmp_path: Path) -> None:
    (tmp_path / "tools.yaml").write_text("tools:\n  - name: t\n    parameters: {type: object}\n")
    (tmp_path / "tools.json").write_text(json.dumps({"tools": [TOOL]}))
    assert load_registry(tmp_path / "tools.yaml").resolve("t") is not None
    assert load_registry(tmp_path / "tools.json").resolve("t") is not None


def test_example_registry_loads() -> None:
    registry = load_registry(Path(__file__).parents[2] / "examples" / "tools.yaml")
    assert {t.name for t in registry.tools} >= {"get_weather", "book_slot"}


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({}, "top-level 'tools' list"),
        ({"tools": [{"parameters": {}}]}, "'name'"),
        ({"tools": [{"name": "x"}]}, "tool 'x': 'parameters'"),
        ({"tools": [{"name": "x", "parameters": {"type": "array"}}]}, "describe an object"),
        (
            {"tools": [{"name": "x", "parameters": {"type": "object", "minProperties": -1}}]},
            "invalid JSON Schema",
        ),
        ({"tools": [{"name": "x", "parameters": {}, "colour": 1}]}, "unknown keys ['colour']"),
        ({"tools": [TOOL, TOOL]}, "declared twice"),
        ({"tools": [TOOL, {**TOOL, "name": "u", "aliases": ["t"]}]}, "declared twice"),
        ({"tools": [{**TOOL, "limits": {"max_bytes": 0}}]}, "limits.max_bytes"),
        (
            {"tools": [{**TOOL, "validators": ["nope.nothing:here"]}]},
            "validator 'nope.nothing:here'",
        ),
    ],
)
def test_load_errors_name_file_tool_and_reason(
    tmp_path: Path, doc: dict[str, Any], fragment: str
) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    assert str(path) in str(info.value)
    assert fragment in str(info.value)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="cannot read"):
        load_registry(tmp_path / "missing.yaml")


def test_alias_is_exact_never_a_guess() -> None:
    registry = Registry.from_document({"tools": [{**TOOL, "aliases": ["old_t"]}]})
    resolution = registry.resolve("old_t")
    assert resolution is not None and resolution.declaration.name == "t"
    assert resolution.alias_used == "old_t"
    assert registry.resolve("T") is None and registry.resolve("old-t") is None


def test_business_validator_by_dotted_path(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    tool = {**TOOL, "validators": ["tests.unit.test_registry:no_thirteen"]}
    path.write_text(json.dumps({"tools": [tool]}))
    declaration = load_registry(path).tools[0]
    ctx = ValidationContext(tenant="a", turn_id="u", actor="x", tool="t", tool_version="1")
    assert isinstance(validate_call(b'{"n": 12}', declaration, ctx), Validated)
    rejected = validate_call(b'{"n": 13}', declaration, ctx)
    assert isinstance(rejected, Rejected) and rejected.reason.value == "business_invalid"


def test_a_validator_that_raises_fails_the_call_not_the_worker() -> None:
    def broken(arguments: Mapping[str, Any], ctx: ValidationContext) -> Sequence[str]:
        raise RuntimeError("boom")

    registry = Registry.from_document(
        {"tools": [{**TOOL, "validators": ["x"]}]}, resolve_validator=lambda _path: broken
    )
    ctx = ValidationContext(tenant="a", turn_id="u", actor="x", tool="t", tool_version="1")
    rejected = validate_call(b"{}", registry.tools[0], ctx)
    assert isinstance(rejected, Rejected)
    assert "raised RuntimeError" in rejected.validation_result


def test_schema_errors_do_not_quote_values() -> None:
    registry = Registry.from_document({"tools": [TOOL]})
    ctx = ValidationContext(tenant="a", turn_id="u", actor="x", tool="t", tool_version="1")
    rejected = validate_call(b'{"n": "LEAK-ME"}', registry.tools[0], ctx)
    assert isinstance(rejected, Rejected)
    assert "LEAK-ME" not in rejected.validation_result and "$.n: type" in rejected.validation_result


# -------------------------------------------------------------- tools files that never load

LAUGHS = """\
a: &a {type: object, properties: {x: {type: string}}}
b: &b {allOf: [*a, *a, *a, *a, *a, *a, *a, *a, *a]}
c: &c {allOf: [*b, *b, *b, *b, *b, *b, *b, *b, *b]}
d: &d {allOf: [*c, *c, *c, *c, *c, *c, *c, *c, *c]}
e: &e {allOf: [*d, *d, *d, *d, *d, *d, *d, *d, *d]}
f: &f {allOf: [*e, *e, *e, *e, *e, *e, *e, *e, *e]}
g: &g {allOf: [*f, *f, *f, *f, *f, *f, *f, *f, *f]}
tools:
  - name: boom
    parameters: {type: object, properties: {p: *g}}
"""


def test_a_tools_file_of_nested_yaml_aliases_is_refused_at_once(tmp_path: Path) -> None:
    """Ten lines of nested aliases make a schema of millions of values: the load ran for
    minutes (over 60 s when it was stopped) walking them, and every call would have too. In a
    child process with a time limit, so a regression fails instead of hanging the suite."""
    path = tmp_path / "tools.yaml"
    path.write_text(LAUGHS)
    code = (
        "import sys\nfrom processor.core.errors import RegistryError\n"
        "from processor.registry_file import load_registry\n"
        f"try:\n    load_registry({str(path)!r})\nexcept RegistryError as exc:\n"
        "    print(exc.detail)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tool 'boom': 'parameters' holds more than 50,000 JSON values" in result.stdout
    assert "$defs" in result.stdout  # says what to do instead


def test_a_yaml_alias_inside_itself_and_a_schema_too_deep_are_refused_clearly(
    tmp_path: Path,
) -> None:
    """Each was an internal error (RecursionError, "please report it") out of the CLI."""
    path = tmp_path / "tools.yaml"
    path.write_text(
        "a: &a {type: object, properties: {x: *a}}\ntools: [{name: t, parameters: *a}]\n"
    )
    with pytest.raises(RegistryError, match="'parameters' contains itself"):
        load_registry(path)
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(400):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(RegistryError, match="nested deeper than its checks can walk"):
        Registry.from_document({"tools": [{"name": "t", "parameters": deep}]})


def test_expanded_size_counts_what_aliases_repeat() -> None:
    shared = {"type": "string"}
    assert expanded_size({"a": shared, "b": shared}, 100) == 5
    assert expanded_size([shared] * 10, 100) == 21
    assert expanded_size([[shared] * 10] * 10, 50) > 50  # stops past the limit
    assert expanded_size("x", 1) == 1
