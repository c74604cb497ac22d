"""The regular expressions of tool schemas, run in time linear in the argument.

A tool schema's ``pattern`` and ``patternProperties`` (and so ``additionalProperties`` next to
``patternProperties``) are matched against argument text, which is the model's output and may be
steered by whatever the model read. jsonschema matches them with Python's ``re``, a
backtracking engine: ``{"pattern": "^(\\w+\\s?)*$"}`` takes 2.4 s on a 25-character argument
and doubles with each character more, so one call could hold a partition for ever, its worker
would leave the group, and the next owner would meet the same record (docs/reliability.md).

This module owns those matches and the checks a registry makes when it loads a schema:

* :func:`tool_validator_class` is Draft 2020-12's validator with ``pattern``,
  ``patternProperties`` and ``additionalProperties`` matched by RE2 (``google-re2``), whose
  time is linear in the text whatever the pattern;
* :func:`check_schema_patterns` refuses, when a registry loads, a pattern RE2 cannot run
  (backreferences, lookahead, lookbehind) and ``unevaluatedProperties`` in a schema that also
  has ``patternProperties`` (jsonschema matches those with ``re`` inside its own
  ``unevaluatedProperties``): an error naming the tool and the place, never a slow call later;
* the ``regex`` format, whose value is itself a pattern, is checked by
  :func:`processor.core.formats.is_regex`, without compiling it.

The dialect of schema patterns is RE2's, close to ECMA-262's without the ``u`` flag: ``\\d``,
``\\w``, ``\\s`` and ``\\b`` are ASCII (Python's ``re`` let ``\\d`` match any Unicode digit),
and ``\\p{L}``-style classes work. Text that is not valid Unicode (a lone surrogate, which no
decoded argument holds) matches no pattern.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import re2

from processor.core.formats import jsonschema_module

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

# Keywords whose value is one subschema, a map of names to subschemas, or a list of subschemas.
_ONE: Final = (
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "contentSchema",
)
_MAP: Final = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LIST: Final = ("allOf", "anyOf", "oneOf", "prefixItems")


class PatternError(ValueError):
    """A schema pattern this module cannot run in linear time (the message says where and why)."""


@functools.cache
def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.never_capture = True  # only whether it matches: no submatches to compute
    return options


@functools.lru_cache(maxsize=4096)
def compile_pattern(source: str) -> Any:
    """A schema pattern compiled by RE2 (cached: schema patterns are few and trusted).

    Raises :class:`PatternError` with RE2's reason for a pattern it does not accept.
    """
    try:
        return re2.compile(source, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(str(reason)) from None
    except UnicodeEncodeError:
        raise PatternError("not valid Unicode") from None


def matches(source: str, text: str) -> bool:
    """Whether the schema pattern ``source`` matches somewhere in ``text`` (``re.search``).

    Fails closed: a pattern RE2 refuses (a registry refuses it at load) and text that is not
    valid Unicode match nothing.
    """
    try:
        return compile_pattern(source).search(text) is not None
    except (PatternError, UnicodeEncodeError):
        return False


def _subschemas(schema: Any, where: str = "$") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(place, subschema) of ``schema`` and of every schema inside it.

    Only schema positions are walked: a ``default``, ``const``, ``enum`` or ``examples`` value
    is data, and a ``pattern`` key inside it is not a pattern.
    """
    if not isinstance(schema, Mapping):
        return
    yield where, schema
    for keyword in _ONE:
        yield from _subschemas(schema.get(keyword), f"{where}.{keyword}")
    for keyword in _MAP:
        members = schema.get(keyword)
        if isinstance(members, Mapping):
            for name, subschema in members.items():
                yield from _subschemas(subschema, f"{where}.{keyword}[{name!r}]")
    for keyword in _LIST:
        members = schema.get(keyword)
        if isinstance(members, list):
            for index, subschema in enumerate(members):
                yield from _subschemas(subschema, f"{where}.{keyword}[{index}]")


def schema_patterns(schema: Any) -> Iterator[tuple[str, str]]:
    """(place, pattern) of every ``pattern`` and ``patternProperties`` name in ``schema``."""
    for where, node in _subschemas(schema):
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            yield f"{where}.pattern", pattern
        named = node.get("patternProperties")
        if isinstance(named, Mapping):
            for name in named:
                if isinstance(name, str):
                    yield f"{where}.patternProperties", name


def check_schema_patterns(schema: Any) -> None:
    """Raise :class:`PatternError` unless every pattern of ``schema`` runs in linear time."""
    for where, source in schema_patterns(schema):
        try:
            compile_pattern(source)
        except PatternError as exc:
            raise PatternError(
                f"{where}: pattern {source!r} cannot be matched in linear time ({exc}); "
                "backreferences, lookahead and lookbehind are not supported"
            ) from None
    nodes = [node for _, node in _subschemas(schema)]
    if any("unevaluatedProperties" in node for node in nodes) and any(
        node.get("patternProperties") for node in nodes
    ):
        raise PatternError(
            "unevaluatedProperties together with patternProperties is not supported "
            "(jsonschema matches those patterns with a backtracking engine there)"
        )


# --- the keywords (jsonschema's keyword signature: validator, value, instance, schema) -------


def _pattern(validator: Any, source: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not matches(source, instance):
        yield jsonschema_module().ValidationError("does not match the pattern")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for source, subschema in patterns.items():
        for name, value in instance.items():
            if matches(source, name):
                yield from validator.descend(value, subschema, path=name, schema_path=source)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [
        name
        for name in instance
        if name not in named and not any(matches(source, name) for source in patterns)
    ]
    if validator.is_type(additional, "object"):
        for name in extras:
            yield from validator.descend(instance[name], additional, path=name)
    elif additional is False and extras:
        yield jsonschema_module().ValidationError(
            f"{len(extras)} additional properties are not allowed"
        )


@functools.cache
def tool_validator_class() -> type[Validator]:
    """Draft 2020-12's validator with the schema patterns matched by RE2 (not registered as
    the validator of any meta-schema, so jsonschema's own ``validator_for`` is unchanged)."""
    jsonschema = jsonschema_module()
    cls: type[Validator] = jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        validators={
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )
    return cls
