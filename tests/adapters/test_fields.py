"""The shared field readers: types, bounds, safe codes, and no provider values in messages."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from processor.adapters.fields import MAX_ID, MAX_NAME, Fields, decode_object, shown
from processor.core.errors import AdapterError
from processor.core.events import Id, Name

F = Fields("prov")
SECRET = "sk-secret-argument-value"


@pytest.mark.parametrize(("bound", "limit"), [(Id, MAX_ID), (Name, MAX_NAME)])
def test_bounds_are_the_wire_contracts(bound: Any, limit: int) -> None:
    adapter: TypeAdapter[str] = TypeAdapter(bound)
    adapter.validate_python("x" * limit)
    with pytest.raises(ValidationError):
        adapter.validate_python("x" * (limit + 1))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("max_tokens", "max_tokens"), ("a.b:c-d", "a.b:c-d"), ("two words", "?"), (None, "?"),
     (7, "?"), ("x" * 65, "?"), (SECRET + " {", "?")],
)  # fmt: skip
def test_shown(value: object, expected: str) -> None:
    assert shown(value) == expected


def test_shown_placeholder() -> None:
    assert shown("no way", "unknown") == "unknown"


def test_decode_object() -> None:
    assert decode_object(b'{"a": 1}', "prov") == {"a": 1}
    with pytest.raises(AdapterError, match=r"^bad_chunk: prov: chunk is not JSON \("):
        decode_object('{"a": ' + SECRET, "prov")
    with pytest.raises(AdapterError, match=r"^bad_chunk: sse: payload is not a JSON object$"):
        decode_object(f'["{SECRET}"]', "sse", "payload")


@pytest.mark.parametrize(
    ("read", "obj", "expected"),
    [
        (lambda o: F.opt(o, "k", str), {}, None),
        (lambda o: F.opt(o, "k", str), {"k": None}, None),
        (lambda o: F.opt(o, "k", int), {"k": 3}, 3),
        (lambda o: F.obj(o, "k"), {"k": {"a": 1}}, {"a": 1}),
        (lambda o: F.text(o, "k", 3), {"k": "abc"}, "abc"),
        (lambda o: F.opt_text(o, "k", 3), {}, None),
        (lambda o: F.opt_text(o, "k", 3), {"k": "ab"}, "ab"),
        (lambda o: F.ident(o, "k", 3), {"k": ""}, None),
        (lambda o: F.ident(o, "k", 3), {"k": "abc"}, "abc"),
        (lambda o: F.index(o, "k"), {"k": 0}, 0),
    ],
)
def test_readers_accept(read: Any, obj: dict[str, Any], expected: object) -> None:
    assert read(obj) == expected


@pytest.mark.parametrize(
    ("read", "obj", "detail"),
    [
        (lambda o: F.opt(o, "k", int, "a choice"), {"k": True}, "field 'k' of a choice is not an integer"),
        (lambda o: F.opt(o, "k", list), {"k": SECRET}, "field 'k' is not a list"),
        (lambda o: F.obj(o, "k"), {"k": [SECRET]}, "field 'k' missing or not an object"),
        (lambda o: F.text(o, "k", 3), {"k": SECRET}, "field 'k' missing, empty, too long or not a string"),
        (lambda o: F.text(o, "k", 3), {"k": ""}, "field 'k' missing, empty, too long or not a string"),
        (lambda o: F.opt_text(o, "k", 3), {"k": ""}, "field 'k' empty or too long"),
        (lambda o: F.ident(o, "k", 3, "a call"), {"k": SECRET}, "field 'k' of a call too long"),
        (lambda o: F.index(o, "k"), {"k": -1}, "field 'k' missing or not a non-negative integer"),
        (lambda o: F.index(o, "k"), {"k": False}, "field 'k' missing or not a non-negative integer"),
    ],
)  # fmt: skip
def test_readers_refuse_without_the_value(read: Any, obj: dict[str, Any], detail: str) -> None:
    with pytest.raises(AdapterError) as info:
        read(obj)
    assert (info.value.reason, info.value.detail) == ("bad_chunk", f"prov: {detail}")
    assert SECRET not in str(info.value)
