"""Fuzz target ``schemas``: random tool schemas and arguments, the registry against jsonschema.

The registry validates arguments with its own validator (:mod:`processor.core.toolschema`:
Draft 2020-12 with the keywords whose cost an argument sets replaced), after a compiled
"certainly valid" shortcut (:mod:`processor.core.fastschema`), and with its own format checks
(:mod:`processor.core.formats`). Each is tested against jsonschema on schemas written by hand;
this target writes the schemas: a random Draft 2020-12 schema (nested keywords of every family,
``$ref`` into ``$defs``, boolean schemas, patterns, formats) and random arguments, half of them
built to satisfy it and then perhaps mutated. The reference is jsonschema's own
``Draft202012Validator`` with the format checks of its own libraries, and ``uniqueItems``
compared pair by pair (:func:`reference_class`: jsonschema's own misses duplicates).

An escape is any of:

* the registry refuses a schema jsonschema accepts (the generator never writes the refusals
  the registry documents: RE2-incompatible patterns, ``unevaluatedProperties`` next to
  ``patternProperties``, a dangling ``$ref``);
* the registry's validator reports other errors (by JSON path and keyword) than jsonschema's;
* the shortcut calls an argument certainly valid that jsonschema finds invalid;
* ``validate_call`` (parse, shortcut, validator) decides otherwise than jsonschema, or raises.

Where the dialects differ by design, the reference is given the other dialect's spelling of the
same thing, never a weaker check: a pattern is generated as a small syntax tree and written out
twice, for RE2 (``$`` is the end of the text, as in ECMA-262) and for Python's ``re`` (``\\Z``;
``re``'s ``$`` also matches before a final newline). ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are not
generated (RE2's are ASCII, ``re``'s Unicode; documented). The ``regex`` format's reference is
``re.compile``, except that a variable-width lookbehind, which ECMA-262 allows and ``re``'s
compiler refuses, is valid. ``iri`` and ``iri-reference`` are not compared here: their checks
differ from ``rfc3987_syntax`` where it departs from RFC 3987 (tests/unit/test_formats.py).
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from typing import Any

import orjson

from processor.core.formats import _full_format_module, jsonschema_module
from processor.core.registry import Registry, RegistryError
from processor.core.states import TerminalReason
from processor.core.validation import Rejected, Validated, validate_call

MAX_SAFE = 2**53 - 1


class SchemaEscape(AssertionError):
    """The registry decided otherwise than jsonschema."""


# ================================================================= patterns, in two dialects


@dataclass(frozen=True)
class Pattern:
    """One generated pattern written for RE2 (the schema's) and for Python's ``re`` (the
    reference's)."""

    re2: str
    python: str


_ATOMS = ["a", "b", "c", "x", "0", "1", "é", "😀", ".", "[a-c]", "[^a]", "[0-9]", "\\.", " ",
          "-", "_", "[A-Z]", "\\-"]  # fmt: skip


def _pattern_node(rng: random.Random, depth: int, budget: list[int]) -> tuple[str, bool]:
    """A pattern node, and whether it repeats anything (holds a quantifier or alternation).

    A node that repeats something is never quantified again, and a pattern holds at most
    ``budget[0]`` quantifiers: nested quantifiers (the harness hung on ``(?:(?:-?)+…)*``), or
    many in a row, send the reference, Python's backtracking ``re``, into exponential or
    high-polynomial time on a 64-character argument, which is what RE2 is there to avoid."""
    roll = rng.random()
    if depth > 2 or roll < 0.5:
        node, repeats = rng.choice(_ATOMS), False
    elif roll < 0.75:
        parts = [_pattern_node(rng, depth + 1, budget) for _ in range(rng.randint(1, 3))]
        node, repeats = "".join(p for p, _ in parts), any(r for _, r in parts)
    elif roll < 0.9:
        parts = [_pattern_node(rng, depth + 1, budget) for _ in range(2)]
        node, repeats = "(" + "|".join(p for p, _ in parts) + ")", True
    else:
        inner, repeats = _pattern_node(rng, depth + 1, budget)
        node = "(?:" + inner + ")"
    if repeats or budget[0] <= 0:
        return node, repeats
    quantifier = rng.choice(["", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,}"])
    budget[0] -= bool(quantifier)
    escaped = node in ("\\.", "\\-")
    if quantifier and not node.endswith((")", "]")) and len(node) > 1 and not escaped:
        node = "(?:" + node + ")"
    return node + quantifier, bool(quantifier)


def random_pattern(rng: random.Random) -> Pattern:
    body, _ = _pattern_node(rng, 0, [2])
    start = rng.random() < 0.5
    end = rng.random() < 0.5
    head = "^" if start else ""
    return Pattern(head + body + ("$" if end else ""), head + body + ("\\Z" if end else ""))


# ================================================================================ schemas

_FORMATS = ["email", "ipv4", "ipv6", "date", "date-time", "time", "uuid", "hostname", "uri",
            "uri-reference", "duration", "json-pointer", "regex", "uri-template"]  # fmt: skip
_FORMAT_SAMPLES = {
    "email": ["a@b.c", "ab", "@", "é@x.y"],
    "ipv4": ["127.0.0.1", "256.1.1.1", "1.2.3", "01.2.3.4"],
    "ipv6": ["::1", "1::2::3", "fe80::1%eth0", "::ffff:1.2.3.4"],
    "date": ["2024-02-29", "2023-02-29", "2024-13-01", "24-01-01"],
    "date-time": ["2024-01-01T00:00:00Z", "2024-01-01T00:00:00", "2024-01-01t00:00:00z"],
    "time": ["19:30:00Z", "19:30:00", "23:59:60Z", "25:00:00Z"],
    "uuid": ["12345678-1234-1234-1234-123456789abc", "123", "g2345678-1234-1234-1234-12345678"],
    "hostname": ["example.com", "-x.com", "a" * 64, "x_y"],
    "uri": ["http://x/y", "x", "http://[::1]/", "ht tp://x"],
    "uri-reference": ["/a/b", "%zz", "#f", "a b"],
    "duration": ["P1D", "PT", "P1Y2M", "1D"],
    "json-pointer": ["/a/~0", "a", "/~2", ""],
    "regex": ["a+", "(", "(?<=a+)b", "(?P<n>a)(?P=m)", "[z-a]", "\\1(a)"],
    "uri-template": ["/x/{a}", "{", "/x/{a,b}", "{+a}"],
}
_NAMES = ["a", "b", "c", "x-1", "é", "", "$ref", "0"]
_LEAVES: list[Any] = [0, 1, -1, 2, 1.0, 0.5, -0.0, 1e308, MAX_SAFE, -MAX_SAFE, 3.75, 10, 100,
                      "", "a", "ab", "abc", "é", "😀", "a\n", "x-1", "0", "aaaa", "a.b", True,
                      False, None]  # fmt: skip


@dataclass
class Budget:
    nodes: int = 40
    refs: bool = False  # the schema has $defs to refer to
    ref_forms: tuple[str, ...] = ("#/$defs/d0", "#/$defs/d1", "#A0")  # how a $ref names them
    unevaluated_properties: bool = False  # patternProperties may not be written


def random_schema(rng: random.Random, depth: int, budget: Budget) -> Any:
    """A random subschema; :class:`Pattern` objects stand where a pattern string goes."""
    budget.nodes -= 1
    if budget.nodes <= 0 or depth > 3 or rng.random() < 0.15:
        return rng.choice([True, True, False, {}, {"type": rng.choice(_TYPES)}])
    if budget.refs and rng.random() < 0.08:
        return {"$ref": rng.choice(budget.ref_forms)}
    schema: dict[str, Any] = {}
    for _ in range(rng.randint(1, 3)):
        rng.choice(_KEYWORD_FAMILIES)(rng, schema, depth, budget)
    return schema


_TYPES = ["object", "array", "string", "integer", "number", "boolean", "null"]


def _type(rng: random.Random, schema: dict[str, Any], depth: int, budget: Budget) -> None:
    if rng.random() < 0.7:
        schema["type"] = rng.choice(_TYPES)
    else:
        schema["type"] = rng.sample(_TYPES, rng.randint(1, 3))


def _numeric(rng: random.Random, schema: dict[str, Any], depth: int, budget: Budget) -> None:
    key = rng.choice(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"])
    if key == "multipleOf":
        schema[key] = rng.choice([1, 2, 0.5, 0.1, 3, 1e-300, 0.01, 7.5])
    else:
        schema[key] = rng.choice([0, 1, -1, 2.5, 10, 1e308, -1e308, MAX_SAFE])


def _string(rng: random.Random, schema: dict[str, Any], depth: int, budget: Budget) -> None:
    roll = rng.random()
    if roll < 0.4:
        schema[rng.choice(["minLength", "maxLength"])] = rng.randint(0, 4)
    elif roll < 0.75:
        schema["pattern"] = random_pattern(rng)
    else:
        schema["format"] = rng.choice(_FORMATS)


def _array(rng: random.Random, schema: dict[str, Any], depth: int, budget: Budget) -> None:
    roll = rng.random()
    if roll < 0.25:
        schema["items"] = random_schema(rng, depth + 1, budget)
    elif roll < 0.4:
        schema["prefixItems"] = [random_schema(rng, depth + 1, budget) for _ in range(2)]
        if rng.random() < 0.5:
            schema["items"] = random_schema(rng, depth + 1, budget)
    elif roll < 0.55:
        schema[rng.choice(["minItems", "maxItems"])] = rng.randint(0, 4)
    elif roll < 0.7:
        schema["uniqueItems"] = rng.random() < 0.85
    elif roll < 0.85:
        schema["contains"] = random_schema(rng, depth + 1, budget)
        if rng.random() < 0.6:
            schema[rng.choice(["minContains", "maxContains"])] = rng.randint(0, 3)
    else:
        schema["unevaluatedItems"] = random_schema(rng, depth + 1, budget)


def _object(rng: random.Random, schema: dict[str, Any], depth: int, budget: Budget) -> None:
    roll = rng.random()
    if roll < 0.3:
        schema["properties"] = {
            rng.choice(_NAMES): random_schema(rng, depth + 1, budget)
            for _ in range(rng.randint(1, 3))
        }
        if rng.random() < 0.5:
            schema["required"] = sorted(set(rng.sample(_NAMES, rng.randint(1, 2))))
    elif roll < 0.42 and not budget.unevaluated_properties:
        schema["patternProperties"] = {
            random_pattern(rng): random_schema(rng, depth + 1, budget)
            for _ in range(rng.randint(1, 2))
        }
    elif roll < 0.55:
        schema["additionalProperties"] = random_schema(rng, depth + 1, budget)
    elif roll < 0.62:
        schema["propertyNames"] = random_schema(rng, depth + 1, budget)
    elif roll < 0.7:
        schema[rng.choice(["minProperties", "maxProperties"])] = rng.randint(0, 3)
    elif roll < 0.78:
        schema["dependentRequired"] = {rng.choice(_NAMES): rng.sample(_NAMES, 1)}
    elif roll < 0.85:
        schema["dependentSchemas"] = {rng.choice(_NAMES): random_schema(rng, depth + 1, budget)}
    elif budget.unevaluated_properties:
        schema["unevaluatedProperties"] = random_schema(rng, depth + 1, budget)
    else:
        schema["required"] = [rng.choice(_NAMES)]


def _value_keyword(rng: random.Random, schema: dict[str, Any], depth: int, budget: Budget) -> None:
    if rng.random() < 0.5:
        schema["enum"] = [random_value(rng, 0) for _ in range(rng.randint(1, 4))]
    else:
        schema["const"] = random_value(rng, 0)


def _combinator(rng: random.Random, schema: dict[str, Any], depth: int, budget: Budget) -> None:
    key = rng.choice(["allOf", "anyOf", "oneOf", "not", "if"])
    if key == "not":
        schema["not"] = random_schema(rng, depth + 1, budget)
    elif key == "if":
        schema["if"] = random_schema(rng, depth + 1, budget)
        for branch in ("then", "else"):
            if rng.random() < 0.7:
                schema[branch] = random_schema(rng, depth + 1, budget)
    else:
        schema[key] = [random_schema(rng, depth + 1, budget) for _ in range(rng.randint(1, 3))]


_KEYWORD_FAMILIES = [_type, _type, _numeric, _string, _string, _array, _array, _object, _object,
                     _value_keyword, _combinator, _combinator]  # fmt: skip


def random_value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth > 2 or roll < 0.6:
        return rng.choice(_LEAVES)
    if roll < 0.8:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(_NAMES): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def random_tool_schema(rng: random.Random) -> Any:
    """A tool's ``parameters``: an object schema, perhaps with ``$defs`` that others refer to."""
    budget = Budget(nodes=rng.randint(5, 40), unevaluated_properties=rng.random() < 0.15)
    defs = None
    ids = False
    if rng.random() < 0.3:
        budget.refs = True
        ids = rng.random() < 0.4  # d1 a resource of its own (an $id), every $ref absolute
        if ids:
            budget.ref_forms = ("urn:root#/$defs/d0", "urn:root#A0", "urn:d1", "urn:root#/$defs/d1")
        defs = {name: random_schema(rng, 2, budget) for name in ("d0", "d1")}
        defs = {name: d if isinstance(d, dict) else {"allOf": [d]} for name, d in defs.items()}
        defs["d0"]["$anchor"] = "A0"
        if ids:
            defs["d1"]["$id"] = "urn:d1"
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(rng.randint(1, 4)):
        rng.choice([_object, _object, _object, _combinator, _value_keyword])(rng, schema, 0, budget)
    if schema.get("type") != "object":
        schema["type"] = "object"  # a family may have set another type
    if ("const" in schema or "enum" in schema) and rng.random() < 0.7:
        schema.pop("const", None)  # keep the top level satisfiable now and then
        schema.pop("enum", None)
    if rng.random() < 0.3:  # weight the keywords the registry replaces (toolschema)
        focus = rng.choice([{"uniqueItems": True}, {"uniqueItems": True, "items": {"type": "object"}},
                            {"pattern": random_pattern(rng)}, {"unevaluatedItems": False,
                             "prefixItems": [{}]}])  # fmt: skip
        schema.setdefault("properties", {})["u"] = focus
    if budget.unevaluated_properties and "unevaluatedProperties" not in schema:
        schema["unevaluatedProperties"] = rng.choice([False, {"type": "integer"}])
    if defs is not None:
        schema["$defs"] = defs
    if ids:
        schema["$id"] = "urn:root"
    return schema


def render(schema: Any, dialect: str) -> Any:
    """The schema with every :class:`Pattern` written in ``dialect`` (``re2`` or ``python``)."""
    if isinstance(schema, Pattern):
        return getattr(schema, dialect)
    if isinstance(schema, dict):
        return {render(k, dialect): render(v, dialect) for k, v in schema.items()}
    if isinstance(schema, list):
        return [render(v, dialect) for v in schema]
    return schema


# ============================================================ arguments built to satisfy one


def satisfying(rng: random.Random, schema: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """A value that tries to satisfy ``schema`` (often does; the oracle does not rely on it)."""
    if schema is True or schema == {} or not isinstance(schema, dict) or depth > 6:
        return random_value(rng, 2)
    if "$ref" in schema:  # every form of a reference to d1 ends with "d1" (Budget.ref_forms)
        target = defs.get("d1" if schema["$ref"].endswith("d1") else "d0", {})
        return satisfying(rng, target, defs, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:  # an empty enum (a tools file may hold one) is satisfied by nothing
        return rng.choice(schema["enum"]) if schema["enum"] else random_value(rng, 2)
    for key in ("allOf", "anyOf", "oneOf"):
        if schema.get(key):
            return satisfying(rng, rng.choice(schema[key]), defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = rng.choice(kind) if kind else None
    if kind is None:
        if any(k in schema for k in ("properties", "required", "patternProperties")):
            kind = "object"
        elif any(k in schema for k in ("items", "prefixItems", "contains", "uniqueItems")):
            kind = "array"
        elif any(k in schema for k in ("pattern", "format", "minLength", "maxLength")):
            kind = "string"
    if kind == "object":
        out: dict[str, Any] = {}
        for name, sub in (schema.get("properties") or {}).items():
            if name in schema.get("required", ()) or rng.random() < 0.6:
                out[name] = satisfying(rng, sub, defs, depth + 1)
        for name in schema.get("required", ()):
            out.setdefault(name, random_value(rng, 1))
        if not out and rng.random() < 0.5:
            out = {rng.choice(_NAMES): random_value(rng, 2) for _ in range(rng.randint(1, 3))}
        return out
    if kind == "array":
        prefix = [satisfying(rng, s, defs, depth + 1) for s in schema.get("prefixItems", ())]
        rest = [satisfying(rng, schema.get("items", True), defs, depth + 1)
                for _ in range(rng.randint(0, 3))]  # fmt: skip
        items = prefix + rest
        if items and rng.random() < 0.3:
            items.append(twin(rng, rng.choice(items)))
        return items
    if kind == "string":
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in _FORMAT_SAMPLES:
            return rng.choice(_FORMAT_SAMPLES[fmt])
        return rng.choice(["", "a", "ab", "abc", "x-1", "é😀", "a.b", "0", "b\n"])
    if kind in ("integer", "number"):
        return rng.choice([0, 1, 2, 10, -1, 2.5, 1.0, 100, MAX_SAFE])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return random_value(rng, 1)


def twin(rng: random.Random, value: Any) -> Any:
    """A value JSON Schema may or may not call equal to ``value``: the same, written another
    way (``1.0`` for ``1``, members reordered), or a near miss (``true`` for ``1``, an array
    reversed)."""
    if value is True or value is False:
        return rng.choice([value, int(value), float(value)])
    if isinstance(value, int | float):
        whole = float(value).is_integer() and abs(value) <= MAX_SAFE
        return rng.choice([value, float(value), int(value) if whole else value, value == 1, -value])
    if isinstance(value, list):
        return rng.choice([list(value), value[::-1], [twin(rng, item) for item in value]])
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {name: twin(rng, member) if rng.random() < 0.5 else member for name, member in items}
    return value


def mutate(rng: random.Random, value: Any) -> Any:
    """``value`` with one random change somewhere inside."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(sorted(value))
        out = dict(value)
        if rng.random() < 0.3:
            del out[key]
        else:
            out[key] = mutate(rng, value[key])
        return out
    if isinstance(value, list) and value and rng.random() < 0.7:
        out_list = list(value)
        i = rng.randrange(len(out_list))
        roll = rng.random()
        if roll < 0.3:
            out_list.insert(rng.randrange(len(out_list) + 1), twin(rng, out_list[i]))
        elif roll < 0.5:
            del out_list[i]
        else:
            out_list[i] = mutate(rng, out_list[i])
        return out_list
    return random_value(rng, 1)


# ================================================================================= oracle


def _reference_format_checker() -> Any:
    """jsonschema's own Draft 2020-12 format checks, with ``regex`` as ``re.compile`` except
    that a variable-width lookbehind (ECMA-262 allows it) is valid."""
    jsonschema = jsonschema_module()
    checkers = _full_format_module().draft202012_format_checker.checkers
    checker = jsonschema.FormatChecker(())
    for name in _FORMATS:
        func, raises = checkers[name]
        checker.checks(name, raises=raises)(func)

    @checker.checks("regex", raises=())
    def _regex(instance: object) -> bool:
        if not isinstance(instance, str):
            return True
        try:
            re.compile(instance)
        except re.error as exc:
            return "look-behind requires fixed-width pattern" in str(exc)
        except RecursionError:
            return False
        return True

    return checker


_REFERENCE_CHECKER: list[Any] = []


@functools.cache
def reference_class() -> Any:
    """jsonschema's Draft 2020-12 validator with ``uniqueItems`` compared pair by pair.

    jsonschema's own ``uniqueItems`` (4.26) sorts the items first and compares neighbours, and
    Python's order holds ``0`` and ``false`` equal where JSON's does not: in
    ``[[0], [false], [0]]`` the two ``[0]`` never meet, and the array passes (this target found
    it). The reference compares every pair with jsonschema's own JSON equality instead, the
    meaning of the keyword; the registry hashes a canonical form and agrees with it."""
    jsonschema = jsonschema_module()
    from jsonschema import _utils

    def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Any:
        if not (unique and validator.is_type(instance, "array")):
            return
        for i, one in enumerate(instance):
            if any(_utils.equal(one, two) for two in instance[i + 1 :]):
                yield jsonschema.ValidationError(f"{instance!r} has non-unique elements")
                return

    return jsonschema.validators.extend(
        jsonschema.Draft202012Validator, {"uniqueItems": unique_items}
    )


def _errors(validator: Any, value: Any) -> list[tuple[str, str]]:
    return sorted((str(e.json_path), str(e.validator)) for e in validator.iter_errors(value))


_PROBES: list[Any] = [None, "", "a", 0, 1.5, True, [], [1], {}, dict.fromkeys(_NAMES)]


def _recurses(validator: Any, value: Any) -> bool:
    try:
        next(validator.iter_errors(value), None)
    except BaseException as exc:
        if not _recursion(exc):
            raise
        return True
    return False


def _recursion(exc: BaseException) -> bool:
    """Python's recursion limit, struck in Python or inside rpds (under jsonschema's references),
    which then panics: pyo3's PanicException."""
    return isinstance(exc, RecursionError) or type(exc).__name__ == "PanicException"


def _no_context() -> Any:
    raise AssertionError("no business validators: the context is never made")


def schemas_case(rng: random.Random, stats: Any) -> None:
    jsonschema = jsonschema_module()
    if not _REFERENCE_CHECKER:
        _REFERENCE_CHECKER.append(_reference_format_checker())
    generated = random_tool_schema(rng)
    schema, reference_schema = render(generated, "re2"), render(generated, "python")
    try:
        jsonschema.Draft202012Validator.check_schema(reference_schema)
    except jsonschema.SchemaError:
        stats["schemas.generator_invalid"] += 1  # the generator's own slip: not a finding
        return
    reference = reference_class()(reference_schema, format_checker=_REFERENCE_CHECKER[0])
    try:
        registry = Registry.from_document({"tools": [{"name": "t", "parameters": schema}]})
    except RegistryError as exc:
        if "leads back to itself" not in exc.detail:
            raise SchemaEscape(
                f"schema refused: {exc.detail[:200]}; schema {_brief(schema)}"
            ) from None
        # a $ref cycle that never descends: jsonschema recurses until the limit on some value
        looped = any(_recurses(reference, value) for value in _PROBES)
        stats["schemas.refused_cycle" if looped else "schemas.refused_cycle_unprobed"] += 1
        return
    declaration = registry.resolve("t")
    assert declaration is not None
    tool = declaration.declaration
    defs = schema.get("$defs", {})
    for _ in range(4):
        value = satisfying(rng, schema, defs)
        if not isinstance(value, dict):
            value = {}
        if rng.random() < 0.5:
            value = mutate(rng, value)
            if not isinstance(value, dict):
                value = {"a": value}
        text = orjson.dumps(value)
        parsed = orjson.loads(text)
        try:
            expected = _errors(reference, parsed)
        except BaseException as exc:  # RecursionError, or rpds's PanicException
            if not _recursion(exc):
                raise
            raise SchemaEscape(f"the registry took a schema jsonschema never ends validating; "
                               f"schema {_brief(schema)} value {_brief(value)}") from None  # fmt: skip
        try:
            got = _errors(tool.validator, parsed)
        except Exception as exc:
            raise SchemaEscape(f"validator raised {type(exc).__name__}: {exc}; "
                               f"schema {_brief(schema)} value {_brief(value)}") from None  # fmt: skip
        if got != expected:
            raise SchemaEscape(f"errors {got[:4]} != jsonschema's {expected[:4]}; "
                               f"schema {_brief(schema)} value {_brief(value)}")  # fmt: skip
        quick = tool.quick_check
        if quick is not None and expected and quick(parsed):
            raise SchemaEscape(f"shortcut said certainly valid, jsonschema {expected[:4]}; "
                               f"schema {_brief(schema)} value {_brief(value)}")  # fmt: skip
        verdict = validate_call(text, tool, _no_context)
        if isinstance(verdict, Validated) != (not expected):
            raise SchemaEscape(f"validate_call {verdict!r} against jsonschema {expected[:4]}; "
                               f"schema {_brief(schema)} value {_brief(value)}")  # fmt: skip
        if isinstance(verdict, Rejected) and verdict.reason is not TerminalReason.SCHEMA_INVALID:
            raise SchemaEscape(f"rejected as {verdict.reason}; schema {_brief(schema)}")
        stats["schemas.invalid" if expected else "schemas.valid"] += 1
        if "$id" in schema:
            stats["schemas.resources"] += 1
        if quick is not None and not expected and quick(parsed):
            stats["schemas.shortcut"] += 1


def _brief(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()[:400]
