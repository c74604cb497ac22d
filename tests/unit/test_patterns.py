"""Tool schemas' patterns run in time linear in the argument (processor.core.patterns).

Before: jsonschema matched ``pattern`` and ``patternProperties`` with Python's backtracking
``re``, so ``^(\\w+\\s?)*$`` took 2.4 s on a 25-character argument, doubling with each character;
and the ``regex`` format compiled the argument (2 s for a hostile 540 KB pattern, kept in re's
cache, and ``RecursionError`` for deep nesting). The hostile runs below happen in a child
process with a limit of minutes, for arguments that took the old code longer than the age of
the universe: a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.errors import RegistryError
from processor.core.events import Ledger
from processor.core.formats import format_checker, is_regex
from processor.core.patterns import matches, schema_patterns, tool_validator_class
from processor.core.policy import Limits
from processor.core.registry import Registry
from processor.core.validation import Rejected, Validated, validate_call
from tests.unit.scenario import Call, Run, turn_started

# Classic catastrophic-backtracking patterns, each with an argument it backtracks on:
# (pattern, repeated text, repeats, tail).
HOSTILE: list[tuple[str, str, int, str]] = [
    (r"^(\w+\s?)*$", "a", 100_000, "!"),
    (r"^(a+)+$", "a", 100_000, "!"),
    (r"^(a|aa)+$", "a", 100_000, "!"),
    (r"^(.*a){20}$", "a", 100_000, "b"),
    (r"^([a-zA-Z0-9])(([\-.]|[_]+)?([a-zA-Z0-9]+))*(@)", "a", 50_000, "!"),
]


def tool(parameters: dict[str, Any], name: str = "t") -> dict[str, Any]:
    return {"tools": [{"name": name, "parameters": parameters}]}


def declaration(parameters: dict[str, Any]) -> Any:
    resolution = Registry.from_document(tool(parameters)).resolve("t")
    assert resolution is not None
    return resolution.declaration


def check(parameters: dict[str, Any], arguments: Any) -> Validated | Rejected:
    return validate_call(orjson.dumps(arguments), declaration(parameters), lambda: None)  # type: ignore[arg-type, return-value]


def test_hostile_arguments_against_backtracking_patterns_finish() -> None:
    code = f"""
        import orjson
        from processor.core.registry import Registry
        from processor.core.validation import Validated, validate_call
        hostile = {HOSTILE!r}
        for n, (pattern, unit, repeats, tail) in enumerate(hostile):
            text = unit * repeats + tail
            schemas = [
                {{"type": "object", "properties": {{"q": {{"type": "string", "pattern": pattern}}}}}},
                {{"type": "object", "patternProperties": {{pattern: {{"type": "integer"}}}}}},
                {{"type": "object", "patternProperties": {{pattern: {{}}}},
                  "additionalProperties": False}},
                {{"type": "object", "propertyNames": {{"pattern": pattern}}}},
            ]
            arguments = [{{"q": text}}, {{text: "x"}}, {{text: 1}}, {{text: 1}}]
            # the text never matches: the pattern refuses it, and a name it does not match is
            # neither typed (valid) nor allowed next to additionalProperties: false
            expected = [False, True, False, False]
            for schema, args, valid in zip(schemas, arguments, expected):
                registry = Registry.from_document({{"tools": [{{"name": "t", "parameters": schema}}]}})
                result = validate_call(orjson.dumps(args), registry.resolve("t").declaration, None)
                assert isinstance(result, Validated) is valid, (n, schema, result)
        print("done")
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "done"


def test_a_hostile_call_fails_schema_invalid_through_the_assembler() -> None:
    doc = tool(
        {
            "type": "object",
            "required": ["city"],
            "properties": {"city": {"type": "string", "pattern": r"^(\w+\s?)*$"}},
        },
        name="get_weather",
    )
    run = Run(assembler=Assembler(Registry.from_document(doc), Limits()))
    call = Call()
    hostile = orjson.dumps({"city": "a" * 5_000 + "!"}).decode()
    fine = Call(call_id="call_1", item_id="item-1")
    run.feed(turn_started(), *call.stream(hostile, pieces=50, complete=False))
    run.feed(*fine.stream('{"city": "Perth West"}'))
    assert run.ledger("call_0").terminal_reason == "schema_invalid"
    assert [d.call_id for d in run.dispatches] == ["call_1"]
    assert all(not isinstance(o, Ledger) or o.call_id in ("call_0", "call_1") for o in run.outputs)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"^(a)\1$", "backreference"),
        (r"^(?=.*\d).{8,}$", "lookahead"),
        (r"(?<!x)y", "lookbehind"),
        (r"a{2000}", "repetition over RE2's 1000"),
    ],
)
def test_a_registry_refuses_a_pattern_it_cannot_run_in_linear_time(pattern: str, why: str) -> None:
    nested = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "string", "pattern": pattern}}},
    }
    with pytest.raises(RegistryError) as raised:
        Registry.from_document(tool(nested, name="search"))
    message = str(raised.value.detail)
    assert "tool 'search'" in message, why
    assert "$.properties['items'].items.pattern" in message
    assert "linear time" in message and repr(pattern) in message
    keyed = {"type": "object", "patternProperties": {pattern: {"type": "string"}}}
    with pytest.raises(RegistryError, match=r"\$\.patternProperties"):
        Registry.from_document(tool(keyed))


def test_unevaluated_properties_with_pattern_properties_is_refused() -> None:
    schema = {
        "type": "object",
        "allOf": [{"patternProperties": {"^x": {"type": "string"}}}],
        "unevaluatedProperties": False,
    }
    with pytest.raises(
        RegistryError, match="unevaluatedProperties together with patternProperties"
    ):
        Registry.from_document(tool(schema))
    without = {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False}
    assert isinstance(check(without, {"a": 1}), Validated)
    assert isinstance(check(without, {"b": 1}), Rejected)


def test_patterns_in_data_are_not_patterns() -> None:
    data = {"pattern": "(?=lookahead)", "patternProperties": {"(?!x)": 1}}
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "default": data, "examples": [data], "const": data},
            "b": {"enum": [data]},
        },
    }
    assert list(schema_patterns(schema)) == []
    assert isinstance(check(schema, {"a": data}), Validated)


def test_the_keywords_keep_their_meaning() -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}, "n": {}},
        "patternProperties": {"^x-": {"type": "integer"}},
        "additionalProperties": False,
    }
    assert isinstance(check(schema, {"code": "ABC", "x-a": 1, "n": None}), Validated)
    for bad in ({"code": "abc"}, {"x-a": "1"}, {"y": 1}, {"code": "ABCD"}):
        result = check(schema, bad)
        assert isinstance(result, Rejected), bad
        assert result.reason.value == "schema_invalid"
    result = check(schema, {"code": "abc"})
    assert isinstance(result, Rejected) and "$.code: pattern" in result.validation_result
    typed = {
        "type": "object",
        "additionalProperties": {"type": "integer"},
        "patternProperties": {"^s": {"type": "string"}},
    }
    assert isinstance(check(typed, {"s1": "x", "n": 1}), Validated)
    assert isinstance(check(typed, {"s1": 1}), Rejected)
    assert isinstance(check(typed, {"n": "x"}), Rejected)
    names = {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}
    assert isinstance(check(names, {"abc": 1}), Validated)
    assert isinstance(check(names, {"aB": 1}), Rejected)


def test_the_dialect_is_ascii_like_ecma_262_without_the_u_flag() -> None:
    assert not matches(r"^\d+$", "١٢٣")  # Arabic-Indic digits: Python's re matched them
    assert matches(r"^\d+$", "123")
    assert matches(r"^\p{Greek}+$", "αβγ")  # Unicode classes, which Python's re refuses
    assert matches("é.", "xéy")  # positions are characters, not UTF-8 bytes
    assert not matches("^a", "\ud800a")  # text that is not Unicode matches nothing


def test_jsonschema_itself_is_left_alone() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    cls = jsonschema.validators.validator_for(
        {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    )
    assert cls is jsonschema.Draft202012Validator
    assert cls is not tool_validator_class()
    assert jsonschema.Draft202012Validator.VALIDATORS["pattern"].__module__.startswith("jsonschema")


PLAIN_PATTERNS = [r"^a+b*$", r"\d{2,3}", r"^[a-c]+(x|yz)?$", r"\bab", r"^\w+\s\w+$", "b.c", "^$"]


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.sampled_from(PLAIN_PATTERNS),
    text=st.text(alphabet="abcxyz01 _\t.é9", max_size=12),
)
def test_on_plain_patterns_re2_agrees_with_re_in_ascii_mode(pattern: str, text: str) -> None:
    assert matches(pattern, text) == (re.search(pattern, text, re.ASCII) is not None)


def test_the_regex_format_parses_without_compiling() -> None:
    checker = format_checker({"regex"})
    deep = "(" * 5_000 + ")" * 5_000  # re.compile raised RecursionError out of the check
    assert not checker.conforms(deep, "regex")
    re.purge()
    for i in range(50):
        assert checker.conforms(f"x{i}" + "(?:ab|cd)" * 2_000, "regex")
    cached = [*vars(re).get("_cache", {}), *vars(re).get("_cache2", {})]  # 3.12 has two
    assert cached == []  # nothing compiled, nothing kept


@pytest.mark.parametrize(
    "pattern",
    [r"^a+$", r"(?P<y>\d{4})-(?P=y)", r"(?i)abc", r"[^\]x]", r"a{2,}?", r"\u00e9", "(?x) a # c"],
)
def test_the_regex_format_accepts_what_re_compiles(pattern: str) -> None:
    re.compile(pattern)
    assert is_regex(pattern)


@pytest.mark.parametrize("pattern", ["a(b", "*a", "a{2,1}", "[b-a]", "(?P<1>x)", "\\", "(?<x"])
def test_the_regex_format_refuses_what_re_refuses(pattern: str) -> None:
    with pytest.raises(re.error):
        re.compile(pattern)
    assert not is_regex(pattern)
