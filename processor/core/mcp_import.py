"""A server's listing as registry entries for review, and what a re-import changes. Pure.

:func:`import_entries` turns an MCP server's ``tools/list`` into registry entries pinned by
their definition digest (:mod:`processor.core.mcp_pins`), refusing, with one line each, the
schemas the registry itself refuses and text that hides characters, and warning of names that
look alike (:mod:`processor.core.lookalikes`); :func:`reimport_changes` says what a re-import
changes in the entries a person reviewed. It checks each entry with the registry
(:mod:`processor.core.registry`), which imports the pins module, never this one: the import
order is pins → registry → import, without a circle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from processor.core.errors import Described, RegistryError
from processor.core.lookalikes import confusable_pairs, describe, hidden_characters, scripts
from processor.core.mcp_pins import DIGEST_PREFIX, McpPin, ToolDefinition
from processor.core.registry import Registry

__all__ = ["ImportResult", "import_entries", "reimport_changes"]

_ENTRY_MEMBERS: Final = frozenset({"name", "description", "inputSchema", "annotations"})
"""The tool members an entry shows in its own keys (and its ``mcp`` hints); every other member
the digest pins is shown, for review, under ``mcp.definition``."""


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
