"""MCP tool definitions as the registry pins them: digests, pins, comparisons.

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
(:class:`PinState`). Turning a listing into registry entries is :mod:`processor.core.mcp_import`
(it uses the registry, which uses this module: no circle). Pure: no IO, no clock.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from processor.core.errors import ConfigurationError, RegistryError

__all__ = [
    "DIGEST_PREFIX",
    "DIGEST_VERSION",
    "McpPin",
    "PinState",
    "ToolDefinition",
    "canonical_definition",
    "compare",
    "definition_digest",
    "parse_pin",
    "refuse_old_digests",
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
