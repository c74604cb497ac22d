"""A quick, sound "certainly valid" check for the common subset of JSON Schema.

jsonschema's Draft 2020-12 validator walks the schema with generic machinery (``iter_errors``,
``descend``, ``evolve``) and dominated the cost of a small call. Most tool schemas use a handful
of keywords, so :func:`compile_schema` turns such a schema into nested closures that answer one
question: is this parsed JSON value certainly valid? ``True`` means jsonschema would report no
error at all, so the call skips it; ``False`` means "not known to be valid", and the caller runs
jsonschema exactly as before, which decides and describes the problems. The check is therefore
never the judge of an invalid value, only a shortcut for a valid one.

Soundness rules (each keyword accepts only what jsonschema's keyword of the same name accepts):

* a schema using any keyword outside :data:`_SUPPORTED` (``$ref``, ``format``, ``pattern``,
  combinators, conditionals, ``prefixItems``, ``patternProperties``, ``unevaluated*``, …) or
  ``$schema`` / ``$id`` is not compiled at all (``None``): jsonschema always runs for it;
* ``type``: booleans are never integers or numbers; an ``integer`` must be a Python ``int``
  (jsonschema also accepts a float with no fraction: that case falls back);
* ``enum`` / ``const``: only a string value (or ``null``) compared with string (``null``)
  members is decided here, where Python equality is JSON equality; any other value falls back;
* keywords that do not apply to a value's type are satisfied, as in jsonschema.

The values checked are what ``orjson.loads`` returns: dict, list, str, int, float, bool, None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized
from typing import Any, Final

Check = Callable[[Any], bool]

# keywords that never change validity (annotations, and $defs, unreachable without $ref)
_IGNORED: Final = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
     "writeOnly", "$defs", "definitions"}
)  # fmt: skip
_SUPPORTED: Final = frozenset(
    {"type", "properties", "required", "additionalProperties", "enum", "const", "minimum",
     "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "items",
     "minItems", "maxItems"}
)  # fmt: skip


def _is_number(value: Any) -> bool:
    """A JSON number as ``orjson.loads`` gives it (a bool is neither int nor float here)."""
    return type(value) is int or type(value) is float


_TYPE_CHECKS: Final[dict[str, Check]] = {
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": _is_number,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def compile_schema(schema: Any) -> Check | None:
    """A check that returns True only for values the schema certainly accepts, or None when
    the schema uses something this module does not decide (then jsonschema always runs)."""
    if schema is True:
        return lambda value: True
    if not isinstance(schema, Mapping):
        return None  # False (rejects everything) or not a schema: jsonschema decides
    checks: list[Check] = []
    for keyword, argument in schema.items():
        if keyword in _IGNORED:
            continue
        if keyword not in _SUPPORTED:
            return None
        check = _KEYWORDS[keyword](argument, schema)
        if check is None:
            return None
        checks.append(check)
    if not checks:
        return lambda value: True
    if len(checks) == 1:
        return checks[0]
    ordered = tuple(checks)

    def all_checks(value: Any) -> bool:
        for check in ordered:  # noqa: SIM110 - a loop is cheaper than a generator here
            if not check(value):
                return False
        return True

    return all_checks


def _type(argument: Any, schema: Mapping[str, Any]) -> Check | None:
    names = [argument] if isinstance(argument, str) else argument
    if not isinstance(names, list) or not names or not all(n in _TYPE_CHECKS for n in names):
        return None
    if len(names) == 1:
        return _TYPE_CHECKS[names[0]]
    checks = tuple(_TYPE_CHECKS[n] for n in names)
    return lambda value: any(check(value) for check in checks)


def _properties(argument: Any, schema: Mapping[str, Any]) -> Check | None:
    if not isinstance(argument, Mapping):
        return None
    compiled: list[tuple[str, Check]] = []
    for name, subschema in argument.items():
        check = compile_schema(subschema)
        if check is None or not isinstance(name, str):
            return None
        compiled.append((name, check))
    pairs = tuple(compiled)

    def properties(value: Any) -> bool:
        if type(value) is not dict:
            return True
        for name, check in pairs:  # noqa: SIM110 - as above
            if name in value and not check(value[name]):
                return False
        return True

    return properties


def _required(argument: Any, schema: Mapping[str, Any]) -> Check | None:
    if not isinstance(argument, list) or not all(isinstance(n, str) for n in argument):
        return None
    names = tuple(argument)
    return lambda value: type(value) is not dict or all(n in value for n in names)


def _additional(argument: Any, schema: Mapping[str, Any]) -> Check | None:
    declared = schema.get("properties", {})
    if not isinstance(declared, Mapping):
        return None
    known = frozenset(declared)
    if argument is False:
        return lambda value: type(value) is not dict or known.issuperset(value)
    check = compile_schema(argument)
    if check is None:
        return None

    def additional(value: Any) -> bool:
        if type(value) is not dict:
            return True
        return all(check(v) for k, v in value.items() if k not in known)

    return additional


def _enum(argument: Any, schema: Mapping[str, Any]) -> Check | None:
    if not isinstance(argument, list):
        return None
    strings = frozenset(m for m in argument if isinstance(m, str))
    has_null = any(m is None for m in argument)
    return lambda value: (type(value) is str and value in strings) or (value is None and has_null)


def _const(argument: Any, schema: Mapping[str, Any]) -> Check | None:
    if argument is None:
        return lambda value: value is None
    if isinstance(argument, str):
        return lambda value: type(value) is str and value == argument
    return lambda value: False  # other constants: jsonschema decides


def _bound(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Check | None]:
    def make(argument: Any, schema: Mapping[str, Any]) -> Check | None:
        if not _is_number(argument):
            return None
        return lambda value: not _is_number(value) or compare(value, argument)

    return make


def _size(kind: type[Sized], most: bool) -> Callable[[Any, Any], Check | None]:
    """``minLength``/``maxLength`` (``kind`` str: code points, as jsonschema counts them) and
    ``minItems``/``maxItems`` (``kind`` list): values of another type satisfy them."""

    def make(argument: Any, schema: Mapping[str, Any]) -> Check | None:
        if type(argument) is not int or argument < 0:
            return None
        bound: int = argument

        def within(value: Any) -> bool:
            if type(value) is not kind:
                return True
            size = len(value)
            return size <= bound if most else size >= bound

        return within

    return make


def _items(argument: Any, schema: Mapping[str, Any]) -> Check | None:
    if "prefixItems" in schema:
        return None
    check = compile_schema(argument)
    if check is None:
        return None
    return lambda value: type(value) is not list or all(check(v) for v in value)


_KEYWORDS: Final[dict[str, Callable[[Any, Mapping[str, Any]], Check | None]]] = {
    "type": _type,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional,
    "enum": _enum,
    "const": _const,
    "minimum": _bound(lambda v, bound: v >= bound),
    "maximum": _bound(lambda v, bound: v <= bound),
    "exclusiveMinimum": _bound(lambda v, bound: v > bound),
    "exclusiveMaximum": _bound(lambda v, bound: v < bound),
    "minLength": _size(str, most=False),
    "maxLength": _size(str, most=True),
    "minItems": _size(list, most=False),
    "maxItems": _size(list, most=True),
    "items": _items,
}
