"""Response gating and the control barrier: when a validated call may act. No IO.

Owns the response verdict (``on_response_ended``: a completed response releases its validated
calls, any other ending makes them inert), the control barrier (a call acts only once this
partition's ``control`` is applied up to the barriers of its terminal events:
``advance_control``, the held set and its heap), the release itself (``try_release``: a proposal
when confirmation is required, else ``dispatch``) and the control-lag figures the runtime reads
(``holds_for_control``, ``waiting_for_control``), each over the
:class:`~processor.core.assembly_state.AssemblyState` it is given. See the
:mod:`processor.core.assembler` docstring for the rules.

Must not validate or bind (that is :mod:`processor.core.binding`) nor apply commands.
See :mod:`processor.core.assembly_state` for the parts and their order."""

from __future__ import annotations

import heapq

from processor.core import outputs
from processor.core.assembly_state import AssemblyState, _later, declaration_of
from processor.core.buffer import CallBuffer
from processor.core.control import response_state_key
from processor.core.events import (
    CallKey,
    OutputRecord,
    ResponseEnded,
    ResponseStatus,
    UserState,
    stable_id,
)
from processor.core.forgetting import room_for_response, terminate
from processor.core.registry import DispatchOn
from processor.core.states import CallState, TerminalReason, Trigger

__all__ = [
    "advance_control",
    "dispatch",
    "holds_for_control",
    "on_response_ended",
    "try_release",
    "waiting_for_control",
]

_RESPONSE_END_REASON = {
    ResponseStatus.COMPLETED: TerminalReason.INCOMPLETE,  # the response ended, the call did not
    ResponseStatus.INCOMPLETE: TerminalReason.INCOMPLETE,
    ResponseStatus.FAILED: TerminalReason.RESPONSE_FAILED,
    ResponseStatus.ERROR: TerminalReason.RESPONSE_FAILED,
    ResponseStatus.CANCELLED: TerminalReason.RESPONSE_FAILED,
    ResponseStatus.NOT_CHOSEN: TerminalReason.NOT_CHOSEN,
}
# states that a voiding response verdict makes inert: everything not yet acted on
_VOIDABLE = frozenset(
    {
        CallState.ABSENT,
        CallState.COLLECTING,
        CallState.TERMINAL_CANDIDATE,
        CallState.AWAITING_RESPONSE,
        CallState.VALIDATED,
    }
)


def advance_control(state: AssemblyState, position: int, now: float) -> list[OutputRecord]:
    """This partition's ``control`` is applied up to ``position`` (its next offset).

    Releases the calls that were held only until that position; returns their outputs.
    """
    if state.control_position is not None and position <= state.control_position:
        if not state.recheck_awaiting:
            return []
    else:
        state.control_position = position
    out: list[OutputRecord] = []
    lagging = state.unbound_lagging
    while lagging:  # inserted about in barrier order: the front passes first
        key, barrier = next(iter(lagging.items()))
        if barrier > position:
            break
        del lagging[key]
    if state.recheck_awaiting:
        state.recheck_awaiting = False
        waiting = list(state.awaiting.values())
    else:
        held, heap, freed = state.barrier_held, state.held_heap, []
        while heap and heap[0][0] <= position:
            barrier, seq, _, key = heapq.heappop(heap)
            if held.get(key) == (barrier, seq):
                freed.append((seq, key))
        freed.sort()  # in their order of entry, as a scan of ``held`` would find them
        waiting = [state.awaiting[key] for _, key in freed]
    for buf in waiting:
        try_release(state, buf, now, out)
    return out


def holds_for_control(state: AssemblyState) -> bool:
    """Whether some call waits for ``control`` to be applied further."""
    return bool(state.barrier_held) or bool(state.unbound_lagging) or state.recheck_awaiting


def waiting_for_control(state: AssemblyState) -> int:
    """How many open calls wait for ``control`` to be applied up to their barrier: held by
    it after validation, or waiting for their turn's binding, which may be before it.

    The runtime's back-pressure (:mod:`processor.runtime.partition`): reading fragments far
    ahead of control on a backlog would keep every call read open until control catches up.
    """
    return len(state.barrier_held) + len(state.unbound_lagging)


def on_response_ended(
    state: AssemblyState,
    event: ResponseEnded,
    now: float,
    barrier: int | None,
    out: list[OutputRecord],
) -> None:
    """The response's verdict: its open calls end; its validated calls act or become inert.

    The first verdict stands, except that a later voiding one still voids what has not
    acted yet (two provider finals that disagree fail safe); nothing revives a voided call.
    """
    reason = _RESPONSE_END_REASON[event.status]
    completed = event.status is ResponseStatus.COMPLETED
    if state.control.response(event.tenant, event.turn_id, event.response_id) is None:
        room_for_response(state, event.tenant)
    record = state.control.ensure_response(event.tenant, event.turn_id, event.response_id, now)
    if record.ended is None or (record.completed and not completed):
        record.ended = reason.value
        record.completed = completed
        record.barrier = barrier
        record.provider_reason = event.reason or event.status.value
        state.mark(response_state_key(event.tenant, event.turn_id, event.response_id))
    elif not record.completed:
        completed = False  # voided before: a later "completed" revives nothing
        reason = TerminalReason(record.ended)
    voided: list[CallKey] = []
    for buf in state.turn_calls(event.tenant, event.turn_id):
        if buf.key.response_id != event.response_id:
            continue
        if buf.state in (CallState.ABSENT, CallState.COLLECTING):
            buf.provider_reason = record.provider_reason
            terminate(state, buf, reason, now, out)
        elif completed:
            continue  # released below, in the order their terminals validated
        elif buf.state in _VOIDABLE:
            buf.provider_reason = record.provider_reason
            voided.append(buf.key)
            terminate(state, buf, reason, now, out)
    if voided:
        out.append(outputs.response_audit(event, voided, now))
    if completed:  # the turn's awaiting calls of this response, in the order they entered
        rank = state.awaiting_rank
        waiting = [
            b
            for b in state.turn_calls(event.tenant, event.turn_id)
            if b.key in rank and b.key.response_id == event.response_id
        ]
        for buf in sorted(waiting, key=lambda b: rank[b.key]):
            try_release(state, buf, now, out)


def try_release(state: AssemblyState, buf: CallBuffer, now: float, out: list[OutputRecord]) -> None:
    """Act on an awaiting call once its response completed and the barrier is applied."""
    if buf.state is not CallState.AWAITING_RESPONSE:
        return
    declaration = declaration_of(state, buf)
    if declaration is None:  # the registry cannot change under a running Assembler
        terminate(state, buf, TerminalReason.UNKNOWN_TOOL, now, out)
        return
    key = buf.key
    response = state.control.response(key.tenant, key.turn_id, key.response_id)
    completed = response is not None and response.completed
    if not completed and declaration.dispatch_on is DispatchOn.RESPONSE_END:
        return  # waits for the response's verdict (or expires)
    barrier = _later(buf.barrier, response.barrier if response and completed else None)
    if barrier is not None and (state.control_position is None or state.control_position < barrier):
        held = state.barrier_held.get(key)
        if held is None or held[0] != barrier:
            if held is None:
                state.held_seq += 1
            seq = state.held_seq if held is None else held[1]
            state.barrier_held[key] = (barrier, seq)
            state.held_pushes += 1
            heapq.heappush(state.held_heap, (barrier, seq, state.held_pushes, key))
        return
    state.barrier_held.pop(key, None)
    del state.awaiting[key]
    del state.awaiting_rank[key]
    buf.fire(Trigger.RELEASE)
    if declaration.requires_confirmation:
        buf.expires_at = now + declaration.confirmation_ttl_seconds
        state.touch(buf)
        out.append(outputs.proposal(buf, now))
        message = "Waiting for your confirmation."
        out.append(outputs.status(buf, UserState.AWAITING_CONFIRMATION, False, message, now))
        return
    dispatch(state, buf, None, now, out)


def dispatch(
    state: AssemblyState,
    buf: CallBuffer,
    confirmation: str | None,
    now: float,
    out: list[OutputRecord],
) -> None:
    assert buf.arguments is not None and buf.args_digest is not None
    assert buf.tool_name is not None and buf.terminal_event_id is not None
    key = buf.key
    if state.control.denial(key.tenant, key.turn_id, key.as_tuple[2:]) is not None:
        # a denial ends the call when it is applied; this is the last gate all the same
        terminate(state, buf, TerminalReason.CONFIRMATION_DENIED, now, out)
        return
    buf.dispatch_id = stable_id("dispatch", buf.encoded_key, buf.terminal_event_id)
    out.append(outputs.dispatch(buf, confirmation, now))
    terminate(state, buf, TerminalReason.DISPATCHED, now, out)
