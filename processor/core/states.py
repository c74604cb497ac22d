"""The call state machine: states, triggers, terminal reasons and the one transition table.

Everything that decides how a call's state may change lives in this file, as data. A
(state, trigger) pair that is not in :data:`TRANSITIONS` raises :class:`InvalidTransition`; the
absorbing states (``dispatched``, ``cancelled``, ``failed``) have no outgoing transitions at all,
so no later event can revive a call, whatever its JSON looks like. The README's state diagram is
drawn from this table (``processor states --mermaid``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from processor.core.errors import InvalidTransition


class CallState(StrEnum):
    ABSENT = "absent"
    COLLECTING = "collecting"
    TERMINAL_CANDIDATE = "terminal_candidate"
    AWAITING_RESPONSE = "awaiting_response"
    VALIDATED = "validated"
    DISPATCHED = "dispatched"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def absorbing(self) -> bool:
        return self in ABSORBING


class Trigger(StrEnum):
    START = "start"  # call.started
    DELTA = "delta"  # call.delta accepted into the buffer
    END = "end"  # call.ended: the protocol's terminal signal, permits one parse
    VALIDATE = "validate"  # strict parse, schema, business rules, binding and permission passed
    # the response completed normally (or the tool dispatches at its own end) AND every control
    # record committed before the call's terminal events were read has been applied
    RELEASE = "release"
    DISPATCH = "dispatch"  # written to dispatch (directly, or after a matching confirmation)
    CANCEL = "cancel"  # control: user stop, supersession, operator command, response ended
    FAIL = "fail"  # the call cannot be completed (malformed, invalid, limits, expiry, denial)


ABSORBING: Final = frozenset({CallState.DISPATCHED, CallState.CANCELLED, CallState.FAILED})

_S = CallState
_T = Trigger

TRANSITIONS: Final[dict[CallState, dict[Trigger, CallState]]] = {
    _S.ABSENT: {
        _T.START: _S.COLLECTING,
        _T.DELTA: _S.COLLECTING,  # a delta may overtake its start; it is held until the end
        _T.CANCEL: _S.CANCELLED,
        _T.FAIL: _S.FAILED,
    },
    _S.COLLECTING: {
        _T.START: _S.COLLECTING,
        _T.DELTA: _S.COLLECTING,
        _T.END: _S.TERMINAL_CANDIDATE,
        _T.CANCEL: _S.CANCELLED,
        _T.FAIL: _S.FAILED,
    },
    _S.TERMINAL_CANDIDATE: {
        _T.VALIDATE: _S.AWAITING_RESPONSE,
        _T.CANCEL: _S.CANCELLED,
        _T.FAIL: _S.FAILED,
    },
    _S.AWAITING_RESPONSE: {
        _T.RELEASE: _S.VALIDATED,
        _T.CANCEL: _S.CANCELLED,
        _T.FAIL: _S.FAILED,
    },
    _S.VALIDATED: {
        _T.DISPATCH: _S.DISPATCHED,
        _T.CANCEL: _S.CANCELLED,
        _T.FAIL: _S.FAILED,
    },
    _S.DISPATCHED: {},
    _S.CANCELLED: {},
    _S.FAILED: {},
}


def next_state(state: CallState, trigger: Trigger) -> CallState:
    """The state after ``trigger`` in ``state``; raises InvalidTransition when not allowed."""
    try:
        return TRANSITIONS[state][trigger]
    except KeyError:
        raise InvalidTransition(detail=f"{trigger.value} is not allowed in {state.value}") from None


class TerminalReason(StrEnum):
    """Why a call ended without (or with) dispatch. ``state`` says which inert state it leads to."""

    DISPATCHED = "dispatched"
    # cancelled: something outside the call decided it must not run
    USER_STOP = "user_stop"
    SUPERSEDED = "superseded"
    CONNECTION_LOST = "connection_lost"
    TURN_CANCELLED = "turn_cancelled"
    QUARANTINED = "quarantined"
    TOOL_DISABLED = "tool_disabled"
    TENANT_STOPPED = "tenant_stopped"
    RESPONSE_FAILED = "response_failed"
    INCOMPLETE = "incomplete"
    RESPONSE_TIMEOUT = "response_timeout"  # the call's response never ended
    NOT_CHOSEN = "alternative_not_chosen"  # another alternative (n > 1, candidates) acts
    # failed: the call itself cannot become a valid, permitted call
    MALFORMED_JSON = "malformed_json"
    UNKNOWN_TOOL = "unknown_tool"
    SCHEMA_INVALID = "schema_invalid"
    BUSINESS_INVALID = "business_invalid"
    PERMISSION_DENIED = "permission_denied"
    SIZE_LIMIT = "size_limit"
    SEQUENCE_GAP = "sequence_gap"
    DUPLICATE_CONFLICT = "duplicate_conflict"
    IDLE_TIMEOUT = "idle_timeout"
    CONFIRMATION_DENIED = "confirmation_denied"
    CONFIRMATION_EXPIRED = "confirmation_expired"
    BUFFER_LIMIT = "buffer_limit"
    ARGUMENTS_MISMATCH = "arguments_mismatch"

    @property
    def trigger(self) -> Trigger:
        if self is TerminalReason.DISPATCHED:
            return Trigger.DISPATCH
        return Trigger.CANCEL if self in _CANCEL_REASONS else Trigger.FAIL

    @property
    def retry_possible(self) -> bool:
        """Whether asking the model again could succeed (the user-visible status says so)."""
        return self in _RETRYABLE


_CANCEL_REASONS: Final = frozenset(
    {
        TerminalReason.USER_STOP,
        TerminalReason.SUPERSEDED,
        TerminalReason.CONNECTION_LOST,
        TerminalReason.TURN_CANCELLED,
        TerminalReason.QUARANTINED,
        TerminalReason.TOOL_DISABLED,
        TerminalReason.TENANT_STOPPED,
        TerminalReason.RESPONSE_FAILED,
        TerminalReason.INCOMPLETE,
        TerminalReason.RESPONSE_TIMEOUT,
        TerminalReason.NOT_CHOSEN,
    }
)

_RETRYABLE: Final = frozenset(
    {
        TerminalReason.CONNECTION_LOST,
        TerminalReason.RESPONSE_FAILED,
        TerminalReason.INCOMPLETE,
        TerminalReason.RESPONSE_TIMEOUT,
        TerminalReason.MALFORMED_JSON,
        TerminalReason.SCHEMA_INVALID,
        TerminalReason.BUSINESS_INVALID,
        TerminalReason.SEQUENCE_GAP,
        TerminalReason.DUPLICATE_CONFLICT,
        TerminalReason.IDLE_TIMEOUT,
        TerminalReason.CONFIRMATION_EXPIRED,
        TerminalReason.SIZE_LIMIT,
        TerminalReason.BUFFER_LIMIT,
        TerminalReason.ARGUMENTS_MISMATCH,
    }
)


def mermaid() -> str:
    """The state diagram, drawn from :data:`TRANSITIONS` (used in the README)."""
    lines = ["stateDiagram-v2", "    [*] --> absent"]
    for source, edges in TRANSITIONS.items():
        for trigger, target in edges.items():
            lines.append(f"    {source.value} --> {target.value}: {trigger.value}")
    for state in sorted(ABSORBING):
        lines.append(f"    {state.value} --> [*]")
    return "\n".join(lines)
