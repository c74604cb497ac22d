"""The control topic's commands: cancellation, confirmation, operator switches. No IO.

Owns ``turn.cancelled`` (``on_turn_cancelled``), ``call.confirmed`` / ``call.denied``
(``on_confirmed``, ``on_denied``: bound to the turn's actor, the digest and the confirmation
deadline, judged by record time), the operator commands (``on_operator``: quarantine a response,
disable/enable a tool, stop/resume a tenant; verified by the keyring first) and replay protection
(``admit``: ``command_ids.judge_command`` with the bounded set of seen ids), each over the
:class:`~processor.core.assembly_state.AssemblyState` it is given.

Must not handle fragments or response verdicts, and must not drop a command that makes things
safer (invariant 11).
See :mod:`processor.core.assembly_state` for the parts and their order."""

from __future__ import annotations

from processor.core import outputs
from processor.core.assembly_state import AssemblyState, declaration_of
from processor.core.binding import room_for_turn
from processor.core.buffer import CallBuffer
from processor.core.command_ids import (
    COMMAND_CLASS,
    Command,
    CommandClass,
    Verdict,
    command_scope,
    judge_command,
)
from processor.core.control import (
    Flag,
    cancel_reason,
    command_state_key,
    response_state_key,
    tenant_state_key,
    tool_slot,
    tool_state_key,
    turn_state_key,
)
from processor.core.events import (
    AuditOutcome,
    CallConfirmed,
    CallDenied,
    CallKey,
    OperatorCommand,
    OutputRecord,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
)
from processor.core.forgetting import stop, terminate
from processor.core.gating import dispatch
from processor.core.states import CallState, TerminalReason

__all__ = ["admit", "on_confirmed", "on_denied", "on_operator", "on_turn_cancelled"]


def on_turn_cancelled(
    state: AssemblyState, event: TurnCancelled, now: float, out: list[OutputRecord]
) -> None:
    outcome = admit(state, event, now, out)
    if outcome is None:
        return
    _cancel_turn(state, event, cancel_reason(event.reason), outcome=outcome, now=now, out=out)


def _cancel_turn(
    state: AssemblyState,
    event: TurnCancelled | CallDenied,
    reason: TerminalReason,
    *,
    outcome: AuditOutcome,
    now: float,
    out: list[OutputRecord],
) -> None:
    """Cancel ``event``'s turn (absorbing), stop its open calls, audit the command."""
    turn = state.control.ensure_turn(event.tenant, event.turn_id, now)
    if turn.cancelled is None:
        state.control.cancel_turn(turn, reason.value)
        state.mark(turn_state_key(event.tenant, event.turn_id))
    affected = stop(state, state.turn_calls(event.tenant, event.turn_id), reason, now, out)
    out.append(outputs.audit(event, outcome, None, affected, now))


def on_confirmed(
    state: AssemblyState, event: CallConfirmed, now: float, written: float, out: list[OutputRecord]
) -> None:
    if admit(state, event, now, out) is None:
        return
    buf = state.calls.get(event.key)
    problem = _confirmation_problem(state, buf, event.actor, written)
    if problem is None and buf is not None and buf.args_digest != event.args_digest:
        problem = "digest_mismatch"
    if problem is not None or buf is None:
        if problem == "expired" and buf is not None:
            terminate(state, buf, TerminalReason.CONFIRMATION_EXPIRED, now, out)
        out.append(outputs.audit(event, AuditOutcome.REJECTED, problem, [], now))
        return
    out.append(outputs.audit(event, AuditOutcome.APPLIED, None, [buf.key], now))
    dispatch(state, buf, event.command_id, now, out)


def on_denied(
    state: AssemblyState, event: CallDenied, now: float, written: float, out: list[OutputRecord]
) -> None:
    """A denial sticks to its call key from whenever it is committed (invariant 11).

    Before the call exists, while it streams, while it waits for its response, its
    binding or a confirmation: the denial is remembered on its turn (in the changelog, so
    it survives restarts and moves with the partition) and the call ends
    ``confirmation_denied`` now or as soon as it opens; it never dispatches, whatever
    confirmation comes later. Like a confirmation it counts only from the turn's bound
    actor (:mod:`processor.executor.fence` applies the same rule); a denial that comes
    before the binding is kept, as the fence keeps it. A denial of a call that is already
    terminal is remembered all the same: an executor's fence refuses a dispatched call
    that a denial committed before it runs names (``processor.executor.fence``). Past
    ``Limits.max_denials_per_turn`` the whole turn is cancelled instead (never dropped).
    """
    outcome = admit(state, event, now, out)
    if outcome is None:
        return
    tenant, turn_id = event.tenant, event.turn_id
    turn = state.control.turn(tenant, turn_id)
    if turn is not None and turn.actor is not None and turn.actor != event.actor:
        out.append(outputs.audit(event, AuditOutcome.REJECTED, "wrong_actor", [], now))
        return
    key = event.key
    call = (key.response_id, key.item_id, key.call_id)
    if turn is None and not room_for_turn(state, tenant):
        turn = None  # no room for its record: the turn is cancelled below, never dropped
    else:
        turn = state.control.ensure_turn(tenant, turn_id, now)
    denied = turn.denied if turn is not None else None
    if turn is None or (
        call not in (denied or ()) and len(denied or ()) >= state.limits.max_denials_per_turn
    ):
        _cancel_for_denial(state, event, outcome, now, out)
        return
    state.control.deny(turn, call, event.command_id)
    state.mark(turn_state_key(tenant, turn_id))
    buf = state.calls.get(key)
    affected: list[CallKey] = []
    if buf is not None and not buf.state.absorbing:
        affected = [buf.key]
        terminate(state, buf, TerminalReason.CONFIRMATION_DENIED, now, out)
    out.append(outputs.audit(event, outcome, None, affected, now))


def _cancel_for_denial(
    state: AssemblyState,
    event: CallDenied,
    outcome: AuditOutcome,
    now: float,
    out: list[OutputRecord],
) -> None:
    """A denial that cannot be remembered on its own (its turn holds
    ``max_denials_per_turn`` of them, or no turn record can be made) cancels the turn."""
    _cancel_turn(state, event, TerminalReason.TURN_CANCELLED, outcome=outcome, now=now, out=out)


def _confirmation_problem(
    state: AssemblyState, buf: CallBuffer | None, actor: str, written: float
) -> str | None:
    if buf is None or buf.state is not CallState.VALIDATED or buf.expires_at is None:
        return "not_awaiting_confirmation"
    turn = state.control.turn(buf.key.tenant, buf.key.turn_id)
    if turn is None or turn.actor != actor:
        return "wrong_actor"
    if written > buf.expires_at:
        return "expired"
    return None


def on_operator(
    state: AssemblyState,
    event: OperatorCommand,
    now: float,
    written: float,
    out: list[OutputRecord],
) -> None:
    rejection = state.verifier.verify(event, written)
    if rejection is not None:
        out.append(outputs.audit(event, AuditOutcome.REJECTED, rejection, [], now))
        return
    outcome = admit(state, event, now, out)
    if outcome is None:
        return
    affected: list[CallKey] = []
    flag = Flag(command_id=event.command_id, reason=event.reason, set_at=now)
    match event:
        case ResponseQuarantined():
            key = (event.tenant, event.turn_id, event.response_id)
            state.control.ensure_response(*key, now).quarantined = True
            state.mark(response_state_key(*key))
            affected = stop(
                state,
                [b for b in state.turn_calls(*key[:2]) if b.key.response_id == key[2]],
                TerminalReason.QUARANTINED,
                now,
                out,
            )
        case ToolDisabled():
            tool = _canonical_tool(state, event.tool)
            state.control.disabled_tools[(tool_slot(event.tenant), tool)] = flag
            state.mark(tool_state_key(event.tenant, tool))
            affected = stop(
                state,
                [
                    b
                    for b in state.active.values()
                    if event.tenant in (None, b.key.tenant) and tool in _switch_names(state, b)
                ],
                TerminalReason.TOOL_DISABLED,
                now,
                out,
            )
        case ToolEnabled():
            tool = _canonical_tool(state, event.tool)
            state.control.disabled_tools.pop((tool_slot(event.tenant), tool), None)
            state.mark(tool_state_key(event.tenant, tool))
        case TenantStopped():
            state.control.stopped_tenants[event.tenant] = flag
            state.mark(tenant_state_key(event.tenant))
            affected = stop(
                state,
                [b for b in state.active.values() if b.key.tenant == event.tenant],
                TerminalReason.TENANT_STOPPED,
                now,
                out,
            )
        case TenantResumed():
            state.control.stopped_tenants.pop(event.tenant, None)
            state.mark(tenant_state_key(event.tenant))
    out.append(outputs.audit(event, outcome, None, affected, now))


def _canonical_tool(state: AssemblyState, name: str) -> str:
    """The name a tool switch naming ``name`` is kept under (switches have no namespace)."""
    return state.registry.canonical_switch(name)


def _switch_names(state: AssemblyState, buf: CallBuffer) -> frozenset[str]:
    """The switch names that stop ``buf``'s call: those of the tool its (namespace, name)
    resolves to, else its name as written (canonical as a switch name)."""
    declaration = declaration_of(state, buf)
    if declaration is not None:
        names: frozenset[str] = state.registry.switch_names(declaration)
        return names
    return frozenset({_canonical_tool(state, buf.tool or "")})


def admit(
    state: AssemblyState, event: Command, now: float, out: list[OutputRecord]
) -> AuditOutcome | None:
    """Replay protection (``command_ids.judge_command``): the outcome to audit once the command
    is applied, or None when it must not be (audited here: ``duplicate`` or ``replayed``).

    The set of remembered ids is bounded (``Limits.max_seen_commands``): when it is full, a
    new command that grants (confirm, resume, enable) is refused as ``replay_window_full``,
    since its replay could not be detected; one that only makes things safer applies
    unremembered (applying it twice is harmless, and it is never dropped, invariant 11).
    """
    seen = state.control.seen_commands
    if len(seen) >= state.limits.max_seen_commands and command_scope(event) not in seen:
        if COMMAND_CLASS[event.type] is CommandClass.GRANT:
            out.append(outputs.audit(event, AuditOutcome.REJECTED, "replay_window_full", [], now))
            return None
        return AuditOutcome.APPLIED
    verdict, scope = judge_command(seen, event, now)
    if verdict is Verdict.NEW:
        state.mark(command_state_key(scope))
        return AuditOutcome.APPLIED
    if verdict is Verdict.CONFLICT:
        return AuditOutcome.CONFLICT
    if verdict is Verdict.DUPLICATE:
        out.append(outputs.audit(event, AuditOutcome.DUPLICATE, None, [], now))
    else:
        out.append(outputs.audit(event, AuditOutcome.REJECTED, "replayed", [], now))
    return None
