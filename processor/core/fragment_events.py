"""The wire contract's fragment events: what adapters write to the ``fragments`` topic.

Owns the models of ``call.started``, ``call.delta``, ``call.ended`` and ``response.ended``, the
:data:`FragmentEvent` union and :data:`FRAGMENT_TYPES`. Imported through
:mod:`processor.core.events`, which decodes and encodes them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import BeforeValidator, Field

from processor.core.wire_types import (
    CallRecord,
    Id,
    Ident,
    Lax,
    Name,
    Reason,
    Tenant,
    Time,
    _exactly,
    _Record,
)

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


FRAGMENT_TYPES: Final = frozenset({"call.started", "call.delta", "call.ended", "response.ended"})
