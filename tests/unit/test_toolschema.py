"""The validator of tool schemas stays linear in the argument (processor.core.toolschema).

Before: jsonschema matched ``pattern`` and ``patternProperties`` with Python's backtracking
``re``, so ``^(\\w+\\s?)*$`` took 2.4 s on a 25-character argument, doubling with each
character; ``uniqueItems`` compared every pair of objects (18 s for 4,000); ``unevaluatedItems``
and ``unevaluatedProperties`` searched a list for each item (quadratic); and the ``regex``
format compiled the argument (2 s for a hostile 540 KB pattern, kept in re's cache, and
``RecursionError`` for deep nesting). The hostile runs below happen in a child process with a
limit of minutes, for arguments that took the old code hours or longer than the age of the
universe: a regression fails the test instead of hanging the suite. The replaced keywords are
compared with jsonschema's own on generated schemas and instances.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import textwrap
from typing import Any, ClassVar

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.errors import RegistryError
from processor.core.events import Ledger
from processor.core.formats import format_checker, is_regex
from processor.core.policy import Limits
from processor.core.registry import Registry, ValidationContext
from processor.core.toolschema import matches, schema_patterns, tool_validator_class
from processor.core.validation import Rejected, Validated, validate_call
from tests.fuzz.schemas import reference_class
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
    child(code)


def child(code: str) -> None:
    """Run ``code`` in a fresh interpreter, which must print ``done`` within five minutes."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "done"


def test_hostile_arrays_and_objects_finish() -> None:
    child(
        """
        import orjson
        from processor.core.registry import Registry
        from processor.core.validation import Validated, validate_call

        def valid(schema, arguments):
            registry = Registry.from_document({"tools": [{"name": "t", "parameters": schema}]})
            result = validate_call(orjson.dumps(arguments), registry.resolve("t").declaration, None)
            return isinstance(result, Validated)

        unique = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}
        objects = [{"a": i} for i in range(100_000)]  # 1 MB: jsonschema compared every pair
        mixed = [i if i % 2 else str(i) for i in range(100_000)]  # numbers and strings
        assert valid(unique, {"xs": objects}) and valid(unique, {"xs": mixed})
        assert not valid(unique, {"xs": objects + [{"a": 99_999.0}]})  # 99999 == 99999.0
        assert not valid(unique, {"xs": mixed + [1]})
        items = {"type": "object", "properties": {"xs": {
            "type": "array", "items": {"type": "integer"}, "unevaluatedItems": False}}}
        assert valid(items, {"xs": list(range(200_000))})
        prefixed = {"type": "object", "properties": {"xs": {
            "type": "array", "prefixItems": [{}], "unevaluatedItems": False}}}
        assert not valid(prefixed, {"xs": list(range(200_000))})
        named = {"type": "object", "allOf": [{"additionalProperties": {"type": "integer"}}],
                 "unevaluatedProperties": False}
        assert valid(named, {f"k{i}": i for i in range(80_000)})
        assert not valid(named, {**{f"k{i}": i for i in range(80_000)}, "s": "x"})
        print("done")
        """
    )


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
    letters = {"type": "object", "properties": {"a": {"pattern": r"^\p{L}+$"}}}
    assert isinstance(check(letters, {"a": "éλж"}), Validated)  # re refused \p{L} at load
    assert isinstance(check(letters, {"a": "a1"}), Rejected)
    with pytest.raises(RegistryError, match=r"pattern '\[' is not a valid regex \(missing \]"):
        Registry.from_document(tool({"type": "object", "properties": {"a": {"pattern": "["}}}))
    assert matches("é.", "xéy")  # positions are characters, not UTF-8 bytes
    assert not matches("^a", "\ud800a")  # text that is not Unicode matches nothing


def test_jsonschema_itself_is_left_alone() -> None:
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


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 2)
    | st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0])
    | st.text(alphabet="ab1 ", max_size=3),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(alphabet="abx-1", max_size=3), children, max_size=4),
    max_leaves=12,
)

# Schemas built on the replaced keywords, in the company of the keywords they depend on.
KEYWORD_SCHEMAS: list[dict[str, Any]] = [
    {"uniqueItems": True},
    {"items": {"uniqueItems": True}, "uniqueItems": True},
    {"prefixItems": [{"type": "integer"}], "unevaluatedItems": False},
    {"prefixItems": [{}], "unevaluatedItems": {"type": "string"}},
    {"contains": {"type": "string"}, "unevaluatedItems": False},
    {"allOf": [{"prefixItems": [{}, {}]}], "unevaluatedItems": {"type": "boolean"}},
    {"if": {"prefixItems": [{"type": "null"}]}, "then": {"prefixItems": [{}, {}]},
     "unevaluatedItems": False},
    {"properties": {"a": {}}, "unevaluatedProperties": False},
    {"properties": {"a": {}}, "unevaluatedProperties": {"type": "integer"}},
    {"allOf": [{"properties": {"b": {}}}], "anyOf": [{"properties": {"a": {}}}],
     "unevaluatedProperties": False},
    {"dependentSchemas": {"a": {"properties": {"b": {}}}}, "properties": {"a": {}},
     "unevaluatedProperties": False},
    {"additionalProperties": {"type": "string"}, "unevaluatedProperties": False},
    {"pattern": "^a"},
    {"pattern": r"\d"},
    {"patternProperties": {"^a": {"type": "integer"}, "-": {"type": "array"}}},
    {"patternProperties": {"^x": {}}, "additionalProperties": False},
    {"patternProperties": {"b$": {"uniqueItems": True}}, "properties": {"a": {}},
     "additionalProperties": {"type": "null"}},
    {"propertyNames": {"pattern": "^[ab]*$"}},
    {"items": {"properties": {"a": {}}, "unevaluatedProperties": False}, "uniqueItems": True},
]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(schema=st.sampled_from(KEYWORD_SCHEMAS), instance=JSON_VALUES)
def test_the_replaced_keywords_decide_as_jsonschema_does(schema: dict[str, Any], instance: Any) -> None:
    theirs = reference_class()(schema)  # jsonschema's, uniqueItems pair by pair (below)
    ours = tool_validator_class()(schema)

    def errors(validator: Any) -> list[tuple[str, str]]:
        return sorted((e.json_path, e.validator) for e in validator.iter_errors(instance))

    assert errors(ours) == errors(theirs)


def test_unique_items_finds_duplicates_that_jsonschema_misses() -> None:
    """jsonschema 4.26 sorts the items and compares neighbours; Python's order holds ``0`` and
    ``false`` equal, so in ``[[0], [false], [0]]`` the two ``[0]`` never meet and the array
    passed. Found by the schemas fuzz target (seed 20261207, case 62636). The registry hashes
    a canonical form and finds them; the reference of the comparisons above is pair by pair."""
    schema = {"type": "object", "properties": {"u": {"uniqueItems": True}}}
    for items in ([[0], [False], [0]], [[0, "a"], [False, "a"], [0, "a"]], [[1.0], [True], [1]]):
        assert jsonschema.Draft202012Validator(schema).is_valid({"u": items})  # its defect
        assert isinstance(check(schema, {"u": items}), Rejected), items
        assert not reference_class()(schema).is_valid({"u": items})
    assert isinstance(check(schema, {"u": [[0], [False]]}), Validated)


@pytest.mark.parametrize(
    "items",
    [
        [True, 1],
        [False, 0],
        [1, 1.0],
        [0, -0.0],
        [None, False],
        ["1", 1],
        [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
        [{"a": [True]}, {"a": [1]}],
        [{"a": [1]}, {"a": [1.0]}],
        [[1, 2], [2, 1]],
        [[], {}],
        [{"a": None}, {}],
        [9007199254740993, 9007199254740992.0],  # 2**53 + 1 is not the float next to it
    ],
)
def test_unique_items_uses_json_equality(items: list[Any]) -> None:
    schema = {"uniqueItems": True}
    expected = jsonschema.Draft202012Validator(schema).is_valid(items)
    assert tool_validator_class()(schema).is_valid(items) is expected
    assert tool_validator_class()(schema).is_valid(list(reversed(items))) is expected


def test_a_validator_that_raises_fails_the_call_closed() -> None:
    """The core never raises on input: an exception out of schema validation (a format
    checker's bug, a keyword's) is a schema_invalid call, as a business validator's is."""

    class Broken:
        schema: ClassVar[dict[str, Any]] = {}

        def iter_errors(self, instance: Any) -> Any:
            raise RecursionError("deep")

    broken = dataclasses.replace(declaration({"type": "object"}), validator=Broken())
    result = validate_call(b'{"a": 1}', broken, None)  # type: ignore[arg-type]
    assert isinstance(result, Rejected) and result.reason.value == "schema_invalid"
    assert "nested deeper than the recursion limit" in result.validation_result


def test_the_registry_keeps_the_quick_check_with_its_own_validator() -> None:
    """``quick_check`` is set only for the registry's own validator class (anything customised
    always runs jsonschema): the class change must not turn the fast path off."""
    plain = declaration({"type": "object", "properties": {"a": {"type": "string"}}})
    assert type(plain.validator) is tool_validator_class()
    assert plain.quick_check is not None and plain.quick_check({"a": "x"})
    assert declaration({"type": "object", "properties": {"a": {"pattern": "^x"}}}).quick_check is None


@pytest.mark.parametrize("ref", ["https://example.com/s.json", "#/$defs/missing", "other.json"])
def test_a_ref_that_resolves_nowhere_is_refused_at_load(ref: str) -> None:
    """It loaded before, and then every call of the tool raised out of validation."""
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
    with pytest.raises(RegistryError, match=r"\$ref that resolves nowhere: \$\.properties\['a'\]"):
        Registry.from_document(tool(schema))


@pytest.mark.parametrize(
    ("schema", "place"),
    [
        ({"properties": {"x": {"$id": "urn:w", "$ref": "#/$defs/missing"}}}, "$.properties['x']"),
        ({"$id": "https://tools.test/a/t.json",
          "properties": {"x": {"$id": "sub/x.json", "properties": {"y": {"$ref": "nothere.json"}}}}},
         "$.properties['x'].properties['y']"),
    ],
)  # fmt: skip
def test_a_dangling_ref_below_an_id_is_refused_at_load(schema: dict[str, Any], place: str) -> None:
    """Below an ``$id`` the check was skipped (the references resolve against it), so such a
    tool loaded and failed every call. Each reference is now made absolute first."""
    with pytest.raises(RegistryError, match=re.escape(f"resolves nowhere: {place}.$ref")):
        Registry.from_document(tool({"type": "object", **schema}))
    relative = {"$id": "https://tools.test/a/t.json", "type": "object",
                "properties": {"x": {"$id": "sub/x.json", "$defs": {"s": {"type": "string"}},
                                     "properties": {"y": {"$ref": "x.json#/$defs/s"},
                                                    "z": {"$ref": "../t.json#/properties/x"}}}}}  # fmt: skip
    assert isinstance(check(relative, {"x": {"y": "a", "z": {}}}), Validated)
    assert isinstance(check(relative, {"x": {"y": 1}}), Rejected)


@pytest.mark.parametrize(
    "schema",
    [
        {"$defs": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/s"}}},
        {"$id": "urn:example:tool", "$defs": {"s": {"type": "string"}},
         "properties": {"a": {"$ref": "urn:example:tool#/$defs/s"}, "b": {"$ref": "#/$defs/s"}}},
        {"$defs": {"s": {"$anchor": "str", "type": "string"}}, "properties": {"a": {"$ref": "#str"}}},
        {"properties": {"a": {"type": "string"}, "b": {"$ref": "#/properties/a"}}},
        {"properties": {"next": {"$ref": "#"}}},  # recursive
    ],
)  # fmt: skip
def test_refs_that_resolve_still_load_and_validate(schema: dict[str, Any]) -> None:
    full = {"type": "object", **schema}
    assert isinstance(check(full, {}), Validated)
    if "a" in full.get("properties", {}):
        assert isinstance(check(full, {"a": "x"}), Validated)
        assert isinstance(check(full, {"a": 1}), Rejected)


# ------------------------------------------------------------- $ref cycles and deep arguments

ENDLESS: list[tuple[dict[str, Any], str]] = [
    ({"$defs": {"d": {"$ref": "#/$defs/d"}}, "properties": {"x": {"$ref": "#/$defs/d"}}},
     r"\$\.\$defs\['d'\]\.\$ref '#/\$defs/d'"),
    ({"allOf": [{"$ref": "#"}]}, r"\$\.allOf\[0\]\.\$ref '#'"),
    ({"$defs": {"a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/b"}]},
                "b": {"oneOf": [{"$ref": "#/$defs/a"}]}},
      "properties": {"x": {"$ref": "#/$defs/a"}}}, r"\$\.\$defs\['a'\]\.anyOf\[1\]\.\$ref"),
    ({"$defs": {"n": {"$anchor": "node", "not": {"$ref": "#node"}}},
      "properties": {"x": {"$ref": "#node"}}}, r"\.not\.\$ref '#node'"),
    ({"$defs": {"a/b": {"if": {"type": "object"}, "then": {"$ref": "#/$defs/a~1b"}}},
      "properties": {"x": {"$ref": "#/$defs/a~1b"}}}, r"\.then\.\$ref '#/\$defs/a~1b'"),
    ({"dependentSchemas": {"k": {"$ref": "#"}}}, r"\$\.dependentSchemas\['k'\]\.\$ref '#'"),
    # below an $id, references resolve against it (these loaded: the check skipped them)
    ({"properties": {"x": {"$id": "urn:w", "$defs": {"d": {"allOf": [{"$ref": "#/$defs/d"}]}},
                           "$ref": "#/$defs/d"}}}, r"\['d'\]\.allOf\[0\]\.\$ref '#/\$defs/d'"),
    ({"$id": "https://tools.test/t.json",
      "properties": {"x": {"$id": "x.json", "anyOf": [{"$ref": "https://tools.test/x.json"}]}}},
     r"\$\.properties\['x'\]\.anyOf\[0\]\.\$ref"),
    ({"$defs": {"n": {"$dynamicAnchor": "node", "anyOf": [{"$dynamicRef": "#node"}]}},
      "properties": {"x": {"$ref": "#/$defs/n"}}}, r"\.anyOf\[0\]\.\$dynamicRef '#node'"),
]  # fmt: skip


@pytest.mark.parametrize(("schema", "place"), ENDLESS)
def test_a_ref_cycle_that_never_descends_is_refused_at_load(
    schema: dict[str, Any], place: str
) -> None:
    """Each validates a value against itself for ever: jsonschema recursed to the limit on every
    value that reaches the cycle, and the tool loaded (or was refused as "resolves nowhere")."""
    full = {"type": "object", **schema}
    with pytest.raises(RegistryError, match=r"leads back to itself without descending.*" + place):
        Registry.from_document(tool(full))
    reference = jsonschema.Draft202012Validator(full)
    probes = [{}, {"k": 1, "x": {}}, {"x": 1}]
    assert any(_recurses(reference, value) for value in probes)  # the refusal is not a guess


def _recurses(validator: Any, value: Any) -> bool:
    try:
        list(validator.iter_errors(value))
    except RecursionError:
        return True
    except BaseException as exc:  # rpds's PanicException, when the limit strikes inside it
        if type(exc).__name__ != "PanicException":
            raise
        return True
    return False


class Panic(BaseException):
    """Stands for pyo3's PanicException (a Rust extension's panic): a BaseException."""


def test_a_validator_that_panics_fails_the_call_closed() -> None:
    """A $ref cycle (before it was refused at load) made jsonschema's references panic in rpds
    in 61 of 300 stack depths: pyo3's PanicException, a BaseException, went through
    ``except Exception`` and out of the core, into the worker. Now any failure of a
    validator fails its call; only KeyboardInterrupt, SystemExit and GeneratorExit pass."""

    class Panicking:
        def __init__(self, raised: BaseException) -> None:
            self.raised = raised

        def iter_errors(self, instance: Any) -> Any:
            raise self.raised

    plain = declaration({"type": "object"})
    panics = dataclasses.replace(plain, validator=Panicking(Panic("x")))
    result = validate_call(b'{"a": 1}', panics, None)
    assert isinstance(result, Rejected) and result.reason.value == "schema_invalid"
    assert "validator raised Panic" in result.validation_result
    interrupted = dataclasses.replace(plain, validator=Panicking(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        validate_call(b'{"a": 1}', interrupted, None)

    def business(arguments: Any, ctx: Any) -> list[str]:
        raise Panic("y")

    checked = dataclasses.replace(plain, business_validators=(("m:f", business),))
    ctx = ValidationContext(tenant="t", turn_id="u", actor="a", tool="t", tool_version="1")
    result = validate_call(b'{"a": 1}', checked, ctx)
    assert isinstance(result, Rejected) and result.reason.value == "business_invalid"
    assert "m:f: raised Panic" in result.validation_result


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"next": {"$ref": "#"}}},
        {"$defs": {"n": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/n"}}]}},
         "properties": {"tree": {"$ref": "#/$defs/n"}}},
        {"additionalProperties": {"allOf": [{"$ref": "#"}]}},
        {"$defs": {"n": {"oneOf": [{"type": "null"}, {"prefixItems": [{"$ref": "#/$defs/n"}]}]}},
         "properties": {"p": {"$ref": "#/$defs/n"}}},
        {"properties": {"c": {"contains": {"$ref": "#/properties/c"}}}},
        {"$dynamicAnchor": "node", "properties": {"next": {"$dynamicRef": "#node"}}},
    ],
)  # fmt: skip
def test_recursive_schemas_that_descend_still_load(schema: dict[str, Any]) -> None:
    full = {"type": "object", **schema}
    Registry.from_document(tool(full))
    nested = {"next": {"next": {}}, "tree": [1, [2, [3]]], "p": [[None]], "c": [[[]]], "z": {}}
    assert isinstance(check(full, nested), Validated) == jsonschema.Draft202012Validator(
        full
    ).is_valid(nested)


def test_a_valid_argument_at_the_depth_limit_validates_in_the_worker_and_replay() -> None:
    """A recursive schema with eight ``allOf`` around each level needs about 1,270 frames for
    an argument 63 deep (the scanner allows 64): past CPython's default limit of 1,000, so
    the call failed ``schema_invalid``. ``allow_deep_validation`` (called by the worker and
    ``replay``) raises the limit; the same call then dispatches. In a child process, so this
    process keeps its limit."""
    code = """
        import sys
        import orjson
        from processor.core.registry import Registry
        from processor.core.validation import Rejected, Validated, validate_call
        from processor.cli.recursion import allow_deep_validation
        inner = {"type": "object", "additionalProperties": {"$ref": "#/$defs/n"}}
        for _ in range(8):
            inner = {"allOf": [inner]}
        schema = {"type": "object", "$defs": {"n": inner}, "$ref": "#/$defs/n"}
        tool = Registry.from_document({"tools": [{"name": "t", "parameters": schema}]})
        declaration = tool.resolve("t").declaration
        value = {}
        for _ in range(62):
            value = {"a": value}
        text = orjson.dumps(value)
        before = validate_call(text, declaration, None)
        assert isinstance(before, Rejected), before
        assert "nested deeper than the recursion limit" in before.validation_result, before
        limit = allow_deep_validation()
        assert limit >= 2_000 and sys.getrecursionlimit() == limit, limit
        assert allow_deep_validation() == limit  # never lowered, idempotent
        after = validate_call(text, declaration, None)
        assert isinstance(after, Validated), after
        print("done")
    """
    child(code)
