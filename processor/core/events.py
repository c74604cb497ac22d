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

The models live by family, one module each: :mod:`~processor.core.wire_types` (version, field
types, call identity, keys), :mod:`~processor.core.fragment_events`,
:mod:`~processor.core.control_events` and :mod:`~processor.core.output_records`. This module is
the contract's one import point (it re-exports every model, so callers import from here) and
owns reading and writing records: :func:`decode_input`, :func:`encode`, the error descriptions
that never carry a value.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from enum import StrEnum
from types import UnionType
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

import orjson
from pydantic import BaseModel, Field, ValidationError

from processor.core.control_events import (
    CONTROL_TYPES,
    OPERATOR_TYPES,
    CallConfirmed,
    CallDenied,
    ControlEvent,
    OperatorCommand,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    TurnCancelReason,
    TurnStarted,
)
from processor.core.errors import RecordRejected
from processor.core.fragment_events import (
    FRAGMENT_TYPES,
    CallDelta,
    CallEnded,
    CallStarted,
    FragmentEvent,
    ResponseEnded,
    ResponseStatus,
    _Fragment,
)
from processor.core.output_records import (
    OUTPUT_TOPIC,
    OUTPUT_TYPES,
    Audit,
    AuditOutcome,
    DeadLetter,
    Dispatch,
    Ledger,
    OutputRecord,
    Proposal,
    Status,
    UserState,
)
from processor.core.wire_types import (
    IDENT_PATTERN,
    TENANT_PATTERN,
    WIRE_VERSION,
    CallKey,
    CallRecord,
    Id,
    Ident,
    Lax,
    Name,
    Reason,
    Tenant,
    Time,
    decode_key,
    encode_key,
    stable_id,
    trusted_call_key,
    turn_key,
)

__all__ = [
    "ALL_INPUT_TYPES",
    "CONTROL_TYPES",
    "DEFAULT_CLOCK_SKEW_SECONDS",
    "FRAGMENT_TYPES",
    "IDENT_PATTERN",
    "OPERATOR_TYPES",
    "OUTPUT_TOPIC",
    "OUTPUT_TYPES",
    "TENANT_PATTERN",
    "WIRE_VERSION",
    "Audit",
    "AuditOutcome",
    "CallConfirmed",
    "CallDelta",
    "CallDenied",
    "CallEnded",
    "CallKey",
    "CallRecord",
    "CallStarted",
    "ControlEvent",
    "DeadLetter",
    "Dispatch",
    "FragmentEvent",
    "Id",
    "Ident",
    "InputEvent",
    "Lax",
    "Ledger",
    "Name",
    "OperatorCommand",
    "OutputRecord",
    "Proposal",
    "Reason",
    "ResponseEnded",
    "ResponseQuarantined",
    "ResponseStatus",
    "Status",
    "Tenant",
    "TenantResumed",
    "TenantStopped",
    "Time",
    "ToolDisabled",
    "ToolEnabled",
    "TurnCancelReason",
    "TurnCancelled",
    "TurnStarted",
    "UserState",
    "check_time",
    "decode_input",
    "decode_input_value",
    "decode_key",
    "describe_validation_error",
    "encode",
    "encode_key",
    "event_time",
    "parse_input",
    "quoted_name",
    "stable_id",
    "trusted_call_key",
    "turn_key",
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


def _flat_model(model: type[BaseModel]) -> bool:
    """Whether ``model``'s ``__dict__`` dumps as ``model_dump(mode="json")``: every field a
    flat value, none excluded, no extra fields, and no serializer or computed field."""
    decorators = model.__pydantic_decorators__
    return (
        model.model_config.get("extra") != "allow"  # extra fields live outside ``__dict__``
        and not decorators.field_serializers
        and not decorators.model_serializers
        and not model.model_computed_fields
        and all(_flat_value(f.annotation) and not f.exclude for f in model.model_fields.values())
    )


def _flat_models() -> frozenset[type[BaseModel]]:
    records = [*get_args(get_args(InputEvent)[0]), *OUTPUT_TYPES]
    return frozenset(m for m in records if _flat_model(m))


_FLAT: Final = _flat_models()
"""Record types whose ``__dict__`` orjson encodes exactly as ``model_dump(mode="json")`` would
(no nested model, date or path): the worker encodes four of them per call."""

_FLAT_BY_TYPE: Final[dict[type[BaseModel], bool]] = dict.fromkeys(_FLAT, True)
""":data:`_FLAT`, and every other record type :func:`encode` met, judged once (the executor's
ledger entries and results are flat too: three encodings per executed call)."""


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
    flat = _FLAT_BY_TYPE.get(type(record))
    if flat is None:
        flat = _FLAT_BY_TYPE[type(record)] = _flat_model(type(record))
    if flat:
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
