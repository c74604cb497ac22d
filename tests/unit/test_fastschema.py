"""processor.core.fastschema: its "certainly valid" never contradicts jsonschema."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from processor.core.fastschema import compile_schema

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "required": ["city", "units", "days"],
        "additionalProperties": False,
        "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 8},
            "units": {"enum": ["c", "f", None, 1, True]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "price": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10.5},
            "flag": {"type": ["boolean", "null"]},
            "kind": {"const": "x"},
            "none": {"const": None},
            "one": {"const": 1},
        },
    },
    {
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "required": ["id"],
                    "additionalProperties": {"type": "string"},
                    "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}},
                },
            },
            "any": True,
            "n": {"minimum": 2},
        },
        "additionalProperties": {"type": ["string", "array"], "maxItems": 1, "minLength": 2},
    },
]
KEYS = st.sampled_from(["city", "units", "days", "price", "flag", "kind", "none", "one", "rows",
                        "id", "tags", "any", "n", "zz"])  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 20)
    | st.floats(-2, 20, allow_nan=False)
    | st.sampled_from([0, 1, 1.0, 2.0, 14, 14.0, 10.5, "c", "f", "x", "", "ab", "abcdefghi", "é"])
    | st.text(max_size=10)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=6),
    max_leaves=12,
)


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=1500, deadline=None)
@given(value=st.dictionaries(KEYS, VALUES, max_size=8))
def test_certainly_valid_means_valid(schema: dict[str, Any], value: dict[str, Any]) -> None:
    check = compile_schema(schema)
    assert check is not None
    if check(value):
        assert list(Draft202012Validator(schema).iter_errors(value)) == []


def test_valid_values_take_the_shortcut() -> None:
    check = compile_schema(SCHEMAS[0])
    assert check is not None
    assert check({"city": "Paris", "units": "c", "days": 3, "flag": None, "kind": "x"})
    assert not check({"city": "Paris", "units": "c", "days": 3.0})  # jsonschema decides


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}},
        {"type": "object", "properties": {"a": {"type": "string", "format": "date"}}},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^a"}}},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
        {"type": "object", "anyOf": [{"required": ["a"]}]},
        {"type": "object", "properties": {"a": False}},
        {"type": "object", "properties": {"a": {"type": "array", "prefixItems": [True]}}},
        {"type": "object", "patternProperties": {"^a": True}, "additionalProperties": False},
        {"type": "object", "properties": {"a": {"type": "decimal"}}},
    ],
)
def test_what_it_does_not_decide_is_left_to_jsonschema(schema: dict[str, Any]) -> None:
    assert compile_schema(schema) is None
