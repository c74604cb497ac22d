"""The validator of tool schemas: Draft 2020-12, with every keyword whose cost an argument sets
kept linear in the argument.

A call's arguments are the model's output, which whatever the model read can steer, and
jsonschema lets some of them set the cost of their own validation:

* ``pattern`` and ``patternProperties`` (and so ``additionalProperties`` next to them) are
  matched with Python's ``re``, a backtracking engine: ``{"pattern": "^(\\w+\\s?)*$"}`` took
  2.4 s on a 25-character argument and doubled with each character more;
* ``uniqueItems`` sorts, and falls back to comparing every pair when the items do not sort
  (objects, or a number next to a string): 18 s for 4,000 small objects (43 KB), hours at the
  1 MiB a call may hold;
* ``unevaluatedItems`` and ``unevaluatedProperties`` look each item up in a list of the
  evaluated ones: quadratic, 0.5 s for 8,000 items (39 KB), half an hour at 1 MiB.

One such call could hold a partition for ever: its worker stops heartbeating and leaves the
group, and the next owner of the partition reads the same record (docs/reliability.md). This
module owns the validator the registry uses, and the checks a registry makes when it loads a
schema:

* :func:`tool_validator_class` is Draft 2020-12's validator with those keywords replaced: the
  patterns matched by RE2 (``google-re2``), in time linear in the text whatever the pattern;
  ``uniqueItems`` by hashing a canonical form of each item (JSON equality: ``1`` and ``1.0``
  are equal, ``true`` and ``1`` are not, objects ignore member order); the evaluated items and
  properties kept in a set. Each keeps jsonschema's meaning (tests compare them);
* :func:`unresolved_refs` names a ``$ref`` that resolves nowhere in its schema (nothing is
  fetched), and :func:`ref_cycles` one that leads back to itself without descending into the
  argument (validation would never end); a registry refuses both when it loads;
* :func:`check_schema_patterns` refuses, when a registry loads, a pattern RE2 cannot run
  (backreferences, lookahead, lookbehind) and ``unevaluatedProperties`` in a schema that also
  has ``patternProperties`` (jsonschema matches those with ``re`` while it finds the evaluated
  properties): an error naming the tool and the place, never a slow call later;
* the ``regex`` format, whose value is itself a pattern, is checked by
  :func:`processor.core.formats.is_regex`, without compiling it.

A schema pattern is RE2's dialect: the meta-schema's ``regex`` format is checked by RE2
(:func:`meta_format_checker`), not by compiling with Python's ``re``, so ``\\p{L}`` (a Unicode
letter, as ECMA-262 writes it with the ``u`` flag) is accepted. It matches as RE2 matches, close
to ECMA-262: ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII (Python's ``re`` let ``\\d`` match
any Unicode digit). Text that is not valid Unicode (a lone surrogate, which no
decoded argument holds) matches no pattern.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple
from urllib.parse import unquote, urldefrag, urljoin

import re2

from processor.core.errors import PROCESS_EXCEPTIONS, Described, RegistryError
from processor.core.formats import is_regex, jsonschema_module, re2_options

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


class PatternError(Described, RegistryError, ValueError):
    """A schema pattern this module cannot run in linear time (the message says where and why)."""


@functools.lru_cache(maxsize=4096)
def compile_pattern(source: str) -> Any:
    """A schema pattern compiled by RE2 (cached: schema patterns are few and trusted).

    Raises :class:`PatternError` with RE2's reason for a pattern it does not accept.
    """
    try:
        return re2.compile(source, re2_options())
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


def _subschemas(schema: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(place, subschema) of ``schema`` and of every schema inside it.

    Only schema positions are walked: a ``default``, ``const``, ``enum`` or ``examples`` value
    is data, and a ``pattern`` key inside it is not a pattern.
    """
    for found in _located(schema):
        yield found.where, found.node


class _Located(NamedTuple):
    pointer: str  # JSON pointer from the root
    where: str  # the place as messages write it: $.properties['a']
    resource: str  # URI of the schema resource it is in (its nearest $id, "" for the root's)
    node: Mapping[str, Any]


def _pointer_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _located(
    schema: Any, pointer: str = "", where: str = "$", resource: str = ""
) -> Iterator[_Located]:
    """Every subschema of ``schema`` (itself included), with its pointer, place and resource."""
    if not isinstance(schema, Mapping):
        return
    own = schema.get("$id")
    if isinstance(own, str):
        resource = urldefrag(urljoin(resource, own))[0]
    yield _Located(pointer, where, resource, schema)
    for keyword in _ONE:
        yield from _located(
            schema.get(keyword), f"{pointer}/{keyword}", f"{where}.{keyword}", resource
        )
    for keyword in _MAP:
        members = schema.get(keyword)
        if isinstance(members, Mapping):
            for name, subschema in members.items():
                yield from _located(
                    subschema,
                    f"{pointer}/{keyword}/{_pointer_token(str(name))}",
                    f"{where}.{keyword}[{name!r}]",
                    resource,
                )
    for keyword in _LIST:
        members = schema.get(keyword)
        if isinstance(members, list):
            for index, subschema in enumerate(members):
                yield from _located(
                    subschema,
                    f"{pointer}/{keyword}/{index}",
                    f"{where}.{keyword}[{index}]",
                    resource,
                )


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
            if is_regex(source):  # Python's re parses it: RE2 refuses what it needs
                raise PatternError(
                    f"{where}: pattern {source!r} cannot be matched in linear time ({exc}); "
                    "backreferences, lookahead and lookbehind are not supported"
                ) from None
            raise PatternError(f"{where}: pattern {source!r} is not a valid regex ({exc})") from exc
    nodes = [node for _, node in _subschemas(schema)]
    if any("unevaluatedProperties" in node for node in nodes) and any(
        node.get("patternProperties") for node in nodes
    ):
        raise PatternError(
            "unevaluatedProperties together with patternProperties is not supported "
            "(jsonschema matches those patterns with a backtracking engine there)"
        )


@functools.lru_cache(maxsize=1)
def meta_format_checker() -> Any:
    """The format checks of Draft 2020-12's meta-schema, with ``regex`` meaning "RE2 runs it".

    ``check_schema`` would check a schema's patterns (the meta-schema's ``regex`` format) by
    compiling them with Python's ``re``, which refuses what RE2 and ECMA-262 accept (``\\p{L}``,
    a Unicode letter) and accepts what RE2 cannot run (those get their own message from
    :func:`check_schema_patterns`, which runs first).
    """
    jsonschema = jsonschema_module()
    own = jsonschema.Draft202012Validator.FORMAT_CHECKER
    checker = jsonschema.FormatChecker(())
    checker.checkers = {**own.checkers, "regex": (_runs_on_re2, ())}
    return checker


def _runs_on_re2(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    try:
        compile_pattern(instance)
    except PatternError:
        return False
    return True


# Keywords that apply a subschema to the same instance (not to a part of it): a ``$ref`` cycle
# through these alone never reaches the end of the argument.
_IN_PLACE_ONE: Final = ("not", "if", "then", "else")
_IN_PLACE_LIST: Final = ("allOf", "anyOf", "oneOf")


def _in_place_edges(pointer: str, node: Mapping[str, Any]) -> Iterator[str]:
    for keyword in _IN_PLACE_ONE:
        if isinstance(node.get(keyword), Mapping):
            yield f"{pointer}/{keyword}"
    for keyword in _IN_PLACE_LIST:
        members = node.get(keyword)
        if isinstance(members, list):
            for index, member in enumerate(members):
                if isinstance(member, Mapping):
                    yield f"{pointer}/{keyword}/{index}"
    dependent = node.get("dependentSchemas")
    if isinstance(dependent, Mapping):
        for name, member in dependent.items():
            if isinstance(member, Mapping):
                yield f"{pointer}/dependentSchemas/{_pointer_token(str(name))}"


def _ref_target(
    ref: str, at: _Located, roots: Mapping[str, str], anchors: Mapping[tuple[str, str], str]
) -> str | None:
    """The JSON pointer (from the root) of the subschema ``ref`` names, None if it is not in
    the schema (resolved as referencing does: against the resource's URI)."""
    if ref.startswith("#"):
        uri, fragment = at.resource, ref[1:]
    else:
        uri, fragment = urldefrag(urljoin(at.resource, ref))
    root = roots.get(uri)
    if root is None:
        return None
    if not fragment:
        return root
    if fragment.startswith("/"):
        return root + unquote(fragment)
    return anchors.get((uri, fragment))


def ref_cycles(schema: Any) -> list[str]:
    """Places of ``$ref`` that lead back to themselves without descending into the argument.

    ``{"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}}`` validates the same value against
    itself for ever: jsonschema recurses until Python's recursion limit, and every call of the
    tool would fail (and where the limit strikes inside a key comparison of ``rpds``, under
    jsonschema's references, it panics: pyo3's ``PanicException``, not a ``RecursionError``).
    JSON Schema leaves such a schema's behaviour undefined; a registry refuses it when it
    loads. A cycle through ``properties``, ``items`` or any keyword that descends into a part
    of the value is a recursive schema, and fine: each step reaches deeper into a finite
    argument. References are resolved against the ``$id`` of the resource they are in, as
    jsonschema resolves them; a ``$dynamicRef`` may lead to any ``$dynamicAnchor`` of its name
    (the dynamic scope picks one), so a cycle through any of them counts.
    """
    every = list(_located(schema))
    located = {found.pointer: found for found in every}
    roots: dict[str, str] = {}
    anchors: dict[tuple[str, str], str] = {}
    dynamic: dict[str, list[str]] = {}  # $dynamicAnchor name -> every node that has it
    for found in every:
        roots.setdefault(found.resource, found.pointer)  # pre-order: a resource's root first
        for keyword in ("$anchor", "$dynamicAnchor"):
            anchor = found.node.get(keyword)
            if isinstance(anchor, str):
                anchors[(found.resource, anchor)] = found.pointer
                if keyword == "$dynamicAnchor":
                    dynamic.setdefault(anchor, []).append(found.pointer)
    edges: dict[str, list[str]] = {}
    for found in every:
        targets = list(_in_place_edges(found.pointer, found.node))
        ref = found.node.get("$ref")
        if isinstance(ref, str):
            target = _ref_target(ref, found, roots, anchors)
            if target is not None and target in located:
                targets.append(target)
        ref = found.node.get("$dynamicRef")
        if isinstance(ref, str):  # whichever anchor of that name the dynamic scope picks
            target = _ref_target(ref, found, roots, anchors)
            targets += [t for t in [target] if t is not None and t in located]
            if ref.startswith("#"):
                targets += dynamic.get(ref[1:], [])
        edges[found.pointer] = targets
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[str] = []
    for start in located:
        if state.get(start):
            continue
        stack = [(start, iter(edges[start]))]
        state[start] = 1
        while stack:
            pointer, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                state[pointer] = 2
                stack.pop()
            elif state.get(step) == 1:  # a cycle: from ``step`` on the path back to it
                path = [p for p, _ in stack]
                cycle = path[path.index(step) :]
                via, keyword = next(
                    (p, k)
                    for p in cycle
                    for k in ("$ref", "$dynamicRef")
                    if isinstance(located[p].node.get(k), str)
                )
                cycles.append(f"{located[via].where}.{keyword} {located[via].node[keyword]!r}")
            elif not state.get(step):
                state[step] = 1
                stack.append((step, iter(edges[step])))
    return cycles


def unresolved_refs(validator: Any) -> list[str]:
    """``$ref`` values of the validator's schema that do not resolve within it, with their place.

    jsonschema resolves references when it meets them, so a tools file with a dangling or
    remote ``$ref`` (nothing is fetched) would load and then fail every call of the tool. Each
    ``$ref`` is made absolute against the ``$id`` of the resource it is in (as jsonschema does
    when it meets it) and looked up from the root. Run after :func:`ref_cycles`: the lookup
    validates ``null`` against the target.
    """
    unresolved = []
    for found in _located(validator.schema):
        ref = found.node.get("$ref")
        if not isinstance(ref, str):
            continue
        absolute = found.resource + ref if ref.startswith("#") else urljoin(found.resource, ref)
        try:
            next(validator.evolve(schema={"$ref": absolute}).iter_errors(None), None)
        except PROCESS_EXCEPTIONS:
            raise
        except BaseException as exc:  # referencing's Unresolvable, as jsonschema wraps it
            # (or a PanicException of rpds: see ref_cycles)
            unresolved.append(f"{found.where}.$ref {ref!r} ({type(exc).__name__})")
    return unresolved


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


_BOOLEAN: Final = "boolean"
_ARRAY: Final = "array"
_OBJECT: Final = "object"


def _canonical(value: Any) -> Hashable:
    """A hashable form of a JSON value, equal for two values exactly when JSON Schema calls them
    equal: numbers by value (``1`` and ``1.0`` are equal, as in jsonschema), booleans apart from
    numbers, arrays in order, objects whatever the order of their members. Raises TypeError for
    a value that is not JSON (the caller falls back to jsonschema's own comparison)."""
    if value is True or value is False:
        return (_BOOLEAN, value)
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, Mapping):
        return (_OBJECT, frozenset((name, _canonical(member)) for name, member in value.items()))
    if isinstance(value, Sequence):
        return (_ARRAY, tuple(_canonical(item) for item in value))
    raise TypeError(type(value).__name__)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not unique or not validator.is_type(instance, "array"):
        return
    try:
        distinct = len({_canonical(item) for item in instance}) == len(instance)
    except (TypeError, RecursionError):  # not JSON, or nested past the interpreter's limit
        distinct = jsonschema_module()._utils.uniq(instance)
    if not distinct:
        yield jsonschema_module().ValidationError("has non-unique elements")


def _unevaluated_items(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "array"):
        return
    find = jsonschema_module()._utils.find_evaluated_item_indexes_by_schema
    evaluated = set(find(validator, instance, schema))
    missing = sum(1 for index in range(len(instance)) if index not in evaluated)
    if missing:
        yield jsonschema_module().ValidationError(f"{missing} unevaluated items are not allowed")


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    find = jsonschema_module()._utils.find_evaluated_property_keys_by_schema
    evaluated = set(find(validator, instance, schema))
    invalid = 0
    for name, value in instance.items():
        if name not in evaluated:
            for _ in validator.descend(value, unevaluated, path=name, schema_path=name):
                invalid += 1
                break
    if invalid:
        yield jsonschema_module().ValidationError(
            f"{invalid} unevaluated properties are not valid under the given schema"
        )


@functools.cache
def tool_validator_class() -> type[Validator]:
    """Draft 2020-12's validator with the keywords of the module docstring replaced (not
    registered as the validator of any meta-schema: jsonschema's own ``validator_for`` and
    validators are unchanged for other code in the process)."""
    jsonschema = jsonschema_module()
    cls: type[Validator] = jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        validators={
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
            "uniqueItems": _unique_items,
            "unevaluatedItems": _unevaluated_items,
            "unevaluatedProperties": _unevaluated_properties,
        },
    )
    return cls
