"""The wire contract, version 1: every record that crosses a topic, as pydantic v2 models.

This module owns the shape of fragment events (the ``fragments`` topic), control events (the
``control`` topic) and the six outputs (``dispatch``, ``proposals``, ``status``, ``ledger``,
``audit``, ``deadletter``). Field names are part of the contract that adapters and executors in
other languages rely on; ``schemas/*.schema.json`` is generated from these models by
``processor schemas export`` and a test fails when the two drift.

Decoding is strict and total: :func:`decode_input` either returns a model or raises
:class:`~processor.core.errors.RecordRejected` with a reason, never anything else, so an
undecodable record becomes a dead letter and never a crash.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from processor.core.errors import RecordRejected

WIRE_VERSION: Final = 1

Id = Annotated[str, Field(min_length=1, max_length=256)]
Name = Annotated[str, Field(min_length=1, max_length=128)]
Reason = Annotated[str, Field(max_length=512)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1


# --------------------------------------------------------------------------- call identity


class CallKey(BaseModel):
    """The identity of one tool call. Never key by ``call_id`` alone: it is not globally unique."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: Id
    turn_id: Id
    response_id: Id
    item_id: Id
    call_id: Id

    @property
    def turn_key(self) -> str:
        return turn_key(self.tenant, self.turn_id)

    @property
    def as_tuple(self) -> tuple[str, str, str, str, str]:
        return (self.tenant, self.turn_id, self.response_id, self.item_id, self.call_id)

    def encoded(self) -> str:
        """A stable, injective string form (used as a state key and in digests)."""
        return orjson.dumps(list(self.as_tuple)).decode()


def turn_key(tenant: str, turn_id: str) -> str:
    """The Kafka key of every turn-scoped record: ``tenant/turn_id``."""
    return f"{tenant}/{turn_id}"


class CallRecord(_Record):
    tenant: Id
    turn_id: Id
    response_id: Id
    item_id: Id
    call_id: Id

    @property
    def key(self) -> CallKey:
        return CallKey(
            tenant=self.tenant,
            turn_id=self.turn_id,
            response_id=self.response_id,
            item_id=self.item_id,
            call_id=self.call_id,
        )


# --------------------------------------------------------------------------- fragments


class _Fragment(CallRecord):
    event_id: Id
    provider: Name
    ts: float


class CallStarted(_Fragment):
    """A call opened: names the tool as the model wrote it and the actor the adapter saw."""

    type: Literal["call.started"] = "call.started"
    seq: Literal[0] = 0
    tool: Name
    actor: Id
    session: Id | None = None


class CallDelta(_Fragment):
    """One piece of a call's argument text at documented position ``seq`` (1..n)."""

    type: Literal["call.delta"] = "call.delta"
    seq: Annotated[int, Field(ge=1)]
    delta: str


class CallEnded(_Fragment):
    """The protocol's terminal signal for one call.

    ``seq`` is the position after the last delta (n + 1 for n deltas), so the Assembler knows
    whether every position 1..n arrived. ``arguments`` is the provider's full final argument
    text where the protocol repeats it, used only as a cross-check.
    """

    type: Literal["call.ended"] = "call.ended"
    seq: Annotated[int, Field(ge=1)]
    terminal_event_id: Id
    arguments: str | None = None


class ResponseStatus(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    INCOMPLETE = "incomplete"
    CANCELLED = "cancelled"
    ERROR = "error"
    NOT_CHOSEN = "not_chosen"  # an alternative (n > 1, candidateCount > 1) that must not act


class ResponseEnded(_Record):
    """A provider response ended: every call of it still open becomes inert."""

    type: Literal["response.ended"] = "response.ended"
    event_id: Id
    tenant: Id
    turn_id: Id
    response_id: Id
    provider: Name
    ts: float
    status: ResponseStatus
    reason: Reason = ""


FragmentEvent = Annotated[
    CallStarted | CallDelta | CallEnded | ResponseEnded, Field(discriminator="type")
]


# --------------------------------------------------------------------------- control


class _Control(_Record):
    command_id: Id
    issued_by: Id
    issued_at: float
    reason: Reason = ""


class TurnCancelReason(StrEnum):
    USER_STOP = "user_stop"
    SUPERSEDED = "superseded"
    CONNECTION_LOST = "connection_lost"


class TurnStarted(_Control):
    """Binds the authenticated actor to a turn (written by the gateway)."""

    type: Literal["turn.started"] = "turn.started"
    tenant: Id
    turn_id: Id
    actor: Id
    session: Id | None = None


class TurnCancelled(_Control):
    """Absorbing: the turn's open calls become inert and its later events are rejected.

    ``reason`` is one of :class:`TurnCancelReason` or a free-form operator reason.
    """

    type: Literal["turn.cancelled"] = "turn.cancelled"
    tenant: Id
    turn_id: Id


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
    expires_at: float | None = None
    signature: str | None = None


class ResponseQuarantined(_Operator):
    type: Literal["response.quarantined"] = "response.quarantined"
    tenant: Id
    turn_id: Id
    response_id: Id


class ToolDisabled(_Operator):
    """Disable ``tool`` for ``tenant`` (or for every tenant when ``tenant`` is null)."""

    type: Literal["tool.disabled"] = "tool.disabled"
    tool: Name
    tenant: Id | None = None


class ToolEnabled(_Operator):
    type: Literal["tool.enabled"] = "tool.enabled"
    tool: Name
    tenant: Id | None = None


class TenantStopped(_Operator):
    """Stop every in-flight buffer of ``tenant`` and refuse its new calls until resumed."""

    type: Literal["tenant.stopped"] = "tenant.stopped"
    tenant: Id


class TenantResumed(_Operator):
    type: Literal["tenant.resumed"] = "tenant.resumed"
    tenant: Id


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

InputEvent = Annotated[
    CallStarted
    | CallDelta
    | CallEnded
    | ResponseEnded
    | TurnStarted
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

FRAGMENT_TYPES: Final = frozenset({"call.started", "call.delta", "call.ended", "response.ended"})
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


# --------------------------------------------------------------------------- outputs


class Dispatch(CallRecord):
    """A validated, bound, permitted (and where required, confirmed) call for executors."""

    type: Literal["dispatch"] = "dispatch"
    dispatch_id: Id
    tool: Name
    tool_version: str
    arguments: dict[str, Any]
    args_digest: Id
    actor: Id
    provider: Name
    terminal_event_id: Id
    confirmation_ref: Id | None = None
    ts: float


class Proposal(CallRecord):
    """A validated call that waits for the user's confirmation of exactly ``args_digest``."""

    type: Literal["proposal"] = "proposal"
    proposal_id: Id
    tool: Name
    tool_version: str
    arguments: dict[str, Any]
    args_digest: Id
    actor: Id
    expires_at: float
    ts: float


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
    state: UserState
    retry_possible: bool
    message: Reason
    provider_reason: Reason | None = None  # the provider's stop reason, when it voided the call
    ts: float


class Ledger(CallRecord):
    """What happened to one call, once it is terminal. Never argument values."""

    type: Literal["ledger"] = "ledger"
    ledger_id: Id
    tool: Name | None
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
    ts: float


class AuditOutcome(StrEnum):
    APPLIED = "applied"
    REJECTED = "rejected"


class Audit(_Record):
    """A control or operator command, who issued it, why, and the call keys it touched."""

    type: Literal["audit"] = "audit"
    audit_id: Id
    command_id: Id
    command_type: Name
    issued_by: Id
    tenant: Id | None = None
    reason: Reason
    outcome: AuditOutcome
    rejection: Reason | None = None
    affected: list[CallKey] = Field(default_factory=list)
    ts: float


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
    ts: float


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


# --------------------------------------------------------------------------- codec

_INPUT_ADAPTER: Final[TypeAdapter[InputEvent]] = TypeAdapter(InputEvent)
ALL_INPUT_TYPES: Final = FRAGMENT_TYPES | CONTROL_TYPES


def decode_input(payload: bytes | str) -> InputEvent:
    """Decode one fragment or control record, or raise :class:`RecordRejected` with a reason."""
    try:
        raw = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise RecordRejected("undecodable", f"not JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise RecordRejected("undecodable", "record is not a JSON object")
    version = raw.get("v")
    if version != WIRE_VERSION:
        raise RecordRejected("unknown_version", f"unsupported wire version v={version!r}")
    kind = raw.get("type")
    if kind not in ALL_INPUT_TYPES:
        shown = kind if isinstance(kind, str) and len(kind) <= 64 else type(kind).__name__
        raise RecordRejected("unknown_type", f"unknown record type {shown!r}")
    try:
        return _INPUT_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise RecordRejected("invalid_record", describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    """Field locations and error kinds only: a record's values may be argument text."""
    parts = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False)[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "$"
        parts.append(f"{loc}: {err['type']}")
    return "; ".join(parts)


def encode(record: BaseModel) -> bytes:
    """The one canonical encoding of every record (orjson, ``None`` fields kept)."""
    return orjson.dumps(record.model_dump(mode="json"))


def stable_id(*parts: str) -> str:
    """A deterministic id from its parts (the core has no randomness)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.hexdigest()[:32]
