"""The per-partition Assembler: fragment and control events in, decisions out. No IO.

``handle(event, now)`` and ``tick(now)`` return output records (dispatch, proposal, status, ledger,
audit, deadletter); ``handle_record(payload, source, now)`` does the same for raw bytes, turning
anything undecodable into a dead letter. Time is passed in; there is no clock, randomness or IO
inside, so the same inputs always give the same outputs (the offline replay relies on it).

Every state change is tracked by key; ``drain_changes()`` returns the changelog records the Kafka
runtime writes in the same transaction as the outputs, and ``restore(key, value)`` rebuilds the
state from them after a crash or a rebalance.

The order of a call's life, and the only road to ``dispatch``::

    call.started / call.delta      → collecting (deltas scanned as they arrive)
    call.ended                     → terminal_candidate (positions complete, JSON complete)
    turn bound (turn.started)      → one strict parse, schema, business rules, actor,
                                     permission, switches → awaiting_response
    response.ended (completed)     → validated, once the control barrier is applied (below)
                                   → dispatched, or a proposal that waits for call.confirmed

Response verdicts. A validated call acts only once the response it belongs to ended with the
provider's normal completion (``response.ended`` with ``status: completed``); any other ending
(refused, filtered, cut, failed, an alternative that was not chosen) makes it inert, and so does
waiting longer than ``response_wait_seconds``. A tool declared ``dispatch_on: call_end`` opts out
of that wait.

Causal control. Kafka orders ``control`` and ``fragments`` separately, so a worker catching up
on a backlog may read a call's terminal before a cancellation that was committed earlier. The
runtime therefore passes, with each fragment record, a *barrier*: the committed end offset of
this partition's ``control`` topic taken after the record was fetched, and reports with
:meth:`Assembler.advance_control` how far ``control`` has been applied. A call releases only
when the applied position has reached the barriers of its terminal events (its ``call.ended``
and its response's ``response.ended``), so every control record committed before them has
been applied first, whatever the batches. Without barriers (offline replay, in-process use of
one ordered stream) nothing is held.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from processor.core import outputs
from processor.core.assembly_state import _later
from processor.core.binding import TurnBinding
from processor.core.buffer import CallBuffer, DeltaOutcome
from processor.core.changelog import StateChange
from processor.core.control import (
    COMMAND_CLASS,
    Command,
    CommandClass,
    Flag,
    Verdict,
    cancel_reason,
    command_scope,
    command_state_key,
    judge_command,
    response_state_key,
    tenant_state_key,
    tool_slot,
    tool_state_key,
    turn_state_key,
)
from processor.core.errors import AssemblyError, DuplicateConflict, RecordRejected, SequenceGap
from processor.core.events import (
    AuditOutcome,
    CallConfirmed,
    CallDelta,
    CallDenied,
    CallEnded,
    CallKey,
    CallStarted,
    DeadLetter,
    InputEvent,
    OperatorCommand,
    OutputRecord,
    ResponseEnded,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    TurnStarted,
    UserState,
    decode_input,
    decode_input_value,
    event_time,
)
from processor.core.outputs import RecordSource
from processor.core.states import CallState, TerminalReason, Trigger

__all__ = ["Assembler", "RecordSource", "StateChange"]


class Assembler(TurnBinding):
    """Owns the call buffers and control state of one partition."""

    # ================================================================== entry points

    def handle_record(
        self,
        payload: bytes,
        source: RecordSource,
        now: float,
        *,
        record_time: float | None = None,
        barrier: int | None = None,
    ) -> list[OutputRecord]:
        """Decode one raw record and handle it; an unusable record becomes a dead letter.

        ``record_time`` is when the record was written (the broker's append time): commands are
        judged by it, not by when a lagging worker happens to read them. ``barrier`` is, for a
        fragment record, the control position that must be applied before what it completes may
        act (see the module docstring).
        """
        decode = functools.partial(decode_input, payload)
        return self._decode_and_handle(
            decode, payload, source, now, record_time=record_time, barrier=barrier
        )

    def handle_parsed(
        self,
        raw: object,
        payload: bytes,
        source: RecordSource,
        now: float,
        *,
        record_time: float | None = None,
        barrier: int | None = None,
    ) -> list[OutputRecord]:
        """:meth:`handle_record` of a record its caller already parsed (``orjson.loads`` of
        ``payload``, which dead letters quote): the same decisions, one parse fewer."""
        decode = functools.partial(decode_input_value, raw)
        return self._decode_and_handle(
            decode, payload, source, now, record_time=record_time, barrier=barrier
        )

    def _decode_and_handle(
        self,
        decode: Callable[..., InputEvent],
        payload: bytes,
        source: RecordSource,
        now: float,
        *,
        record_time: float | None,
        barrier: int | None,
    ) -> list[OutputRecord]:
        try:  # dated by the worker's own clock: a producer's record timestamp may lie
            event = decode(now=now, clock_skew=self.limits.max_clock_skew_seconds)
        except RecordRejected as exc:
            return [self.dead_letter(payload, source, exc.reason, exc.detail, now)]
        return self.handle_decoded(
            event, payload, source, now, record_time=record_time, barrier=barrier
        )

    def handle_decoded(
        self,
        event: InputEvent,
        payload: bytes,
        source: RecordSource,
        now: float,
        *,
        record_time: float | None = None,
        barrier: int | None = None,
    ) -> list[OutputRecord]:
        """:meth:`handle_record` after decoding: a record too old to judge is a dead letter."""
        when = event_time(event)
        # a fragment event at or before the latest ts of a call the count bound forgot is stale
        if when < now - self.limits.retention_seconds or (
            when <= self._evicted_before and isinstance(event, _FRAGMENT_EVENTS)
        ):
            detail = "older than the retention window; its state may have been forgotten"
            return [self.dead_letter(payload, source, "stale_event", detail, now)]
        return self.handle(event, now, record_time=record_time, barrier=barrier)

    def handle(
        self,
        event: InputEvent,
        now: float,
        *,
        record_time: float | None = None,
        barrier: int | None = None,
    ) -> list[OutputRecord]:
        """Apply one decoded fragment or control event.

        ``now`` is processing time (buffers' activity, expiry deadlines); ``record_time``, when
        known, is when the event was written: operator-command expiry and confirmation deadlines
        are judged by it, so a worker that reads a backlog late does not reject what arrived in
        time. Without it, ``now`` stands in (offline replay).
        """
        out: list[OutputRecord] = []
        if type(event) is CallDelta:  # the hot path (what the match below does for a delta)
            self._on_call_event(event, now, barrier, out)
            return out
        written = now if record_time is None else record_time
        match event:
            case CallStarted() | CallDelta() | CallEnded():
                self._on_call_event(event, now, barrier, out)
            case ResponseEnded():
                self._on_response_ended(event, now, barrier, out)
            case TurnStarted():
                self._on_turn_started(event, now, out)
            case TurnCancelled():
                self._on_turn_cancelled(event, now, out)
            case CallConfirmed():
                self._on_confirmed(event, now, written, out)
            case CallDenied():
                self._on_denied(event, now, written, out)
            case _:
                self._on_operator(event, now, written, out)
        return out

    def tick(self, now: float) -> list[OutputRecord]:
        """Expire idle buffers, unbound candidates, unanswered confirmations; forget old state."""
        out: list[OutputRecord] = []
        for buf in list(self._active.values()):
            reason = self._expiry(buf, now)
            if reason is TerminalReason.PERMISSION_DENIED:
                buf.validation_result = "turn_not_bound"
            if reason is not None:
                self._terminate(buf, reason, now, out)
        self._forget(now - self.limits.retention_seconds)
        return out

    def _expiry(self, buf: CallBuffer, now: float) -> TerminalReason | None:
        """Why a waiting buffer has waited too long, if it has."""
        limits = self.limits
        if buf.state is CallState.COLLECTING:
            idle = now - buf.last_activity > limits.idle_timeout_seconds
            return TerminalReason.IDLE_TIMEOUT if idle else None
        if buf.state is CallState.TERMINAL_CANDIDATE and buf.awaiting_binding_since is not None:
            unbound = now - buf.awaiting_binding_since > limits.binding_wait_seconds
            return TerminalReason.PERMISSION_DENIED if unbound else None
        if buf.state is CallState.AWAITING_RESPONSE and buf.key not in self._barrier_held:
            since = buf.validated_at if buf.validated_at is not None else buf.last_activity
            late = now - since > limits.response_wait_seconds
            return TerminalReason.RESPONSE_TIMEOUT if late else None
        if buf.state is CallState.VALIDATED and buf.expires_at is not None:
            return TerminalReason.CONFIRMATION_EXPIRED if now > buf.expires_at else None
        return None

    def dead_letter(
        self, payload: bytes, source: RecordSource, reason: str, detail: str, now: float
    ) -> DeadLetter:
        return outputs.dead_letter(payload, source, reason, detail, now)

    # ================================================================== statistics

    @property
    def open_buffers(self) -> int:
        return self._open_total

    @property
    def buffered_bytes(self) -> int:
        return self._buffered_bytes

    def call_state(self, key: CallKey) -> CallState:
        buf = self.calls.get(key)
        if buf is not None:
            return buf.state
        inert = self.inert.get(key.as_tuple)
        return inert.state if inert else CallState.ABSENT

    @property
    def inert_calls(self) -> int:
        """Terminal calls still remembered (absorbing their late events)."""
        return len(self.inert)

    @property
    def evicted_before(self) -> float:
        """Fragment events older than this are stale (0.0: the count bound never forgot)."""
        return self._evicted_before

    def _on_call_event(
        self,
        event: CallStarted | CallDelta | CallEnded,
        now: float,
        barrier: int | None,
        out: list[OutputRecord],
    ) -> None:
        ids = (event.tenant, event.turn_id, event.response_id, event.item_id, event.call_id)
        if ids in self.inert:
            self.late_events += 1  # a replay of a call that is already terminal
            return
        buf = self._live.get(ids)
        is_new = False
        if buf is not None:
            if buf.state in _VALIDATED_STATES:
                self.late_events += 1  # a replay of a call whose fragments are already complete
                return
            refusal = self.control.refusal(ids[0], ids[1], ids[2])
            if refusal is not None:
                self._terminate(buf, refusal, now, out)
                return
        else:
            key = event.key
            refusal = self.control.refusal(ids[0], ids[1], ids[2])
            if refusal is None:
                refusal = self._capacity_refusal(key.tenant, now, out)
            buf = self._new_buffer(key, now, refusal is None)
            if refusal is not None:
                buf.last_ts = event.ts
                buf.provider = event.provider
                self._terminate(buf, refusal, now, out)
                return
            is_new = True
        buf.last_ts = max(buf.last_ts, event.ts)
        buf.last_activity = max(buf.last_activity, now)
        if buf.counted:  # keep ``_active`` in order of activity, least recent first
            active = self._active
            active[ids] = active.pop(ids)
        if not buf.provider:
            buf.provider = event.provider
        try:
            if isinstance(event, CallDelta):
                self._apply_delta(buf, event)
            elif isinstance(event, CallStarted):
                self._apply_start(buf, event)
            else:
                buf.barrier = _later(buf.barrier, barrier)
                self._apply_end(buf, event, now, out)
        except AssemblyError as exc:
            buf.parse_result = buf.parse_result or exc.reason
            self._terminate(buf, _reason_for(exc), now, out)
            return
        if is_new and buf.state is CallState.COLLECTING:
            out.insert(
                0, outputs.status(buf, UserState.PREPARING, False, "Preparing the request.", now)
            )
        self._dirty.add(buf._state_key or buf.state_key)  # _touch

    def _new_buffer(self, key: CallKey, now: float, opens: bool) -> CallBuffer:
        buf = CallBuffer(key=key, started_at=now, last_activity=now)
        self.calls[key] = buf
        self._live[key.as_tuple] = buf
        if opens:
            self._count(buf)
            self.control.ensure_turn(key.tenant, key.turn_id, now)
            self._mark(turn_state_key(key.tenant, key.turn_id))
        return buf

    def _apply_start(self, buf: CallBuffer, event: CallStarted) -> None:
        if buf.tool is None:
            buf.tool, buf.namespace, buf.actor = event.tool, event.namespace, event.actor
            self._check_tool_bounds(buf)  # deltas may have arrived first, under partition limits
        elif (buf.tool, buf.namespace, buf.actor) != (event.tool, event.namespace, event.actor):
            raise DuplicateConflict(
                detail="call.started repeated with a different tool, namespace or actor"
            )
        if buf.state is CallState.ABSENT or buf.state is CallState.COLLECTING:
            buf.fire(Trigger.START)
        # a start after the end (terminal_candidate waiting for binding) adds nothing

    def _apply_delta(self, buf: CallBuffer, event: CallDelta) -> None:
        if buf.state is CallState.TERMINAL_CANDIDATE:
            if buf.texts.get(event.seq) == event.delta:
                buf.duplicate_count += 1
                self.duplicate_deltas += 1
                return
            raise SequenceGap(detail="a delta arrived after the terminal event")
        max_bytes, max_deltas = self._call_bounds(buf.tool, buf.namespace)
        limits = self.limits
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
            self.duplicate_deltas += 1
        else:
            if buf.counted:
                self._buffered_bytes += buf.byte_count - before
            text_key = f"{buf._text_key_prefix or buf.text_key_prefix}{seq}]"  # _text_key
            dirty = self._dirty
            if text_key not in dirty:
                self._fresh.add(text_key)  # new: if it goes before the drain, it is never written
            dirty.add(text_key)
        if buf.state is CallState.ABSENT:
            buf.fire(Trigger.DELTA)

    def _apply_end(
        self, buf: CallBuffer, event: CallEnded, now: float, out: list[OutputRecord]
    ) -> None:
        if buf.state is CallState.TERMINAL_CANDIDATE:
            if event.terminal_event_id != buf.terminal_event_id:
                raise DuplicateConflict(detail="a second, different terminal event")
            return  # the same terminal redelivered
        if buf.tool is None:
            raise SequenceGap(detail="terminal event without call.started")
        self._check_tool_bounds(buf)  # every per-tool bound holds at the terminal, in any order
        text = buf.finish(event.seq, self.limits.max_depth)
        buf.terminal_event_id = event.terminal_event_id
        buf.provider_arguments = event.arguments
        buf.fire(Trigger.END)
        buf.parse_result = "complete"
        self._touch(buf)
        self._try_validate(buf, text, now, out)

    def _check_tool_bounds(self, buf: CallBuffer) -> None:
        max_bytes, max_deltas = self._call_bounds(buf.tool, buf.namespace)
        buf.check_bounds(max_bytes=max_bytes, max_deltas=max_deltas)

    def _call_bounds(self, tool: str | None, namespace: str | None) -> tuple[int, int]:
        """``(limits.call_bytes(d), limits.call_deltas(d))`` for the declaration ``d`` that
        ``tool`` in ``namespace`` resolves to (None: no tool yet, or an unknown one), cached per
        declared identity; unknown names are not cached (a model may write any number of them)."""
        if self._bounds_limits is not self.limits or self._bounds_registry is not self.registry:
            self._bounds = {}
            self._bounds_limits, self._bounds_registry = self.limits, self.registry
        slot = tool if namespace is None or tool is None else (namespace, tool)
        found = self._bounds.get(slot)
        if found is not None:
            return found
        resolution = self.registry.resolve(tool, namespace) if tool else None
        declaration = resolution.declaration if resolution else None
        found = (self.limits.call_bytes(declaration), self.limits.call_deltas(declaration))
        if declaration is not None or not tool:
            self._bounds[slot] = found
        return found

    def _on_turn_cancelled(self, event: TurnCancelled, now: float, out: list[OutputRecord]) -> None:
        outcome = self._admit(event, now, out)
        if outcome is None:
            return
        reason = cancel_reason(event.reason)
        turn = self.control.ensure_turn(event.tenant, event.turn_id, now)
        if turn.cancelled is None:
            self.control.cancel_turn(turn, reason.value)
            self._mark(turn_state_key(event.tenant, event.turn_id))
        affected = self._stop(self._turn_calls(event.tenant, event.turn_id), reason, now, out)
        out.append(outputs.audit(event, outcome, None, affected, now))

    def _on_confirmed(
        self, event: CallConfirmed, now: float, written: float, out: list[OutputRecord]
    ) -> None:
        if self._admit(event, now, out) is None:
            return
        buf = self.calls.get(event.key)
        problem = self._confirmation_problem(buf, event.actor, written)
        if problem is None and buf is not None and buf.args_digest != event.args_digest:
            problem = "digest_mismatch"
        if problem is not None or buf is None:
            if problem == "expired" and buf is not None:
                self._terminate(buf, TerminalReason.CONFIRMATION_EXPIRED, now, out)
            out.append(outputs.audit(event, AuditOutcome.REJECTED, problem, [], now))
            return
        out.append(outputs.audit(event, AuditOutcome.APPLIED, None, [buf.key], now))
        self._dispatch(buf, event.command_id, now, out)

    def _on_denied(
        self, event: CallDenied, now: float, written: float, out: list[OutputRecord]
    ) -> None:
        outcome = self._admit(event, now, out)
        if outcome is None:
            return
        buf = self.calls.get(event.key)
        problem = self._confirmation_problem(buf, event.actor, written)
        if problem is not None or buf is None:
            out.append(outputs.audit(event, AuditOutcome.REJECTED, problem, [], now))
            return
        out.append(outputs.audit(event, outcome, None, [buf.key], now))
        self._terminate(buf, TerminalReason.CONFIRMATION_DENIED, now, out)

    def _confirmation_problem(
        self, buf: CallBuffer | None, actor: str, written: float
    ) -> str | None:
        if buf is None or buf.state is not CallState.VALIDATED or buf.expires_at is None:
            return "not_awaiting_confirmation"
        turn = self.control.turn(buf.key.tenant, buf.key.turn_id)
        if turn is None or turn.actor != actor:
            return "wrong_actor"
        if written > buf.expires_at:
            return "expired"
        return None

    def _on_operator(
        self, event: OperatorCommand, now: float, written: float, out: list[OutputRecord]
    ) -> None:
        rejection = self.verifier.verify(event, written)
        if rejection is not None:
            out.append(outputs.audit(event, AuditOutcome.REJECTED, rejection, [], now))
            return
        outcome = self._admit(event, now, out)
        if outcome is None:
            return
        affected: list[CallKey] = []
        flag = Flag(command_id=event.command_id, reason=event.reason, set_at=now)
        match event:
            case ResponseQuarantined():
                key = (event.tenant, event.turn_id, event.response_id)
                self.control.ensure_response(*key, now).quarantined = True
                self._mark(response_state_key(*key))
                affected = self._stop(
                    [b for b in self._turn_calls(*key[:2]) if b.key.response_id == key[2]],
                    TerminalReason.QUARANTINED,
                    now,
                    out,
                )
            case ToolDisabled():
                tool = self._canonical_tool(event.tool)
                self.control.disabled_tools[(tool_slot(event.tenant), tool)] = flag
                self._mark(tool_state_key(event.tenant, tool))
                affected = self._stop(
                    [
                        b
                        for b in self._active.values()
                        if event.tenant in (None, b.key.tenant) and tool in self._switch_names(b)
                    ],
                    TerminalReason.TOOL_DISABLED,
                    now,
                    out,
                )
            case ToolEnabled():
                tool = self._canonical_tool(event.tool)
                self.control.disabled_tools.pop((tool_slot(event.tenant), tool), None)
                self._mark(tool_state_key(event.tenant, tool))
            case TenantStopped():
                self.control.stopped_tenants[event.tenant] = flag
                self._mark(tenant_state_key(event.tenant))
                affected = self._stop(
                    [b for b in self._active.values() if b.key.tenant == event.tenant],
                    TerminalReason.TENANT_STOPPED,
                    now,
                    out,
                )
            case TenantResumed():
                self.control.stopped_tenants.pop(event.tenant, None)
                self._mark(tenant_state_key(event.tenant))
        out.append(outputs.audit(event, outcome, None, affected, now))

    def _canonical_tool(self, name: str) -> str:
        """The name a tool switch naming ``name`` is kept under (switches have no namespace)."""
        return self.registry.canonical_switch(name)

    def _switch_names(self, buf: CallBuffer) -> frozenset[str]:
        """The switch names that stop ``buf``'s call: those of the tool its (namespace, name)
        resolves to, else its name as written (canonical as a switch name)."""
        declaration = self._declaration(buf)
        if declaration is not None:
            names: frozenset[str] = self.registry.switch_names(declaration)
            return names
        return frozenset({self._canonical_tool(buf.tool or "")})

    def _admit(self, event: Command, now: float, out: list[OutputRecord]) -> AuditOutcome | None:
        """Replay protection (``control.judge_command``): the outcome to audit once the command
        is applied, or None when it must not be (audited here: ``duplicate`` or ``replayed``).

        The set of remembered ids is bounded (``Limits.max_seen_commands``): when it is full, a
        new command that grants (confirm, resume, enable) is refused as ``replay_window_full``,
        since its replay could not be detected; one that only makes things safer applies
        unremembered (applying it twice is harmless, and it is never dropped, invariant 11).
        """
        seen = self.control.seen_commands
        if len(seen) >= self.limits.max_seen_commands and command_scope(event) not in seen:
            if COMMAND_CLASS[event.type] is CommandClass.GRANT:
                out.append(
                    outputs.audit(event, AuditOutcome.REJECTED, "replay_window_full", [], now)
                )
                return None
            return AuditOutcome.APPLIED
        verdict, scope = judge_command(seen, event, now)
        if verdict is Verdict.NEW:
            self._mark(command_state_key(scope))
            return AuditOutcome.APPLIED
        if verdict is Verdict.CONFLICT:
            return AuditOutcome.CONFLICT
        if verdict is Verdict.DUPLICATE:
            out.append(outputs.audit(event, AuditOutcome.DUPLICATE, None, [], now))
        else:
            out.append(outputs.audit(event, AuditOutcome.REJECTED, "replayed", [], now))
        return None


# ====================================================================== helpers


_FRAGMENT_EVENTS = (CallStarted, CallDelta, CallEnded, ResponseEnded)


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
