"""Fragment events: a call's start, deltas and terminal into its buffer. No IO.

Owns ``on_fragment`` (the per-delta hot path: late events of absorbing calls are counted and
ignored, control refusals and admission apply to a new call, deltas are scanned as they arrive),
``call.started`` / ``call.delta`` / ``call.ended`` on a buffer, and the per-tool size bounds
cached per declaration (``call_bounds``), over the
:class:`~processor.core.assembly_state.AssemblyState` it is given. A completed terminal goes to
:func:`processor.core.binding.try_validate`.

Must not decide release or apply commands. Kept lean on purpose: every delta goes through here.
See :mod:`processor.core.assembly_state` for the parts and their order."""

from __future__ import annotations

from processor.core import outputs
from processor.core.assembly_state import AssemblyState, _later
from processor.core.binding import capacity_refusal, try_validate
from processor.core.buffer import CallBuffer, DeltaOutcome
from processor.core.control import turn_state_key
from processor.core.errors import AssemblyError, DuplicateConflict, SequenceGap
from processor.core.events import (
    CallDelta,
    CallEnded,
    CallKey,
    CallStarted,
    OutputRecord,
    UserState,
)
from processor.core.forgetting import terminate
from processor.core.states import CallState, TerminalReason, Trigger

__all__ = ["call_bounds", "on_fragment"]


def on_fragment(
    state: AssemblyState,
    event: CallStarted | CallDelta | CallEnded,
    now: float,
    barrier: int | None,
    out: list[OutputRecord],
) -> None:
    """Apply one ``call.started``, ``call.delta`` or ``call.ended`` to its call's buffer (opened
    here when it is new and admitted); ``barrier`` is the control position a terminal waits for."""
    ids = (event.tenant, event.turn_id, event.response_id, event.item_id, event.call_id)
    if ids in state.inert:
        state.late_events += 1  # a replay of a call that is already terminal
        return
    buf = state.live.get(ids)
    is_new = False
    if buf is not None:
        if buf.state in _VALIDATED_STATES:
            state.late_events += 1  # a replay of a call whose fragments are already complete
            return
        refusal = state.control.refusal(ids[0], ids[1], ids[2])
        if refusal is not None and buf.state is CallState.TERMINAL_CANDIDATE:
            # its own events read again are duplicates, not refused by its response's completed
            # end (they are checked below: a different one fails the call); off the hot path
            refusal = state.control.refusal(ids[0], ids[1], ids[2], call_ended=True)
        if refusal is not None:
            terminate(state, buf, refusal, now, out)
            return
    else:
        key = event.key
        refusal = state.control.refusal(ids[0], ids[1], ids[2])
        if refusal is None and state.control.denial(ids[0], ids[1], ids[2:]) is not None:
            refusal = TerminalReason.CONFIRMATION_DENIED  # denied before it opened
        if refusal is None:
            refusal = capacity_refusal(state, key.tenant, now, out)
        buf = _new_buffer(state, key, now, refusal is None)
        if refusal is not None:
            buf.last_ts = event.ts
            buf.provider = event.provider
            terminate(state, buf, refusal, now, out)
            return
        is_new = True
    buf.last_ts = max(buf.last_ts, event.ts)
    buf.last_activity = max(buf.last_activity, now)
    if buf.counted:  # keep ``active`` in order of activity, least recent first
        active = state.active
        active[ids] = active.pop(ids)
    if not buf.provider:
        buf.provider = event.provider
    try:
        if isinstance(event, CallDelta):
            _apply_delta(state, buf, event)
        elif isinstance(event, CallStarted):
            _apply_start(state, buf, event)
        else:
            buf.barrier = _later(buf.barrier, barrier)
            _apply_end(state, buf, event, now, out)
    except AssemblyError as exc:
        buf.parse_result = buf.parse_result or exc.reason
        terminate(state, buf, _reason_for(exc), now, out)
        return
    if is_new and buf.state is CallState.COLLECTING:
        out.insert(
            0, outputs.status(buf, UserState.PREPARING, False, "Preparing the request.", now)
        )
    state.dirty.add(buf._state_key or buf.state_key)  # _touch


def _new_buffer(state: AssemblyState, key: CallKey, now: float, opens: bool) -> CallBuffer:
    buf = CallBuffer(key=key, started_at=now, last_activity=now)
    state.calls[key] = buf
    state.live[key.as_tuple] = buf
    if opens:
        state.count(buf)
        state.control.ensure_turn(key.tenant, key.turn_id, now)
        state.mark(turn_state_key(key.tenant, key.turn_id))
    return buf


def _apply_start(state: AssemblyState, buf: CallBuffer, event: CallStarted) -> None:
    if buf.tool is None:
        buf.tool, buf.namespace, buf.actor = event.tool, event.namespace, event.actor
        _check_tool_bounds(state, buf)  # deltas may have arrived first, under partition limits
    elif (buf.tool, buf.namespace, buf.actor) != (event.tool, event.namespace, event.actor):
        raise DuplicateConflict(
            detail="call.started repeated with a different tool, namespace or actor"
        )
    if buf.state is CallState.ABSENT or buf.state is CallState.COLLECTING:
        buf.fire(Trigger.START)
    # a start after the end (terminal_candidate waiting for binding) adds nothing


def _apply_delta(state: AssemblyState, buf: CallBuffer, event: CallDelta) -> None:
    if buf.state is CallState.TERMINAL_CANDIDATE:
        if buf.texts.get(event.seq) == event.delta:
            buf.duplicate_count += 1
            state.duplicate_deltas += 1
            return
        raise SequenceGap(detail="a delta arrived after the terminal event")
    max_bytes, max_deltas = call_bounds(state, buf.tool, buf.namespace)
    limits = state.limits
    seq = event.seq
    before = buf.byte_count
    outcome = buf.add_delta(
        seq,
        event.delta,
        max_bytes=max_bytes,
        max_deltas=max_deltas,
        max_window=limits.max_reorder_window,
        depth=limits.max_depth,
    )
    if outcome is DeltaOutcome.DUPLICATE:
        state.duplicate_deltas += 1
    else:
        if buf.counted:
            state.buffered_bytes += buf.byte_count - before
        text_key = f"{buf._text_key_prefix or buf.text_key_prefix}{seq}]"  # _text_key
        dirty = state.dirty
        if text_key not in dirty:
            state.fresh.add(text_key)  # new: if it goes before the drain, it is never written
        dirty.add(text_key)
    if buf.state is CallState.ABSENT:
        buf.fire(Trigger.DELTA)


def _apply_end(
    state: AssemblyState, buf: CallBuffer, event: CallEnded, now: float, out: list[OutputRecord]
) -> None:
    if buf.state is CallState.TERMINAL_CANDIDATE:
        if event.terminal_event_id != buf.terminal_event_id:
            raise DuplicateConflict(detail="a second, different terminal event")
        return  # the same terminal redelivered
    if buf.tool is None:
        raise SequenceGap(detail="terminal event without call.started")
    _check_tool_bounds(state, buf)  # every per-tool bound holds at the terminal, in any order
    text = buf.finish(event.seq, state.limits.max_depth)
    buf.terminal_event_id = event.terminal_event_id
    buf.provider_arguments = event.arguments
    buf.fire(Trigger.END)
    buf.parse_result = "complete"
    state.touch(buf)
    try_validate(state, buf, text, now, out)


def _check_tool_bounds(state: AssemblyState, buf: CallBuffer) -> None:
    max_bytes, max_deltas = call_bounds(state, buf.tool, buf.namespace)
    buf.check_bounds(max_bytes=max_bytes, max_deltas=max_deltas)


def call_bounds(state: AssemblyState, tool: str | None, namespace: str | None) -> tuple[int, int]:
    """``(limits.call_bytes(d), limits.call_deltas(d))`` for the declaration ``d`` that
    ``tool`` in ``namespace`` resolves to (None: no tool yet, or an unknown one), cached per
    declared identity; unknown names are not cached (a model may write any number of them)."""
    if state.bounds_limits is not state.limits or state.bounds_registry is not state.registry:
        state.bounds = {}
        state.bounds_limits, state.bounds_registry = state.limits, state.registry
    slot = tool if namespace is None or tool is None else (namespace, tool)
    found = state.bounds.get(slot)
    if found is not None:
        return found
    resolution = state.registry.resolve(tool, namespace) if tool else None
    declaration = resolution.declaration if resolution else None
    found = (state.limits.call_bytes(declaration), state.limits.call_deltas(declaration))
    if declaration is not None or not tool:
        state.bounds[slot] = found
    return found


_VALIDATED_STATES = frozenset({CallState.AWAITING_RESPONSE, CallState.VALIDATED})

_ERROR_REASON = {
    "malformed_json": TerminalReason.MALFORMED_JSON,
    "depth_limit": TerminalReason.SIZE_LIMIT,
    "size_limit": TerminalReason.SIZE_LIMIT,
    "sequence_gap": TerminalReason.SEQUENCE_GAP,
    "duplicate_conflict": TerminalReason.DUPLICATE_CONFLICT,
    "arguments_mismatch": TerminalReason.ARGUMENTS_MISMATCH,
}


def _reason_for(exc: AssemblyError) -> TerminalReason:
    return _ERROR_REASON.get(exc.reason, TerminalReason.MALFORMED_JSON)
