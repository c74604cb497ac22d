"""The tool registry: declarations, versions, explicit aliases, schemas compiled once.

A registry is built from an already-parsed document (``{"tools": [...]}``); reading and parsing
the file is :mod:`processor.registry_file`'s job, so this module stays pure. Each tool's
``parameters`` is a JSON Schema (Draft 2020-12), checked with ``check_schema`` and compiled once,
with format checking on (the checkers of the formats it uses, :mod:`processor.core.formats`), by the
validator of :mod:`processor.core.toolschema`, whose cost stays linear in the argument (it
refuses at load a pattern it cannot run so). Aliases map an old name to this tool explicitly (a
rename mid-release); a name is never guessed. Business validators are callables resolved by the
loader from dotted paths.

A tool's identity is its ``(namespace, name)``: a tool may declare a ``namespace`` (OpenAI
Responses groups function tools under one, ``NamespaceTool``, and its calls carry it), and
resolution is an exact match on both. A namespaced call never resolves a bare tool, a bare call
never resolves a namespaced one, and a namespace the registry does not declare resolves nothing
(the call fails ``unknown_tool``, validation result ``unknown_namespace``). A tool's aliases live
in its namespace.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, Protocol

from pydantic import TypeAdapter, ValidationError

from processor.core.errors import Described, RegistryError
from processor.core.events import Name
from processor.core.fastschema import Check, compile_schema
from processor.core.flat_names import flat_name
from processor.core.formats import format_checker, jsonschema_module, used_formats
from processor.core.mcp_pins import McpPin, parse_pin
from processor.core.toolschema import (
    PatternError,
    check_schema_patterns,
    meta_format_checker,
    ref_cycles,
    tool_validator_class,
    unresolved_refs,
)

if TYPE_CHECKING:
    from jsonschema.protocols import Validator


@dataclass(frozen=True)
class ValidationContext:
    """What a business validator may know about a call besides its arguments."""

    tenant: str
    turn_id: str
    actor: str
    tool: str
    tool_version: str
    namespace: str | None = None


class BusinessValidator(Protocol):
    """Returns a list of problems (empty when fine). Problems must not quote argument values."""

    def __call__(self, arguments: Mapping[str, Any], ctx: ValidationContext) -> Sequence[str]: ...


ValidatorResolver = Callable[[str], BusinessValidator]


class DispatchOn(StrEnum):
    """When a validated call of a tool may act.

    ``response_end`` (the default): only once the response it belongs to ended with the
    provider's normal completion, so a refusal, a content filter or a cut voids it.
    ``call_end``: as soon as the call's own terminal validates, an explicit opt-in for
    read-only tools whose latency matters; a later voiding verdict of the response can then
    no longer stop it.
    """

    RESPONSE_END = "response_end"
    CALL_END = "call_end"


@dataclass(frozen=True)
class ToolLimits:
    """Per-tool limits; ``None`` means the partition-wide limit applies."""

    max_bytes: int | None = None
    max_deltas: int | None = None


@dataclass(frozen=True)
class ToolDeclaration:
    name: str
    version: str
    parameters: Mapping[str, Any]
    validator: Validator = field(repr=False, compare=False)
    requires_confirmation: bool = False
    confirmation_ttl_seconds: float = 300.0
    aliases: tuple[str, ...] = ()
    allowed_tenants: frozenset[str] | None = None
    allowed_actors: frozenset[str] | None = None
    limits: ToolLimits = ToolLimits()
    business_validators: tuple[tuple[str, BusinessValidator], ...] = ()
    dispatch_on: DispatchOn = field(default_factory=lambda: DispatchOn.RESPONSE_END)
    namespace: str | None = None  # with ``name``, the tool's identity (None: a bare tool)
    description: str = ""  # the reviewed text offered to the model (processor.adapters.offer)
    # an MCP server's tool: which server, and the digest of the reviewed definition
    mcp: McpPin | None = None
    # a shortcut for arguments that are certainly valid (processor.core.fastschema); None when
    # the schema uses what it does not decide: jsonschema then always runs
    quick_check: Check | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validator = self.validator
        if type(validator) is tool_validator_class():  # nothing customised
            object.__setattr__(self, "quick_check", compile_schema(validator.schema))

    def permits(self, tenant: str, actor: str) -> bool:
        if self.allowed_tenants is not None and tenant not in self.allowed_tenants:
            return False
        return self.allowed_actors is None or actor in self.allowed_actors


@dataclass(frozen=True)
class Resolution:
    declaration: ToolDeclaration
    alias_used: str | None


MAX_SCHEMA_VALUES = 50_000
"""The most JSON values one tool's ``parameters`` may hold, counted as written out in full.

A YAML alias repeats what its anchor names without copying it, so ten lines of nested aliases
make a schema of millions of values: every check at load walks each of them (the load of one
such tools file ran for minutes), and so would every call's validation. 50,000 is ten times
what a provider's strict mode accepts in a whole schema (OpenAI: 5,000 properties), and loads
in a few seconds. A schema used in many places belongs under ``$defs``, named by ``$ref``."""

MAX_DOCUMENT_VALUES = 500_000
"""The most JSON values of every tool's ``parameters`` together, counted the same way."""


class SelfContaining(Described, RegistryError, ValueError):
    """A value that contains itself (a YAML alias inside what its anchor names)."""


def expanded_size(value: Any, limit: int) -> int:
    """How many JSON values ``value`` holds written out in full (an object or array counts as
    one, plus its members), or the first count past ``limit``. Linear in the distinct
    containers: a container met again through another reference is counted from memory.
    Raises :class:`SelfContaining` for a value that contains itself."""
    sizes: dict[int, int] = {}
    path: set[int] = set()

    def size(node: Any) -> int:
        if not isinstance(node, Mapping | list | tuple):
            return 1
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            return known
        if key in path:
            raise SelfContaining
        path.add(key)
        members = node.values() if isinstance(node, Mapping) else node
        total = 1
        for member in members:
            total += size(member)
            if total > limit:
                break
        path.discard(key)
        sizes[key] = total
        return total

    return size(value)


_TOOL_KEYS = frozenset(
    {
        "name",
        "version",
        "parameters",
        "requires_confirmation",
        "confirmation_ttl_seconds",
        "aliases",
        "allowed_tenants",
        "allowed_actors",
        "limits",
        "validators",
        "description",
        "dispatch_on",
        "namespace",
        "mcp",
    }
)

_WIRE_NAME: Final[TypeAdapter[str]] = TypeAdapter(Name)
"""What the fragment events' ``tool`` and ``namespace`` fields accept: a tool name, alias or
namespace they refuse could never be called (every call of it would be a dead letter), so the
registry refuses it at load."""


def wire_name_problem(value: Any) -> str | None:
    """Why a call could not carry ``value`` as its tool name or namespace, or None."""
    try:
        _WIRE_NAME.validate_python(value, strict=True)
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"])
    return None


class Registry:
    """Tool declarations by (namespace, name) and alias. Immutable once built."""

    def __init__(self, tools: Sequence[ToolDeclaration]) -> None:
        self._by_name: dict[tuple[str | None, str], Resolution] = {}
        for tool in tools:
            self._add(tool.namespace, tool.name, Resolution(tool, None))
            for alias in tool.aliases:
                self._add(tool.namespace, alias, Resolution(tool, alias))
        for tool in tools:  # after every bare name: a flattened name never shadows one
            if tool.namespace is None:
                continue
            for written in (tool.name, *tool.aliases):
                flat = flat_name(tool.namespace, written)
                other = self._by_name.get((None, flat))
                if other is not None:
                    raise RegistryError(
                        detail=f"{tool.namespace}.{written} flattens to {flat!r} (the name "
                        "providers without namespaces call it by), which already names "
                        f"{_identity(other.declaration)}"
                    )
                self._by_name[(None, flat)] = Resolution(tool, flat)
        self.tools: tuple[ToolDeclaration, ...] = tuple(tools)
        self.namespaces: frozenset[str] = frozenset(
            t.namespace for t in tools if t.namespace is not None
        )
        """The namespaces some tool declares (a call in any other one resolves nothing)."""
        self._switch_names = {(t.namespace, t.name): self._switches_of(t) for t in tools}

    def _add(self, namespace: str | None, name: str, resolution: Resolution) -> None:
        key = (namespace, name)
        if key in self._by_name:
            where = f" in namespace {namespace!r}" if namespace is not None else ""
            raise RegistryError(detail=f"name {name!r} is declared twice{where} (tool or alias)")
        self._by_name[key] = resolution

    def resolve(self, name: str, namespace: str | None = None) -> Resolution | None:
        """The declaration for a name (and namespace) as the model wrote them, or None.

        Exact match on both: ``resolve("transfer", "crm")`` never finds a bare ``transfer``,
        and ``resolve("transfer")`` never finds ``crm``'s; ``resolve("crm__transfer")``, its
        flattened name (:mod:`processor.core.flat_names`), does."""
        return self._by_name.get((namespace, name))

    def canonical_switch(self, name: str) -> str:
        """The name a tool switch (``tool.disabled`` / ``tool.enabled``) naming ``name`` is
        kept under: the declared name of the bare tool or bare alias ``name`` names, else
        ``name`` as written. Switches carry no namespace (see :meth:`switch_names`)."""
        resolution = self._by_name.get((None, name))
        return resolution.declaration.name if resolution else name

    def switch_names(self, declaration: ToolDeclaration) -> frozenset[str]:
        """The switch names that stop ``declaration``: :meth:`canonical_switch` of its name
        and of each alias, and for a namespaced tool also each of them in the printed form
        ``namespace.name`` that ``processor tail`` and ``replay`` show (so a switch copied
        from their output stops the tool it names, and only that namespace's). A bare switch
        name stops that name in every namespace (broader than one tool: the safe side)."""
        found = self._switch_names.get((declaration.namespace, declaration.name))
        if found is None:  # a declaration from elsewhere: computed, not cached
            found = self._switches_of(declaration)
        return found

    def _switches_of(self, declaration: ToolDeclaration) -> frozenset[str]:
        names = (declaration.name, *declaration.aliases)
        found = {self.canonical_switch(n) for n in names}
        if declaration.namespace is not None:
            found.update(f"{declaration.namespace}.{n}" for n in names)
        return frozenset(found)

    @classmethod
    def from_document(
        cls,
        doc: Any,
        *,
        source: str = "<document>",
        resolve_validator: ValidatorResolver | None = None,
    ) -> Registry:
        if not isinstance(doc, Mapping) or not isinstance(doc.get("tools"), list):
            raise RegistryError(detail=f"{source}: expected a top-level 'tools' list")
        _check_sizes(doc["tools"], source)
        tools = []
        for index, entry in enumerate(doc["tools"]):
            try:
                tools.append(_declaration(entry, source, index, resolve_validator))
            except RecursionError:  # jsonschema's checks recurse, a few frames a level
                raise _too_deep(source, _named(entry, index)) from None
        try:
            return cls(tools)
        except RegistryError as exc:
            raise RegistryError(detail=f"{source}: {exc.detail}") from None


def _check_sizes(entries: list[Any], source: str) -> None:
    """Refuse schemas too large when written out (see :data:`MAX_SCHEMA_VALUES`), before any
    check walks them."""
    total = 0
    for index, entry in enumerate(entries):
        parameters = entry.get("parameters") if isinstance(entry, Mapping) else None
        if parameters is None:
            continue
        where = _named(entry, index)
        try:
            size = expanded_size(parameters, MAX_SCHEMA_VALUES)
        except SelfContaining:
            raise RegistryError(
                detail=f"{source}: {where}: 'parameters' contains itself (a YAML alias inside "
                "what its anchor names); a recursive schema refers to itself with $ref"
            ) from None
        except RecursionError:
            raise _too_deep(source, where) from None
        if size > MAX_SCHEMA_VALUES:
            raise RegistryError(
                detail=f"{source}: {where}: 'parameters' holds more than "
                f"{MAX_SCHEMA_VALUES:,} JSON values when written out in full (YAML aliases "
                "repeat what they name; put a schema used in many places under $defs and "
                "refer to it with $ref)"
            )
        total += size
        if total > MAX_DOCUMENT_VALUES:
            raise RegistryError(
                detail=f"{source}: the tools' 'parameters' hold more than "
                f"{MAX_DOCUMENT_VALUES:,} JSON values together when written out in full "
                f"(reached at {where})"
            )


def _named(entry: Any, index: int) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return f"tool {name!r}" if isinstance(name, str) else f"tools[{index}]"


def _too_deep(source: str, where: str) -> RegistryError:
    return RegistryError(
        detail=f"{source}: {where}: 'parameters' is nested deeper than its checks can walk "
        f"within Python's recursion limit ({sys.getrecursionlimit():,})"
    )


def _declaration(
    entry: Any, source: str, index: int, resolve_validator: ValidatorResolver | None
) -> ToolDeclaration:
    if not isinstance(entry, Mapping):
        raise RegistryError(detail=f"{source}: tools[{index}] is not a mapping")
    name = entry.get("name")
    where = f"{source}: {_named(entry, index)}"
    if not isinstance(name, str) or not name:
        raise RegistryError(detail=f"{where}: 'name' must be a non-empty string")
    if (problem := wire_name_problem(name)) is not None:
        raise RegistryError(
            detail=f"{where}: 'name' is not a tool name a call can carry ({problem})"
        )
    unknown = set(entry) - _TOOL_KEYS
    if unknown:
        raise RegistryError(detail=f"{where}: unknown keys {sorted(unknown)}")
    parameters = entry.get("parameters")
    if not isinstance(parameters, Mapping):
        raise RegistryError(detail=f"{where}: 'parameters' must be a JSON Schema object")
    if parameters.get("type", "object") != "object":
        raise RegistryError(detail=f"{where}: 'parameters' must describe an object")
    jsonschema = jsonschema_module()
    try:
        check_schema_patterns(parameters)  # first: its message says why RE2 refuses a pattern
    except PatternError as exc:
        raise RegistryError(detail=f"{where}: 'parameters' {exc}") from None
    try:
        jsonschema.Draft202012Validator.check_schema(
            parameters, format_checker=meta_format_checker()
        )
    except jsonschema.SchemaError as exc:
        raise RegistryError(detail=f"{where}: invalid JSON Schema: {exc.message}") from None
    cycles = ref_cycles(parameters)
    if cycles:
        raise RegistryError(
            detail=f"{where}: 'parameters' has a $ref that leads back to itself without "
            f"descending into the argument (validation would never end): {cycles[0]}"
        )
    checker = format_checker(used_formats(parameters))  # only the formats this schema uses
    validator = tool_validator_class()(parameters, format_checker=checker)
    unresolved = unresolved_refs(validator)
    if unresolved:
        shown = "; ".join(unresolved[:3])
        raise RegistryError(
            detail=f"{where}: 'parameters' has a $ref that resolves nowhere: {shown}"
        )
    limits = entry.get("limits") or {}
    if not isinstance(limits, Mapping) or set(limits) - {"max_bytes", "max_deltas"}:
        raise RegistryError(detail=f"{where}: 'limits' accepts max_bytes and max_deltas")
    validators: list[tuple[str, BusinessValidator]] = []
    for path in _str_list(entry.get("validators"), where, "validators") or ():
        if resolve_validator is None:
            raise RegistryError(detail=f"{where}: validator {path!r} given but none can be loaded")
        try:
            validators.append((path, resolve_validator(path)))
        except Exception as exc:
            raise RegistryError(detail=f"{where}: validator {path!r}: {exc}") from None
    ttl = entry.get("confirmation_ttl_seconds", 300.0)
    if not isinstance(ttl, int | float) or ttl <= 0:
        raise RegistryError(detail=f"{where}: 'confirmation_ttl_seconds' must be positive")
    try:
        dispatch_on = DispatchOn(entry.get("dispatch_on", DispatchOn.RESPONSE_END.value))
    except ValueError:
        choices = ", ".join(d.value for d in DispatchOn)
        raise RegistryError(detail=f"{where}: 'dispatch_on' must be one of {choices}") from None
    namespace = entry.get("namespace")
    if namespace is not None and (problem := wire_name_problem(namespace)) is not None:
        raise RegistryError(
            detail=f"{where}: 'namespace' must be a namespace a call can carry ({problem})"
        )
    mcp = parse_pin(entry["mcp"], where) if entry.get("mcp") is not None else None
    tenants = _str_list(entry.get("allowed_tenants"), where, "allowed_tenants")
    actors = _str_list(entry.get("allowed_actors"), where, "allowed_actors")
    aliases = tuple(_str_list(entry.get("aliases"), where, "aliases") or ())
    for alias in aliases:
        if (problem := wire_name_problem(alias)) is not None:
            raise RegistryError(
                detail=f"{where}: alias {alias!r} is not a tool name a call can carry ({problem})"
            )
    return ToolDeclaration(
        name=name,
        version=str(entry.get("version", "1")),
        parameters=parameters,
        validator=validator,
        requires_confirmation=bool(entry.get("requires_confirmation", False)),
        confirmation_ttl_seconds=float(ttl),
        aliases=aliases,
        allowed_tenants=frozenset(tenants) if tenants is not None else None,
        allowed_actors=frozenset(actors) if actors is not None else None,
        limits=ToolLimits(
            max_bytes=_positive(limits.get("max_bytes"), where, "limits.max_bytes"),
            max_deltas=_positive(limits.get("max_deltas"), where, "limits.max_deltas"),
        ),
        business_validators=tuple(validators),
        dispatch_on=dispatch_on,
        namespace=namespace,
        description=_description(entry.get("description"), where),
        mcp=mcp,
    )


def _description(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RegistryError(detail=f"{where}: 'description' must be a string")
    return value


def _identity(declaration: ToolDeclaration) -> str:
    if declaration.namespace is None:
        return f"the bare tool {declaration.name!r}"
    return f"{declaration.namespace}.{declaration.name}"


def _str_list(value: Any, where: str, key: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise RegistryError(detail=f"{where}: '{key}' must be a list of non-empty strings")
    return list(value)


def _positive(value: Any, where: str, key: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise RegistryError(detail=f"{where}: '{key}' must be a positive integer")
    return value
