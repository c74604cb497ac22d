"""Building the output records the Assembler emits, from a call buffer or a command.

Pure functions: every id is derived from the call key and the facts it names, so the same input
always yields the same records. Only :func:`dispatch` and :func:`proposal` carry argument
values; ledger, status, audit and dead-letter records never do (invariant 8). The user-visible
messages live here too, one per terminal reason that deserves its own words.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from processor.core.buffer import CallBuffer
from processor.core.events import (
    Audit,
    AuditOutcome,
    CallConfirmed,
    CallDenied,
    CallKey,
    DeadLetter,
    Dispatch,
    Ledger,
    OperatorCommand,
    Proposal,
    ResponseEnded,
    Status,
    TurnCancelled,
    TurnStarted,
    UserState,
    encode,
    stable_id,
)
from processor.core.states import CallState, TerminalReason

AuditedEvent = TurnStarted | TurnCancelled | CallConfirmed | CallDenied | OperatorCommand

STATUS_MESSAGE: Final = {
    TerminalReason.DISPATCHED: "Request sent.",
    TerminalReason.USER_STOP: "Stopped at your request.",
    TerminalReason.SUPERSEDED: "Replaced by your newer message.",
    TerminalReason.CONNECTION_LOST: "The connection was lost before the request was complete.",
    TerminalReason.TURN_CANCELLED: "This turn was cancelled.",
    TerminalReason.QUARANTINED: "Held back by an operator for review.",
    TerminalReason.TOOL_DISABLED: "This tool is currently disabled.",
    TerminalReason.TENANT_STOPPED: (
        "Actions are paused for your organisation; a person will follow up."
    ),
    TerminalReason.PERMISSION_DENIED: "You are not allowed to use this tool.",
    TerminalReason.UNKNOWN_TOOL: "The assistant asked for a tool that does not exist.",
    TerminalReason.CONFIRMATION_DENIED: "You declined this action.",
    TerminalReason.CONFIRMATION_EXPIRED: "The confirmation window closed before you answered.",
    TerminalReason.RESPONSE_FAILED: (
        "The assistant's response was refused, filtered or failed, so this action will not run."
    ),
    TerminalReason.NOT_CHOSEN: "Another alternative of this response was used instead.",
}
RETRY_MESSAGE: Final = "The request could not be completed; asking again may work."
FINAL_MESSAGE: Final = "The request could not be completed."


@dataclass(frozen=True)
class RecordSource:
    """Where a raw record came from (for dead letters)."""

    topic: str
    partition: int
    offset: int


def key_fields(key: CallKey) -> dict[str, str]:
    return {
        "tenant": key.tenant,
        "turn_id": key.turn_id,
        "response_id": key.response_id,
        "item_id": key.item_id,
        "call_id": key.call_id,
    }


def dispatch(buf: CallBuffer, confirmation: str | None, now: float) -> Dispatch:
    assert buf.arguments is not None and buf.args_digest is not None
    assert buf.tool_name is not None and buf.terminal_event_id is not None
    assert buf.dispatch_id is not None
    return Dispatch(
        **key_fields(buf.key),
        dispatch_id=buf.dispatch_id,
        tool=buf.tool_name,
        namespace=buf.resolved_namespace,
        tool_version=buf.tool_version or "",
        arguments=buf.arguments,
        args_digest=buf.args_digest,
        actor=buf.actor or "",
        provider=buf.provider or "",
        terminal_event_id=buf.terminal_event_id,
        confirmation_ref=confirmation,
        ts=now,
    )


def proposal(buf: CallBuffer, now: float) -> Proposal:
    assert buf.arguments is not None and buf.args_digest is not None
    assert buf.expires_at is not None
    return Proposal(
        **key_fields(buf.key),
        proposal_id=stable_id("proposal", buf.encoded_key, buf.args_digest),
        tool=buf.tool_name or "",
        namespace=buf.resolved_namespace,
        tool_version=buf.tool_version or "",
        arguments=buf.arguments,
        args_digest=buf.args_digest,
        actor=buf.actor or "",
        expires_at=buf.expires_at,
        ts=now,
    )


def status(buf: CallBuffer, state: UserState, retry: bool, message: str, now: float) -> Status:
    return Status(
        **key_fields(buf.key),
        status_id=stable_id("status", buf.encoded_key, state.value),
        tool=buf.tool_name or buf.tool,
        namespace=buf.resolved_namespace,
        state=state,
        retry_possible=retry,
        message=message,
        provider_reason=buf.provider_reason,
        ts=now,
    )


def terminal_status(buf: CallBuffer, now: float) -> Status:
    """What the user is told when a call ends: dispatched, or why not and whether to retry."""
    reason = buf.reason
    assert reason is not None
    if buf.state is CallState.DISPATCHED:
        return status(buf, UserState.DISPATCHED, False, STATUS_MESSAGE[reason], now)
    state = UserState.CANCELLED if buf.state is CallState.CANCELLED else UserState.FAILED
    default = RETRY_MESSAGE if reason.retry_possible else FINAL_MESSAGE
    return status(buf, state, reason.retry_possible, STATUS_MESSAGE.get(reason, default), now)


def ledger(buf: CallBuffer, now: float) -> Ledger:
    dispatched = buf.state is CallState.DISPATCHED
    return Ledger(
        **key_fields(buf.key),
        ledger_id=stable_id("ledger", buf.encoded_key),
        tool=buf.tool_name or buf.tool,
        namespace=buf.resolved_namespace,
        tool_version=buf.tool_version,
        alias_used=buf.alias_used,
        state=buf.state.value,
        terminal_reason=buf.reason.value if buf.reason else None,
        fragment_count=buf.fragment_count,
        duplicate_count=buf.duplicate_count,
        bytes=buf.byte_count,
        parse_result=buf.parse_result,
        validation_result=buf.validation_result,
        dispatch_decision="dispatched" if dispatched else "not_dispatched",
        dispatch_id=buf.dispatch_id,
        args_digest=buf.args_digest,
        provider_reason=buf.provider_reason,
        ts=now,
    )


def audit(
    event: AuditedEvent,
    outcome: AuditOutcome,
    rejection: str | None,
    affected: Iterable[CallKey],
    now: float,
) -> Audit:
    return Audit(
        # by content, not by command_id alone: two commands may share an id (other type, signer,
        # tenant or target; see processor.core.control), fan-out copies share their content
        audit_id=stable_id(
            "audit", hashlib.sha256(encode(event)).hexdigest(), outcome.value, rejection or ""
        ),
        command_id=event.command_id,
        command_type=event.type,
        issued_by=event.issued_by,
        tenant=event.tenant,
        reason=event.reason,
        outcome=outcome,
        rejection=rejection,
        affected=sorted(affected, key=lambda k: k.as_tuple),
        ts=now,
    )


def response_audit(event: ResponseEnded, voided: Iterable[CallKey], now: float) -> Audit:
    """A provider's verdict that voided validated calls: who said so, why, which calls."""
    return Audit(
        audit_id=stable_id("audit", event.event_id, "response_verdict"),
        command_id=event.event_id,
        command_type=event.type,
        issued_by="provider:" + event.provider,
        tenant=event.tenant,
        reason=event.reason or event.status.value,
        outcome=AuditOutcome.APPLIED,
        rejection=None,
        affected=sorted(voided, key=lambda k: k.as_tuple),
        ts=now,
    )


def dead_letter(
    payload: bytes, source: RecordSource, reason: str, detail: str, now: float
) -> DeadLetter:
    return DeadLetter(
        deadletter_id=stable_id(source.topic, str(source.partition), str(source.offset)),
        source_topic=source.topic,
        partition=source.partition,
        offset=source.offset,
        reason=reason,
        detail=bounded_text(detail),
        payload_bytes=len(payload),
        payload_sha256=hashlib.sha256(payload).hexdigest(),
        ts=now,
    )


_REASON_CHARS: Final = 512  # events.Reason's limit


def bounded_text(text: str) -> str:
    """``text`` as a valid ``Reason``: cut to its 512 characters and any lone surrogate
    replaced, so building a dead letter never raises, whatever a detail came to hold."""
    if len(text) > _REASON_CHARS:
        text = text[: _REASON_CHARS - 1] + "…"
    return text.encode("utf-8", "replace").decode("utf-8")
