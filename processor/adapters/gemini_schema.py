"""A tool's JSON Schema as Gemini's ``Schema`` (the OpenAPI 3.0 subset its API takes). Pure.

Gemini's ``functionDeclarations[].parameters`` is not JSON Schema: types are upper-case names,
``null`` is ``nullable``, references live under ``defs`` (``#/defs/Name``), and many keywords
do not exist. :func:`gemini_schema` converts what has the same meaning there and refuses, with
an :class:`~processor.core.errors.OfferError` naming the keyword and where it stands, what would
change meaning if dropped (fail closed: a model offered a looser schema than the registry's would
write calls the registry then refuses, or a stricter one calls it never could):

- kept: ``type`` (a name, or a name and ``"null"``), ``properties``, ``required``,
  ``additionalProperties``, ``items``, ``anyOf``, ``enum`` and ``const`` of strings,
  ``minimum``/``maximum``, ``minLength``/``maxLength``, ``minItems``/``maxItems``,
  ``minProperties``/``maxProperties``, ``pattern``, ``title``, ``description``, ``default``,
  ``$defs`` and ``$ref`` to them (renamed ``defs``, ``#/defs/…``), and ``format`` where Gemini
  knows it (``date-time``; ``float``/``double``; ``int32``/``int64``);
- another ``format`` (``date``, ``email``, …) is told to the model in the description
  (``(format: date)``): Gemini has no such constraint, and the registry still checks it;
- dropped, as annotations with no effect on validity: ``$schema``, ``$id``, ``$comment``,
  ``examples``, ``deprecated``, ``readOnly``, ``writeOnly``;
- refused: every other keyword (``oneOf``, ``allOf``, ``not``, ``if``, ``exclusiveMinimum``,
  ``multipleOf``, ``uniqueItems``, ``prefixItems``, ``patternProperties``, …), an ``enum`` or
  ``const`` that is not all strings, a type list other than one type and ``"null"``, a ``$ref``
  outside ``#/$defs/``, and a boolean schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from processor.core.errors import OfferError

__all__ = ["gemini_schema"]

_TYPES: Final = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
    "null": "NULL",
}
_SAME: Final = {
    "minimum": "minimum",
    "maximum": "maximum",
    "minLength": "minLength",
    "maxLength": "maxLength",
    "minItems": "minItems",
    "maxItems": "maxItems",
    "minProperties": "minProperties",
    "maxProperties": "maxProperties",
    "pattern": "pattern",
    "title": "title",
    "default": "default",
    "required": "required",
}
_ANNOTATIONS: Final = frozenset(
    {"$schema", "$id", "$comment", "examples", "deprecated", "readOnly", "writeOnly"}
)
_FORMATS: Final = {
    "STRING": frozenset({"date-time"}),
    "NUMBER": frozenset({"float", "double"}),
    "INTEGER": frozenset({"int32", "int64"}),
}
_DEFS: Final = "#/$defs/"


def gemini_schema(schema: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``schema`` (a tool's ``parameters``) as a Gemini ``Schema`` object (REST field names).

    ``where`` names the tool in the error. Raises OfferError for what cannot be converted."""
    return _node(schema, where, "parameters")


def _node(schema: Any, where: str, path: str) -> dict[str, Any]:
    if not isinstance(schema, Mapping):
        raise _refuse(where, path, "a boolean schema has no Gemini form")
    out: dict[str, Any] = {}
    described: list[str] = []
    for key, value in schema.items():
        at = f"{path}.{key}"
        if key in _ANNOTATIONS:
            continue
        if key in _SAME:
            out[_SAME[key]] = value
        elif key == "type":
            _type(value, where, at, out)
        elif key == "description":
            described.insert(0, value)
        elif key == "properties":
            out["properties"] = {
                name: _node(sub, where, f"{at}.{name}") for name, sub in value.items()
            }
        elif key == "additionalProperties":
            out["additionalProperties"] = (
                value if isinstance(value, bool) else _node(value, where, at)
            )
        elif key == "items":
            out["items"] = _node(value, where, at)
        elif key == "anyOf":
            out["anyOf"] = [_node(sub, where, f"{at}[{i}]") for i, sub in enumerate(value)]
        elif key in ("enum", "const"):
            values = value if key == "enum" else [value]
            if not all(isinstance(v, str) for v in values):
                raise _refuse(where, at, "Gemini's enum holds strings only")
            out["enum"] = list(values)
            out.setdefault("type", "STRING")
        elif key == "$defs":
            out["defs"] = {name: _node(sub, where, f"{at}.{name}") for name, sub in value.items()}
        elif key == "$ref":
            if not isinstance(value, str) or not value.startswith(_DEFS):
                raise _refuse(where, at, "only references to #/$defs/… have a Gemini form")
            out["ref"] = "#/defs/" + value[len(_DEFS) :]
        elif key == "format":
            continue  # below, once the type is known
        else:
            raise _refuse(where, at, "Gemini's schema has no such keyword")
    fmt = schema.get("format")
    if fmt is not None:
        if fmt in _FORMATS.get(out.get("type", ""), ()):
            out["format"] = fmt
        else:
            described.append(f"(format: {fmt})")
    if described:
        out["description"] = " ".join(described)
    return out


def _type(value: Any, where: str, at: str, out: dict[str, Any]) -> None:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n in _TYPES for n in names):
        raise _refuse(where, at, "an unknown type")
    real = [n for n in names if n != "null"]
    if len(real) > 1 or (not real and len(names) > 1):
        raise _refuse(where, at, "Gemini takes one type (and null), not a list of types")
    if "null" in names and real:
        out["nullable"] = True
    out["type"] = _TYPES[real[0] if real else "null"]


def _refuse(where: str, at: str, why: str) -> OfferError:
    return OfferError(detail=f"{where}: {at}: {why}; it cannot be offered to Gemini as declared")
