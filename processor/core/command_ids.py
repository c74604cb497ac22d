"""Command ids: replay protection for every command of the ``control`` topic. No IO.

A command id is remembered in its *scope*: the command's type, its signer (the
operator key id of a signed command, ``unsigned`` otherwise), its tenant and its target (turn,
response, call key or tool) and the id itself (:func:`command_scope`). An unsigned record, another
operator's key, another tenant or another target can therefore never consume the id of a signed
command. Within a scope the rule depends on what the command does (:data:`COMMAND_CLASS`):

- commands that only make things safer (``turn.cancelled``, ``call.denied``,
  ``response.quarantined``, ``tool.disabled``, ``tenant.stopped``) are never dropped as replays:
  an identical repeat (same id, same content) is a no-op audited ``duplicate``; the same id with a
  different content is audited ``conflict`` and the command is applied all the same;
- commands that grant (``call.confirmed``, ``tool.enabled``, ``tenant.resumed``) are strictly
  deduplicated: a second sight of the id in its scope is ``replayed`` and not applied.

The executor's fence (``processor.executor.fence``) applies the same rule through
:func:`judge_command`. Seen ids are forgotten after the retention window, like every inert fact.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from processor.core.events import (
    OPERATOR_TYPES,
    CallConfirmed,
    CallDenied,
    OperatorCommand,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    encode,
    encode_key,
)

Command = TurnCancelled | CallConfirmed | CallDenied | OperatorCommand
"""Every control record that carries a replay-protected ``command_id``."""


class CommandClass(StrEnum):
    SAFETY = "safety"  # only makes things safer: never dropped as a replay
    GRANT = "grant"  # grants or restores something: strictly deduplicated


COMMAND_CLASS: Final[dict[str, CommandClass]] = {
    "turn.cancelled": CommandClass.SAFETY,
    "call.denied": CommandClass.SAFETY,
    "response.quarantined": CommandClass.SAFETY,
    "tool.disabled": CommandClass.SAFETY,
    "tenant.stopped": CommandClass.SAFETY,
    "call.confirmed": CommandClass.GRANT,
    "tool.enabled": CommandClass.GRANT,
    "tenant.resumed": CommandClass.GRANT,
}


class Verdict(StrEnum):
    """What replay protection says of one command (see the module docstring)."""

    NEW = "new"  # apply
    CONFLICT = "conflict"  # a safety command whose id was used by another one: apply, audit
    DUPLICATE = "duplicate"  # a safety command repeated identically: no-op
    REPLAYED = "replayed"  # a granting command seen before: refuse

    @property
    def applies(self) -> bool:
        return self in (Verdict.NEW, Verdict.CONFLICT)


UNSIGNED: Final = "unsigned"


@dataclass(slots=True)
class SeenCommand:
    """A remembered command id: when it was first seen and its content digest."""

    at: float
    digest: str


def command_scope(event: Command) -> str:
    """The encoded scope a command id is remembered in: (type, signer, tenant, target…, id)."""
    signer = UNSIGNED
    target: tuple[str | None, ...]
    match event:
        case TurnCancelled():
            target = (event.tenant, event.turn_id)
        case CallConfirmed() | CallDenied():
            target = event.key.as_tuple
        case ResponseQuarantined():
            target = (event.tenant, event.turn_id, event.response_id)
        case ToolDisabled() | ToolEnabled():
            target = (event.tenant, event.tool)
        case TenantStopped() | TenantResumed():
            target = (event.tenant,)
    if isinstance(event, OPERATOR_TYPES):
        signer = event.key_id or UNSIGNED
    return encode_key((event.type, signer, *target, event.command_id))


def command_digest(event: Command) -> str:
    """The content of a command, as a digest (two copies of one command share it)."""
    return hashlib.sha256(encode(event)).hexdigest()[:32]


def judge_command(seen: dict[str, SeenCommand], event: Command, now: float) -> tuple[Verdict, str]:
    """Replay protection for one command: its verdict and its scope (remembered when new)."""
    scope = command_scope(event)
    known = seen.get(scope)
    if known is None:
        seen[scope] = SeenCommand(at=now, digest=command_digest(event))
        return Verdict.NEW, scope
    if COMMAND_CLASS[event.type] is CommandClass.GRANT:
        return Verdict.REPLAYED, scope
    if known.digest == command_digest(event):
        return Verdict.DUPLICATE, scope
    return Verdict.CONFLICT, scope
