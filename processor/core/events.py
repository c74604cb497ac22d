"""The wire contract, version 1: every record that crosses a topic, as pydantic v2 models.

This module owns the shape of fragment events (the ``fragments`` topic), control events (the
``control`` topic) and the six outputs (``dispatch``, ``proposals``, ``status``, ``ledger``,
``audit``, ``deadletter``). Field names are part of the contract that adapters and executors in
other languages rely on; ``schemas/*.schema.json`` is generated from these models by
``processor schemas export`` and a test fails when the two drift.

Decoding is strict and total: :func:`decode_input` either returns a model or raises
:class:`~processor.core.errors.RecordRejected` with a reason, never anything else, so an
undecodable record becomes a dead letter and never a crash. Strict means the contract's own types
and nothing that merely compares equal to them: ``"v": true`` is not version 1, ``"seq": "3"`` is
not a position, ``"ts": "nan"`` is not a time. Times (``ts``, ``issued_at``, ``expires_at``) are
finite JSON numbers (an integer such as ``1700000000`` is accepted as a time; a boolean, a string,
NaN or an infinity is not), and a caller that knows the time of reading passes ``now`` so that a
record claiming a time beyond ``now`` plus a clock-skew allowance is refused as ``future_time``.

Identifiers (the call key's ``tenant``, ``turn_id``, ``response_id``, ``item_id``, ``call_id``,
and every ``command_id``) are 1 to 256 visible ASCII characters (``!`` to ``~``: no space, no
control character, nothing outside ASCII). A ``tenant`` has no ``/``, so the turn key
``tenant/turn_id`` splits at its first ``/`` and names one turn, and no ``*``, which means "every
tenant" in tool switches and operator scopes. Real provider ids (``call_…``, ``toolu_…``,
``fc_…``, ``resp_…``, base64-ish Gemini ids) and adapter-made ids (``#0``, ``synthetic:…``) fit.
Other names and ids (actors, issuers, tool names, event ids) are 1 to 256 (tool names 128)
characters without control characters. State keys never rely on any of this: :func:`encode_key`
is injective for any strings.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from enum import StrEnum
from types import UnionType
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

import orjson
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from processor.core.errors import RecordRejected

WIRE_VERSION: Final = 1

IDENT_PATTERN: Final = r"^[!-~]{1,256}$"
"""A key identifier: 1 to 256 visible ASCII characters (``!`` to ``~``)."""
TENANT_PATTERN: Final = r"^[!-)+-.0-~]{1,256}$"
"""A tenant: an identifier without ``/`` (the turn key ``tenant/turn_id`` splits at its first
``/``) and without ``*`` (which names every tenant in tool switches and operator scopes)."""
_NO_CONTROL: Final = r"^[^\x00-\x1f\x7f-\x9f]*$"

Ident = Annotated[str, Field(min_length=1, max_length=256, pattern=IDENT_PATTERN)]
"""``turn_id``, ``response_id``, ``item_id``, ``call_id``, ``command_id``."""
Tenant = Annotated[str, Field(min_length=1, max_length=256, pattern=TENANT_PATTERN)]
Id = Annotated[str, Field(min_length=1, max_length=256, pattern=_NO_CONTROL)]
"""Other ids and names (actors, issuers, event ids, digests): no control characters."""
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=_NO_CONTROL)]
Reason = Annotated[str, Field(max_length=512, pattern=r"(?s)^.*$")]
"""Free text up to 512 characters; the pattern refuses a lone surrogate, which no UTF-8 JSON holds
(so a command built in-process can always be signed and encoded)."""
Time = Annotated[float, Field(allow_inf_nan=False)]
"""Epoch seconds: a finite JSON number (integers accepted; booleans, strings, NaN, ±inf not)."""


def _exactly(value: object) -> object:
    """A ``Literal`` integer must be an integer: ``True`` compares equal to 1 and is refused."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not an integer")
    return value


_STRICT: Final = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)
"""Strict types on the wire: no coercion from strings, booleans or floats."""
Lax = Field(strict=False)
"""Enums decode from their JSON value (a string); strict mode would want the Python member."""


class _Record(BaseModel):
    model_config = _STRICT

    v: Annotated[Literal[1], BeforeValidator(_exactly)] = 1


# --------------------------------------------------------------------------- call identity


class CallKey(BaseModel):
    """The identity of one tool call. Never key by ``call_id`` alone: it is not globally unique."""

    model_config = _STRICT

    tenant: Tenant
    turn_id: Ident
    response_id: Ident
    item_id: Ident
    call_id: Ident

    @property
    def turn_key(self) -> str:
        return turn_key(self.tenant, self.turn_id)

    @property
    def as_tuple(self) -> tuple[str, str, str, str, str]:
        return (self.tenant, self.turn_id, self.response_id, self.item_id, self.call_id)

    def encoded(self) -> str:
        """A stable, injective string form (used as a state key and in digests)."""
        return encode_key(self.as_tuple)


def turn_key(tenant: str, turn_id: str) -> str:
    """The Kafka key of every turn-scoped record: ``tenant/turn_id``."""
    return f"{tenant}/{turn_id}"


class CallRecord(_Record):
    tenant: Tenant
    turn_id: Ident
    response_id: Ident
    item_id: Ident
    call_id: Ident

    @property
    def key(self) -> CallKey:
        # the record's own fields were validated when it was made: no second validation
        return trusted_call_key(
            self.tenant, self.turn_id, self.response_id, self.item_id, self.call_id
        )


_CALL_KEY_FIELDS: Final = frozenset(CallKey.model_fields)


def trusted_call_key(
    tenant: str, turn_id: str, response_id: str, item_id: str, call_id: str
) -> CallKey:
    """A CallKey from already-validated ids, without validation.

    What ``CallKey.model_construct`` makes (equal, same hash, same fields set), at a third of
    its cost: the Assembler needs one per fragment event, so it is on the per-delta path.
    """
    key = CallKey.__new__(CallKey)
    put = object.__setattr__
    put(
        key,
        "__dict__",
        {
            "tenant": tenant,
            "turn_id": turn_id,
            "response_id": response_id,
            "item_id": item_id,
            "call_id": call_id,
        },
    )
    put(key, "__pydantic_fields_set__", set(_CALL_KEY_FIELDS))
    put(key, "__pydantic_extra__", None)
    put(key, "__pydantic_private__", None)
    return key


# --------------------------------------------------------------------------- fragments


class _Fragment(CallRecord):
    event_id: Id
    provider: Name
    ts: Time


class CallStarted(_Fragment):
    """A call opened: names the tool as the model wrote it and the actor the adapter saw."""

    type: Literal["call.started"] = "call.started"
    seq: Annotated[Literal[0], BeforeValidator(_exactly)] = 0
    tool: Name
    namespace: Name | None = None
    """The namespace the model named the tool in (OpenAI Responses ``namespace``); absent or
    null: a bare tool. Part of the tool's identity: ``crm`` + ``transfer`` is not ``transfer``."""
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
    tenant: Tenant
    turn_id: Ident
    response_id: Ident
    provider: Name
    ts: Time
    status: Annotated[ResponseStatus, Lax]
    reason: Reason = ""


FragmentEvent = Annotated[
    CallStarted | CallDelta | CallEnded | ResponseEnded, Field(discriminator="type")
]


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


# --------------------------------------------------------------------------- codec

# One model per record type: decoding validates with the model its ``type`` names (as the
# discriminated union would), so only the models a process actually reads are ever built
# (``defer_build``: ``processor replay`` on a small file starts fast).
_INPUT_MODELS: Final[dict[str, type[BaseModel]]] = {
    model.model_fields["type"].default: model for model in get_args(get_args(InputEvent)[0])
}
ALL_INPUT_TYPES: Final = FRAGMENT_TYPES | CONTROL_TYPES


DEFAULT_CLOCK_SKEW_SECONDS: Final = 60.0
"""How far in the future of the reader's ``now`` a record's own time may be (clock skew)."""


def decode_input(
    payload: bytes | str,
    *,
    now: float | None = None,
    clock_skew: float = DEFAULT_CLOCK_SKEW_SECONDS,
) -> InputEvent:
    """Decode one fragment or control record, or raise :class:`RecordRejected` with a reason.

    Total: any bytes, any JSON value in any field, give a model or ``RecordRejected``. With
    ``now``, a record whose own time (``ts`` or ``issued_at``) is more than ``clock_skew``
    seconds after ``now`` is rejected as ``future_time``.
    """
    return decode_input_value(parse_input(payload), now=now, clock_skew=clock_skew)


def parse_input(payload: bytes | str) -> object:
    """The JSON value of a record, or ``RecordRejected("undecodable")``."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise RecordRejected("undecodable", f"not JSON: {exc.msg}") from None


def decode_input_value(
    raw: object, *, now: float | None = None, clock_skew: float = DEFAULT_CLOCK_SKEW_SECONDS
) -> InputEvent:
    """:func:`decode_input` of a record already parsed as JSON (``orjson.loads``)."""
    if not isinstance(raw, dict):
        raise RecordRejected("undecodable", "record is not a JSON object")
    version = raw.get("v")
    if type(version) is not int or version != WIRE_VERSION:
        shown = version if type(version) is int else type(version).__name__
        raise RecordRejected("unknown_version", f"unsupported wire version v={shown!r}")
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in ALL_INPUT_TYPES:
        shown = quoted_name(kind) if isinstance(kind, str) else type(kind).__name__
        raise RecordRejected("unknown_type", f"unknown record type {shown}")
    try:
        event: InputEvent = _INPUT_MODELS[kind].model_validate(raw)  # type: ignore[assignment]
    except ValidationError as exc:
        raise RecordRejected("invalid_record", describe_validation_error(exc, kind)) from None
    if now is not None:
        check_time(event, now, clock_skew)
    return event


_DATED_BY_TS: Final = (_Fragment, ResponseEnded)  # a tuple: ``A | B`` would build a union a call


def event_time(event: InputEvent) -> float:
    """When a record says it was made: ``ts`` of a fragment, ``issued_at`` of a command."""
    if isinstance(event, _DATED_BY_TS):
        return event.ts
    return event.issued_at


def check_time(event: InputEvent, now: float, clock_skew: float) -> None:
    """Raise ``RecordRejected("future_time")`` for a record dated beyond ``now + clock_skew``."""
    when = event_time(event)
    if not math.isfinite(when) or when > now + clock_skew:
        raise RecordRejected(
            "future_time", f"{event.type} dated more than {clock_skew:g} s after its reading"
        )


def describe_validation_error(exc: ValidationError, kind: str | None = None) -> str:
    """Field locations and error kinds only: a record's values may be argument text. ``kind``
    (the record's type) prefixes every location, as a discriminated union's errors have it.

    A record's keys are payload too (``{"api_key=sk-…": 1}`` is a key): a location part that is
    not a declared field name (an unknown key, or anything not shaped like a field name) is
    shown by :func:`quoted_name`, never as its text, so the description is bounded (at most
    five errors of at most ``_MAX_LOC`` parts) whatever the record holds."""
    parts = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False)[:5]:
        loc = err["loc"][:_MAX_LOC]
        unknown = len(loc) - 1 if err["type"] == "extra_forbidden" else -1
        shown = [_loc_part(p, i == unknown) for i, p in enumerate(loc)]
        where = ".".join([kind, *shown] if kind is not None else shown) or "$"
        if len(err["loc"]) > _MAX_LOC:
            where += ".…"
        parts.append(f"{where}: {err['type']}")
    return "; ".join(parts)


def _loc_part(part: str | int, unknown: bool) -> str:
    if isinstance(part, int):
        return str(part)
    return quoted_name(part) if unknown or not _FIELD_NAME.match(part) else part


_MAX_LOC: Final = 6
_FIELD_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,39}\Z")


def quoted_name(text: str) -> str:
    """A stand-in for a name a record chose (an unknown key or type): its length and a short
    digest, never its text, so a dead letter names it without carrying it (a key can be
    payload, e.g. ``api_key=…``) and two reports of one name can still be matched."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"<name #{digest} {len(text)} chars>"


def _flat_value(annotation: Any) -> bool:
    """Whether every value of this annotation is stored as the JSON value it dumps to (a
    string, number, bool, None, string enum, or a dict or list of JSON values)."""
    if annotation in (str, int, float, bool, type(None), Any):
        return True
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return True
    origin = get_origin(annotation)
    if origin is Literal:
        return all(type(a) in (str, int, bool) for a in get_args(annotation))
    if origin in (Annotated, UnionType, Union, dict, list):
        args = get_args(annotation)
        return all(_flat_value(a) for a in (args[:1] if origin is Annotated else args))
    return False


def _flat_models() -> frozenset[type[BaseModel]]:
    records = [*get_args(get_args(InputEvent)[0]), *OUTPUT_TYPES]
    return frozenset(
        m for m in records if all(_flat_value(f.annotation) for f in m.model_fields.values())
    )


_FLAT: Final = _flat_models()
"""Record types whose ``__dict__`` orjson encodes exactly as ``model_dump(mode="json")`` would
(no nested model, date or path): the worker encodes four of them per call."""


_OMITTED_WHEN_NULL: Final = "namespace"
"""A field added to the contract after v1 shipped, written only when set: a bare tool's
records stay byte-for-byte what a reader that predates it accepts (the models forbid unknown
fields), and a namespaced one is refused by such a reader, never read as the bare tool."""


def encode(record: BaseModel) -> bytes:
    """The one canonical encoding of every record (orjson, ``None`` fields kept, except
    :data:`_OMITTED_WHEN_NULL`, which is left out when null).

    Never raises for a valid model: text holding a lone surrogate (possible only in a record
    built in-process, never in one decoded from the wire) is not UTF-8, so it is written with
    ASCII escapes instead; a reader's strict decoder then rejects that record as undecodable.
    """
    fields = record.__dict__
    omit = _OMITTED_WHEN_NULL in fields and fields[_OMITTED_WHEN_NULL] is None
    if type(record) in _FLAT:
        if omit:
            fields = {k: v for k, v in fields.items() if k != _OMITTED_WHEN_NULL}
        try:
            return orjson.dumps(fields)  # a seventh of the cost of model_dump first
        except TypeError:  # a lone surrogate (or an integer orjson does not take): below
            pass
    data = record.model_dump(mode="json", exclude={_OMITTED_WHEN_NULL} if omit else None)
    try:
        return orjson.dumps(data)
    except TypeError:
        return json.dumps(data, ensure_ascii=True, allow_nan=False).encode("ascii")


_ESCAPED: Final = "~"


def encode_key(parts: Sequence[str | int | None]) -> str:
    """An injective, never-raising string form of a tuple of ids (state keys, digests).

    Normally the orjson array of the parts (so ``["acme","t1"]``). A part holding a lone surrogate
    is not UTF-8 and cannot be written that way: then every string part is replaced by the hex of
    its ``surrogatepass`` UTF-8 bytes and the array is prefixed with ``~``. The two forms cannot
    meet (one starts with ``[``, the other with ``~``) and each is injective, so two different
    tuples never share a key, whatever their strings hold (a separator, quotes, U+001F, …).
    """
    try:
        return orjson.dumps(list(parts)).decode()
    except TypeError:
        escaped = [
            p.encode("utf-8", "surrogatepass").hex() if isinstance(p, str) else p for p in parts
        ]
        return _ESCAPED + orjson.dumps(escaped).decode()


def decode_key(text: str) -> list[Any]:
    """The parts :func:`encode_key` encoded (raises ValueError on text it did not make)."""
    if text.startswith(_ESCAPED):
        return [
            bytes.fromhex(p).decode("utf-8", "surrogatepass") if isinstance(p, str) else p
            for p in orjson.loads(text[len(_ESCAPED) :])
        ]
    parts = orjson.loads(text)
    if not isinstance(parts, list):
        raise ValueError("not an encoded key")
    return parts


def stable_id(*parts: str) -> str:
    """A deterministic id from its parts (the core has no randomness).

    Each part is length-prefixed, so no part's content can shift the boundary between parts
    (a part holding a separator such as U+001F never passes for two parts).
    """
    chunks: list[bytes] = []
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        chunks.append(len(data).to_bytes(8, "big"))
        chunks.append(data)
    return hashlib.sha256(b"".join(chunks)).hexdigest()[:32]  # one update: the same digest
