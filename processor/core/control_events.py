"""The wire contract's control events: what the gateway and operators write to ``control``.

Owns the models of turn bindings and cancellations, confirmations and denials, and the signed
operator commands (quarantine, tool switches, tenant stop and resume), the :data:`ControlEvent`
union, :data:`OPERATOR_TYPES` and :data:`CONTROL_TYPES`. Imported through
:mod:`processor.core.events`, which decodes and encodes them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import Field

from processor.core.wire_types import CallRecord, Id, Ident, Name, Reason, Tenant, Time, _Record

# --------------------------------------------------------------------------- control


class _Control(_Record):
    command_id: Ident
    issued_by: Id
    issued_at: Time
    reason: Reason = ""


class TurnCancelReason(StrEnum):
    USER_STOP = "user_stop"
    SUPERSEDED = "superseded"
    CONNECTION_LOST = "connection_lost"


class TurnStarted(_Control):
    """Binds the authenticated actor to a turn (written by the gateway)."""

    type: Literal["turn.started"] = "turn.started"
    tenant: Tenant
    turn_id: Ident
    actor: Id
    session: Id | None = None


class TurnCancelled(_Control):
    """Absorbing: the turn's open calls become inert and its later events are rejected.

    ``reason`` is one of :class:`TurnCancelReason` or a free-form operator reason.
    """

    type: Literal["turn.cancelled"] = "turn.cancelled"
    tenant: Tenant
    turn_id: Ident


class CallConfirmed(_Control, CallRecord):
    """The user confirmed exactly the arguments whose digest is ``args_digest``."""

    type: Literal["call.confirmed"] = "call.confirmed"
    actor: Id
    args_digest: Id


class CallDenied(_Control, CallRecord):
    type: Literal["call.denied"] = "call.denied"
    actor: Id
    args_digest: Id | None = None


class _Operator(_Control):
    """An operator command. Signed (Ed25519 over the canonical JSON without ``signature``)."""

    key_id: Id | None = None
    expires_at: Time | None = None
    signature: str | None = None


class ResponseQuarantined(_Operator):
    type: Literal["response.quarantined"] = "response.quarantined"
    tenant: Tenant
    turn_id: Ident
    response_id: Ident


class ToolDisabled(_Operator):
    """Disable ``tool`` for ``tenant`` (or for every tenant when ``tenant`` is null)."""

    type: Literal["tool.disabled"] = "tool.disabled"
    tool: Name
    tenant: Tenant | None = None


class ToolEnabled(_Operator):
    type: Literal["tool.enabled"] = "tool.enabled"
    tool: Name
    tenant: Tenant | None = None


class TenantStopped(_Operator):
    """Stop every in-flight buffer of ``tenant`` and refuse its new calls until resumed."""

    type: Literal["tenant.stopped"] = "tenant.stopped"
    tenant: Tenant


class TenantResumed(_Operator):
    type: Literal["tenant.resumed"] = "tenant.resumed"
    tenant: Tenant


OperatorCommand = ResponseQuarantined | ToolDisabled | ToolEnabled | TenantStopped | TenantResumed
OPERATOR_TYPES: Final = (
    ResponseQuarantined,
    ToolDisabled,
    ToolEnabled,
    TenantStopped,
    TenantResumed,
)

ControlEvent = Annotated[
    TurnStarted
    | TurnCancelled
    | CallConfirmed
    | CallDenied
    | ResponseQuarantined
    | ToolDisabled
    | ToolEnabled
    | TenantStopped
    | TenantResumed,
    Field(discriminator="type"),
]

CONTROL_TYPES: Final = frozenset(
    {
        "turn.started",
        "turn.cancelled",
        "call.confirmed",
        "call.denied",
        "response.quarantined",
        "tool.disabled",
        "tool.enabled",
        "tenant.stopped",
        "tenant.resumed",
    }
)
