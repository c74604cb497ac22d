"""Expiry: how long a waiting call may wait, and what it becomes when it has waited too long.

Owns the four expiry rules that ``tick`` applies to every open call (``expire``): an idle
collecting buffer (``idle_timeout_seconds`` without a fragment: ``idle_timeout``), a terminal
candidate whose turn is never bound (``binding_wait_seconds``, counted against how far control
is applied: ``binding_expired``; it fails ``permission_denied``), a validated call whose response
never completes (``response_wait_seconds`` from validation, unless the control barrier holds it:
``response_timeout``) and an unanswered proposal (its confirmation deadline:
``confirmation_expired``). No IO; time is passed in.

Must not decide anything but expiry: an expired call ends through
:func:`processor.core.forgetting.terminate`, and forgetting old state is
:func:`processor.core.forgetting.forget`."""

from __future__ import annotations

from processor.core.assembly_state import AssemblyState
from processor.core.buffer import CallBuffer
from processor.core.events import OutputRecord
from processor.core.forgetting import terminate
from processor.core.states import CallState, TerminalReason

__all__ = ["binding_expired", "expire", "expiry_reason"]


def expire(
    state: AssemblyState, now: float, control_end: int | None, out: list[OutputRecord]
) -> None:
    """End every open call that has waited too long at ``now`` (see the module docstring).

    ``control_end`` is this partition's ``control`` end offset (last stable) read at ``now`` or
    later, from a runtime that reads control apart from fragments (:func:`binding_expired`).
    """
    for buf in list(state.active.values()):
        reason = expiry_reason(state, buf, now, control_end)
        if reason is TerminalReason.PERMISSION_DENIED:
            buf.validation_result = "turn_not_bound"
        if reason is not None:
            terminate(state, buf, reason, now, out)


def expiry_reason(
    state: AssemblyState, buf: CallBuffer, now: float, control_end: int | None
) -> TerminalReason | None:
    """Why a waiting buffer has waited too long, if it has."""
    limits = state.limits
    if buf.state is CallState.COLLECTING:
        idle = now - buf.last_activity > limits.idle_timeout_seconds
        return TerminalReason.IDLE_TIMEOUT if idle else None
    if buf.state is CallState.TERMINAL_CANDIDATE and buf.awaiting_binding_since is not None:
        unbound = binding_expired(state, buf, now, control_end)
        return TerminalReason.PERMISSION_DENIED if unbound else None
    if buf.state is CallState.AWAITING_RESPONSE and buf.key not in state.barrier_held:
        since = buf.validated_at if buf.validated_at is not None else buf.last_activity
        late = now - since > limits.response_wait_seconds
        return TerminalReason.RESPONSE_TIMEOUT if late else None
    if buf.state is CallState.VALIDATED and buf.expires_at is not None:
        return TerminalReason.CONFIRMATION_EXPIRED if now > buf.expires_at else None
    return None


def binding_expired(
    state: AssemblyState, buf: CallBuffer, now: float, control_end: int | None
) -> bool:
    """Whether an unbound terminal candidate has waited for its turn's binding too long.

    The wait (``binding_wait_seconds`` from when the candidate found its turn unbound) is
    counted on the clock, but a clock says nothing of what this worker has read: after an
    outage or a rebuild the ``turn.started`` may have sat in ``control`` all along, unread.
    So when control is read apart from fragments (the runtime gives ``tick`` control's end,
    or applies control positions), the call fails closed only once control is applied up to
    its ``binding_fence``: control's end as read after the wait ran out. Every binding
    written before the wait ran out has then been applied (and would have bound the call);
    only one written after it can come too late. A worker that cannot read control's end,
    or does not know how far control is applied, expires nothing for want of a binding.
    With neither (offline replay, one ordered stream in which control is applied as it is
    read), the clock alone.
    """
    since = buf.awaiting_binding_since
    if since is None or now - since <= state.limits.binding_wait_seconds:
        return False
    if buf.binding_fence is None and control_end is not None:
        buf.binding_fence = control_end  # read at ``now`` or later: after the wait ran out
    position = state.control_position
    if buf.binding_fence is None:
        return position is None
    return position is not None and position >= buf.binding_fence
