"""MCP tool definitions as the registry pins them: digests, pins, comparisons, imports.

An MCP server lists its tools (``tools/list``) with a name, a description, an ``inputSchema``
and ``annotations``. Those definitions are untrusted and can change after a person reviewed
them (a "rug pull": a new description steers the model, a new schema changes what a call
carries, a new ``outputSchema`` changes how a result is judged, a new ``title``, ``icons`` or
``_meta`` reaches a client). The registry therefore pins each imported tool by its
**definition digest**, over the whole definition: ``sha256:`` + the SHA-256 of the canonical
JSON (:func:`canonical_definition`: every member of the tool object exactly as the server sent
it, those the SDK knows and any other, keys sorted at every depth, no spaces, UTF-8). Any
change of any member, or a member added or removed, is another digest.

That is digest version 2 (:data:`DIGEST_VERSION`, the pin's ``digest_version``). Version 1
covered only ``name``, ``description``, ``inputSchema`` and ``annotations``, so a server could
change the rest unnoticed: a pin without ``digest_version`` is version 1, which the registry
still loads (workers do not read the digest) but :func:`refuse_old_digests` refuses for an
executor, with a message telling the operator to re-import and review.

A registry entry of an MCP tool carries an ``mcp`` block (:class:`McpPin`)::

    mcp:
      server: bookings            # the server's name (its initialize serverInfo.name)
      digest: sha256:…            # the reviewed definition
      digest_version: 2           # what the digest covers (absent: 1, refused by executors)
      read_only: false            # readOnlyHint (default false)
      destructive: true           # destructiveHint (default true, meaningful when not read-only)
      idempotent: false           # idempotentHint (default false)
      open_world: true            # openWorldHint (default true)

:func:`compare` tells, per tool, whether the server's definition still matches its pin
(:class:`PinState`), :func:`import_entries` turns a server's listing into registry entries
(refusing, with one line each, the schemas the registry itself refuses and text that hides
characters; warning of names that look alike), and :func:`reimport_changes` says what a
re-import changes in the entries a person reviewed. Pure: no IO, no clock.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from processor.core.errors import ConfigurationError, Described, RegistryError
from processor.core.lookalikes import confusable_pairs, describe, hidden_characters, scripts

__all__ = [
    "DIGEST_PREFIX",
    "DIGEST_VERSION",
    "McpPin",
    "PinState",
    "ToolDefinition",
    "canonical_definition",
    "compare",
    "definition_digest",
    "import_entries",
    "parse_pin",
    "refuse_old_digests",
    "reimport_changes",
]

DIGEST_PREFIX: Final = "sha256:"
DIGEST_VERSION: Final = 2
"""What :func:`definition_digest` covers: 2, the whole definition (1: four members only)."""
_PIN_KEYS: Final = frozenset(
    {
        "server", "digest", "digest_version", "read_only", "destructive", "idempotent",
        "open_world", "definition",
    }
)  # fmt: skip
_ENTRY_MEMBERS: Final = frozenset({"name", "description", "inputSchema", "annotations"})
"""The tool members an entry shows in its own keys (and its ``mcp`` hints); every other member
the digest pins is shown, for review, under ``mcp.definition``."""


def canonical_definition(document: Mapping[str, Any]) -> bytes:
    """The canonical JSON of a tool definition as the server sent it: every member, keys
    sorted at every depth, no spaces, UTF-8 (numbers as Python's ``json`` writes them; an
    integer of any size is kept exact). ``ValueError`` for what JSON cannot hold (NaN)."""
    text = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8", "surrogatepass")


def definition_digest(document: Mapping[str, Any]) -> str:
    """The digest (version :data:`DIGEST_VERSION`) of one tool definition, the whole object
    as the server sent it (see the module docstring)."""
    return DIGEST_PREFIX + hashlib.sha256(canonical_definition(document)).hexdigest()


@dataclass(frozen=True)
class ToolDefinition:
    """One tool as an MCP server lists it.

    ``document`` is the whole tool object as the server sent it (wire names: ``inputSchema``,
    ``outputSchema``, ``_meta``, …, and any member the SDK does not know); the digest covers
    it. Built from the four named members alone (``document`` None), it is the object with
    those members, an absent (None) ``description`` or ``annotations`` left out.
    """

    name: str
    description: str | None
    input_schema: Any
    annotations: Mapping[str, Any] | None
    document: Mapping[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def from_wire(cls, document: Mapping[str, Any]) -> ToolDefinition:
        """A definition from the tool object of a ``tools/list`` answer (the SDK parsed it
        already, so ``name`` is a string)."""
        annotations = document.get("annotations")
        description = document.get("description")
        return cls(
            name=str(document.get("name")),
            description=description if isinstance(description, str) else None,
            input_schema=document.get("inputSchema"),
            annotations=annotations if isinstance(annotations, Mapping) else None,
            document=document,
        )

    @property
    def wire(self) -> Mapping[str, Any]:
        """The tool object the digest covers."""
        if self.document is not None:
            return self.document
        built: dict[str, Any] = {"name": self.name, "inputSchema": self.input_schema}
        if self.description is not None:
            built["description"] = self.description
        if self.annotations is not None:
            built["annotations"] = dict(self.annotations)
        return built

    @property
    def output_schema(self) -> Any:
        """The ``outputSchema`` the server declared (None: none)."""
        return self.wire.get("outputSchema")

    @property
    def digest(self) -> str:
        return definition_digest(self.wire)

    def hint(self, key: str, default: bool) -> bool:
        value = (self.annotations or {}).get(key)
        return value if isinstance(value, bool) else default


@dataclass(frozen=True)
class McpPin:
    """The ``mcp`` block of a registry entry: which server, which reviewed definition."""

    server: str
    digest: str
    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True
    digest_version: int = DIGEST_VERSION

    def as_document(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "digest": self.digest,
            "digest_version": self.digest_version,
            "read_only": self.read_only,
            "destructive": self.destructive,
            "idempotent": self.idempotent,
            "open_world": self.open_world,
        }


def parse_pin(value: Any, where: str) -> McpPin:
    """The ``mcp`` block of a tools-file entry, or :class:`RegistryError` naming what is wrong."""
    if not isinstance(value, Mapping):
        raise RegistryError(detail=f"{where}: 'mcp' must be a mapping")
    unknown = set(value) - _PIN_KEYS
    if unknown:
        raise RegistryError(detail=f"{where}: 'mcp' has unknown keys {sorted(unknown)}")
    server, digest = value.get("server"), value.get("digest")
    if not isinstance(server, str) or not server:
        raise RegistryError(detail=f"{where}: 'mcp.server' must be a non-empty string")
    if (
        not isinstance(digest, str)
        or not digest.startswith(DIGEST_PREFIX)
        or len(digest) != len(DIGEST_PREFIX) + 64
        or any(c not in "0123456789abcdef" for c in digest[len(DIGEST_PREFIX) :])
    ):
        raise RegistryError(detail=f"{where}: 'mcp.digest' must be sha256: and 64 hex digits")
    shown = value.get("definition")
    if shown is not None and not isinstance(shown, Mapping):
        raise RegistryError(detail=f"{where}: 'mcp.definition' must be a mapping")
    version = value.get("digest_version", 1)  # written since version 2; absent: version 1
    if type(version) is not int or version not in (1, DIGEST_VERSION):
        raise RegistryError(detail=f"{where}: 'mcp.digest_version' must be 1 or {DIGEST_VERSION}")
    flags: dict[str, bool] = {}
    for key, default in (
        ("read_only", False),
        ("destructive", True),
        ("idempotent", False),
        ("open_world", True),
    ):
        flag = value.get(key, default)
        if not isinstance(flag, bool):
            raise RegistryError(detail=f"{where}: 'mcp.{key}' must be true or false")
        flags[key] = flag
    return McpPin(server=server, digest=digest, digest_version=version, **flags)


def refuse_old_digests(server: str, pins: Mapping[str, McpPin]) -> None:
    """:class:`ConfigurationError` when a pin of ``server`` (by tool name) is of an older
    digest version than :data:`DIGEST_VERSION`: its digest does not cover the whole
    definition, so an executor cannot tell that the server still serves the reviewed one."""
    old = sorted(name for name, pin in pins.items() if pin.digest_version != DIGEST_VERSION)
    if old:
        shown = ", ".join(repr(name[:128]) for name in old[:5])
        raise ConfigurationError(
            "mcp_old_digest",
            f"the registry pins {len(old)} tool(s) of MCP server {server!r} ({shown}) with a "
            f"version {DIGEST_VERSION - 1} definition digest, which covers only the name, the "
            "description, inputSchema and annotations; re-import the registry with "
            "`processor tools import-mcp` and review it (the new digests cover the whole "
            "definition, outputSchema included)",
        )


class PinState(StrEnum):
    """A tool's definition on the server against the registry's pin."""

    MATCHES = "matches"
    CHANGED = "changed"  # pinned, listed, another digest: its calls fail tool_changed
    NEW = "new"  # listed, not pinned: never called (the registry does not declare it)
    REMOVED = "removed"  # pinned, not listed: its calls fail tool_unavailable


def compare(pins: Mapping[str, str], listed: Mapping[str, ToolDefinition]) -> dict[str, PinState]:
    """Each tool's state: ``pins`` maps a pinned tool name to its digest; ``listed`` is the
    server's current listing by name."""
    states: dict[str, PinState] = {}
    for name, digest in pins.items():
        definition = listed.get(name)
        if definition is None:
            states[name] = PinState.REMOVED
        elif definition.digest == digest:
            states[name] = PinState.MATCHES
        else:
            states[name] = PinState.CHANGED
    for name in listed:
        if name not in pins:
            states[name] = PinState.NEW
    return states


@dataclass(frozen=True)
class ImportResult:
    """Registry entries for the tools the registry accepts, one line per refused tool, and one
    line per warning (text written escaped, names that look alike)."""

    entries: list[dict[str, Any]]
    refused: list[str]
    warnings: list[str] = field(default_factory=list)


_TEXT_KEYS: Final = frozenset({"description", "title"})
"""Schema keywords whose string is prose for a reader (and the model), never a value a call
carries: hidden characters there can be written escaped without changing what validates."""
_PROSE_ALLOWED: Final = "\n\t"  # a description's lines and indents


class _Hidden(Described, RegistryError):
    """A string of a schema that is not prose holds characters a reader does not see."""

    def __init__(self, where: str, chars: list[str]) -> None:
        super().__init__(where)
        self.where = where
        self.chars = chars


def _reveal(text: str, escape: Callable[[str], str]) -> str:
    return "".join(c if c.isprintable() or c in _PROSE_ALLOWED else escape(c) for c in text)


_VALUE_KEYS: Final = frozenset({"const", "enum", "default", "examples"})
"""Schema keywords whose members are values, not schemas: a ``description`` in there is data."""


def _schema_text(
    value: Any,
    escape: Callable[[str], str] | None,
    path: str,
    escaped: list[str],
    *,
    data: bool = False,
) -> Any:
    """``value`` with its prose (``description``, ``title`` of a schema, not inside a value
    such as a ``const``: ``data``) escaped where it hides characters (``escaped`` collects
    where); :class:`_Hidden` for any other string that hides some, or for prose when
    ``escape`` is None."""
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, member in value.items():
            where = f"{path}/{key}"
            if isinstance(key, str) and (chars := hidden_characters(key)):
                raise _Hidden(f"{path} (a key)", chars)
            if not data and key in _TEXT_KEYS and isinstance(member, str):
                chars = hidden_characters(member, _PROSE_ALLOWED)
                if chars and escape is None:
                    raise _Hidden(where, chars)
                if chars and escape is not None:
                    escaped.append(where)
                out[key] = _reveal(member, escape) if chars and escape is not None else member
            else:
                inside = data or key in _VALUE_KEYS
                out[key] = _schema_text(member, escape, where, escaped, data=inside)
        return out
    if isinstance(value, list):
        return [
            _schema_text(m, escape, f"{path}/{i}", escaped, data=data) for i, m in enumerate(value)
        ]
    if isinstance(value, str) and (chars := hidden_characters(value)):
        raise _Hidden(path, chars)
    return value


def import_entries(
    server: str,
    definitions: Sequence[ToolDefinition],
    *,
    confirm_destructive: bool = True,
    namespace_key: bool = True,
    escape: Callable[[str], str] | None = None,
) -> ImportResult:
    """Registry entries for a server's tools.

    ``inputSchema`` becomes ``parameters``; ``requires_confirmation`` is true for a tool that
    is not read-only and is destructive (the MCP defaults: a tool without annotations is both),
    unless ``confirm_destructive`` is false; the hints are recorded in the ``mcp`` block with
    the digest. The tool version is the digest's first 12 hex digits, so a re-import of a
    changed definition is a new version. ``namespace_key``: the server's name is the entry's
    ``namespace`` (the tool's identity is then ``(server, name)``; false: a bare tool). A
    tool whose entry the registry refuses is left out, with a line.

    Hidden text (:func:`processor.core.lookalikes.hidden_characters`) is never written raw
    for review: a name holding any refuses its tool, and so does any string of its
    ``inputSchema`` other than prose (``description``, ``title``); the prose and the tool's
    description are written with each hidden character shown by ``escape`` (the digest still
    pins what the server sent), with a warning, or refuse the tool when ``escape`` is None.
    A name mixing scripts, and two names that look alike
    (:func:`processor.core.lookalikes.confusable_pairs`), are warnings.
    """
    from processor.core.registry import Registry  # noqa: PLC0415  (registry imports this module)

    entries: list[dict[str, Any]] = []
    refused: list[str] = []
    warnings: list[str] = []
    for definition in sorted(definitions, key=lambda d: d.name):
        name = definition.name
        if chars := hidden_characters(name):
            refused.append(f"tool {name!r} refused: its name hides characters ({describe(chars)})")
            continue
        description = definition.description
        if description and (chars := hidden_characters(description, _PROSE_ALLOWED)):
            if escape is None:
                refused.append(
                    f"tool {name!r} refused: its description hides characters ({describe(chars)})"
                )
                continue
            description = _reveal(description, escape)
            warnings.append(
                f"tool {name!r}: its description hides characters ({describe(chars)}); "
                "written escaped"
            )
        escaped: list[str] = []
        others = {k: v for k, v in definition.wire.items() if k not in _ENTRY_MEMBERS}
        try:
            part = "inputSchema"
            parameters = _schema_text(definition.input_schema, escape, "", escaped)
            part = "definition"
            shown_others = _schema_text(others, escape, "", escaped) if others else None
        except _Hidden as hidden:
            refused.append(
                f"tool {name!r} refused: its {part} hides characters at "
                f"{hidden.where or '/'} ({describe(hidden.chars)})"
            )
            continue
        except RecursionError:
            refused.append(f"tool {name!r} refused: its inputSchema is nested too deeply")
            continue
        if escaped:
            shown = ", ".join(escaped[:3]) + (" …" if len(escaped) > 3 else "")
            warnings.append(
                f"tool {name!r}: its inputSchema's text hides characters at {shown}; "
                "written escaped"
            )
        if len(found := scripts(name)) > 1:
            warnings.append(
                f"tool {name!a}: its name mixes scripts ({', '.join(sorted(found))}): "
                "it may imitate another name"
            )
        read_only = definition.hint("readOnlyHint", False)
        destructive = definition.hint("destructiveHint", True)
        pin = McpPin(
            server=server,
            digest=definition.digest,
            read_only=read_only,
            destructive=destructive,
            idempotent=definition.hint("idempotentHint", False),
            open_world=definition.hint("openWorldHint", True),
        )
        entry: dict[str, Any] = {"name": name}
        if namespace_key:
            entry["namespace"] = server
        entry["version"] = pin.digest[len(DIGEST_PREFIX) : len(DIGEST_PREFIX) + 12]
        if description:
            entry["description"] = description
        entry["parameters"] = parameters
        entry["requires_confirmation"] = confirm_destructive and destructive and not read_only
        entry["mcp"] = pin.as_document()
        if shown_others:  # outputSchema, title, _meta, …: pinned, so shown for review
            entry["mcp"]["definition"] = shown_others
        try:
            Registry.from_document({"tools": [entry]}, source=f"server {server!r}")
        except RegistryError as exc:
            refused.append(f"tool {name!r} refused: {exc.detail}")
            continue
        entries.append(entry)
    names = [e["name"] for e in entries]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        refused.extend(f"tool {n!r} refused: listed twice by the server" for n in duplicates)
        entries = [e for e in entries if e["name"] not in duplicates]
    warnings.extend(
        f"tools {a!a} and {b!a} look alike (confusable names)"
        for a, b in confusable_pairs(e["name"] for e in entries)
    )
    return ImportResult(entries=entries, refused=refused, warnings=warnings)


def _identity(entry: Mapping[str, Any]) -> str:
    namespace, name = entry.get("namespace"), entry.get("name")
    return f"{namespace}.{name}" if namespace is not None else str(name)


def _digest_of(entry: Mapping[str, Any]) -> Any:
    pin = entry.get("mcp")
    return pin.get("digest") if isinstance(pin, Mapping) else None


def reimport_changes(
    previous: Sequence[Mapping[str, Any]], imported: Sequence[Mapping[str, Any]]
) -> list[str]:
    """What a re-import changes in a server's reviewed entries, one line each: a tool added or
    removed, and for a tool in both, what differs (its definition, ``requires_confirmation``
    turned off or on, any other key of the reviewed entry changed, added or dropped). Tools are
    matched by ``namespace.name``; an empty list means the entries stay exactly as reviewed."""
    before = {_identity(e): e for e in previous}
    after = {_identity(e): e for e in imported}
    lines = [f"removed: {key!r}" for key in sorted(before.keys() - after.keys())]
    lines += [f"added: {key!r}" for key in sorted(after.keys() - before.keys())]
    for key in sorted(before.keys() & after.keys()):
        old, new = before[key], after[key]
        what: list[str] = []
        if _digest_of(old) != _digest_of(new):
            what.append("its definition (mcp.digest)")
        was, now = bool(old.get("requires_confirmation")), bool(new.get("requires_confirmation"))
        if was != now:
            what.append(f"requires_confirmation turned {'off' if was else 'on'}")
        others = sorted(
            str(k)
            for k in old.keys() | new.keys()
            if k not in ("mcp", "version", "requires_confirmation", "description", "parameters")
            and old.get(k) != new.get(k)
        )
        if others:
            what.append(f"reviewed keys {', '.join(others)}")
        if not what and old != new:
            what.append("its written entry")
        if what:
            lines.append(f"changed: {key!r}: {'; '.join(what)}")
    return lines
