"""The wire contract's six outputs: ``dispatch``, ``proposals``, ``status``, ``ledger``,
``audit`` and ``deadletter``.

Owns their models, the :data:`OutputRecord` union, :data:`OUTPUT_TYPES` and
:data:`OUTPUT_TOPIC` (which topic each goes to). Imported through :mod:`processor.core.events`,
which encodes them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, Field

from processor.core.wire_types import (
    CallKey,
    CallRecord,
    Id,
    Ident,
    Lax,
    Name,
    Reason,
    Tenant,
    Time,
    _Record,
)

# --------------------------------------------------------------------------- outputs


class Dispatch(CallRecord):
    """A validated, bound, permitted (and where required, confirmed) call for executors."""

    type: Literal["dispatch"] = "dispatch"
    dispatch_id: Id
    tool: Name
    namespace: Name | None = None  # the tool's namespace (absent: a bare tool)
    tool_version: str
    arguments: dict[str, Any]
    args_digest: Id
    actor: Id
    provider: Name
    terminal_event_id: Id
    confirmation_ref: Id | None = None
    ts: Time


class Proposal(CallRecord):
    """A validated call that waits for the user's confirmation of exactly ``args_digest``."""

    type: Literal["proposal"] = "proposal"
    proposal_id: Id
    tool: Name
    namespace: Name | None = None  # the tool's namespace (absent: a bare tool)
    tool_version: str
    arguments: dict[str, Any]
    args_digest: Id
    actor: Id
    expires_at: Time
    ts: Time


class UserState(StrEnum):
    PREPARING = "preparing"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    DISPATCHED = "dispatched"
    CANCELLED = "cancelled"
    FAILED = "failed"


class Status(CallRecord):
    """What the user may be told. ``preparing`` is a cue, never an action."""

    type: Literal["status"] = "status"
    status_id: Id
    tool: Name | None = None
    namespace: Name | None = None  # the tool's namespace (absent: a bare tool)
    state: Annotated[UserState, Lax]
    retry_possible: bool
    message: Reason
    provider_reason: Reason | None = None  # the provider's stop reason, when it voided the call
    ts: Time


class Ledger(CallRecord):
    """What happened to one call, once it is terminal. Never argument values."""

    type: Literal["ledger"] = "ledger"
    ledger_id: Id
    tool: Name | None
    namespace: Name | None = None  # the tool's namespace as resolved, else as written
    tool_version: str | None = None
    alias_used: Name | None = None
    state: str
    terminal_reason: str | None
    fragment_count: int
    duplicate_count: int
    bytes: int
    parse_result: str | None = None
    validation_result: str | None = None
    dispatch_decision: str
    dispatch_id: Id | None = None
    args_digest: Id | None = None
    provider_reason: Reason | None = None  # the provider's stop reason, when it voided the call
    ts: Time


class AuditOutcome(StrEnum):
    """What became of a command (see ``processor.core.control`` for the replay rules).

    ``duplicate``: a command that only makes things safer, repeated with the same id and the same
    content; a no-op (its first copy applied). ``conflict``: such a command whose id was used
    before, in the same scope, by a different command; it was applied all the same.
    """

    APPLIED = "applied"
    REJECTED = "rejected"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"


class Audit(_Record):
    """A control or operator command, who issued it, why, and the call keys it touched."""

    type: Literal["audit"] = "audit"
    audit_id: Id
    command_id: Ident
    command_type: Name
    issued_by: Id
    tenant: Tenant | None = None
    reason: Reason
    outcome: Annotated[AuditOutcome, Lax]
    rejection: Reason | None = None
    affected: list[CallKey] = Field(default_factory=list)
    ts: Time


class DeadLetter(_Record):
    """A record that could not be used. Carries coordinates, size and digest, never the payload."""

    type: Literal["deadletter"] = "deadletter"
    deadletter_id: Id
    source_topic: str
    partition: int
    offset: int
    reason: Reason
    detail: Reason = ""
    payload_bytes: int
    payload_sha256: str
    ts: Time


OutputRecord = Dispatch | Proposal | Status | Ledger | Audit | DeadLetter
OUTPUT_TYPES: Final = (Dispatch, Proposal, Status, Ledger, Audit, DeadLetter)

# Which output topic (without prefix) each output record belongs to.
OUTPUT_TOPIC: Final[dict[type[BaseModel], str]] = {
    Dispatch: "dispatch",
    Proposal: "proposals",
    Status: "status",
    Ledger: "ledger",
    Audit: "audit",
    DeadLetter: "deadletter",
}
