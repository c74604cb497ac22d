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

Where the rules live. This module is the facade: it owns the entry points (``handle_record``,
``handle_parsed``, ``handle_decoded``, ``handle`` routing each event to its owner, ``tick`` with
the expiry of waiting calls) and the statistics the runtime reads; it must not hold a rule of its
own beyond routing and expiry. :class:`Assembler` is one object built in layers, each a base of
the next and calling only the layers below it (why layers and not collaborators:
:mod:`processor.core.assembly_state`):

* :mod:`~processor.core.assembly_state`: every field of the state, the open-buffer indexes and
  the dirty keys;
* :mod:`~processor.core.forgetting`: terminating calls; the retention window and count bounds;
* :mod:`~processor.core.changelog`: ``drain_changes`` and ``restore``;
* :mod:`~processor.core.gating`: response verdicts, the control barrier, release and dispatch;
* :mod:`~processor.core.binding`: turn bindings, admission (fair share), validation on binding;
* :mod:`~processor.core.control_commands`: cancellation, confirmation, operator commands, replay
  protection;
* :mod:`~processor.core.fragments`: ``call.started`` / ``call.delta`` / ``call.ended`` (the
  per-delta path).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from processor.core import outputs
from processor.core.buffer import CallBuffer
from processor.core.changelog import StateChange
from processor.core.errors import RecordRejected
from processor.core.events import (
    CallConfirmed,
    CallDelta,
    CallDenied,
    CallEnded,
    CallKey,
    CallStarted,
    DeadLetter,
    InputEvent,
    OutputRecord,
    ResponseEnded,
    TurnCancelled,
    TurnStarted,
    decode_input,
    decode_input_value,
    event_time,
)
from processor.core.fragments import Fragments
from processor.core.outputs import RecordSource
from processor.core.states import CallState, TerminalReason

__all__ = ["Assembler", "RecordSource", "StateChange"]


class Assembler(Fragments):
    """Owns the call buffers and control state of one partition.

    ``Assembler(registry, limits=None, *, verifier=None)``; the fields are declared in
    :class:`processor.core.assembly_state.AssemblyState`, the rules in the layers it builds on.
    """

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
        # a fragment event at or before the latest ts of a call of its tenant that the count
        # bound forgot is stale
        if when < now - self.limits.retention_seconds or (
            isinstance(event, _FRAGMENT_EVENTS)
            and (
                when <= self._evicted_before
                or (self._stale_before and when <= self._stale_before.get(event.tenant, 0.0))
            )
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

    def tick(self, now: float, *, control_end: int | None = None) -> list[OutputRecord]:
        """Expire idle buffers, unbound candidates, unanswered confirmations; forget old state.

        ``control_end`` is this partition's ``control`` end offset (last stable) read at ``now``
        or later, from a runtime that reads control apart from fragments: an unbound candidate
        then fails for want of its binding only once control is applied up to an end read after
        its wait ran out (``TurnBinding._binding_expired``).
        """
        out: list[OutputRecord] = []
        for buf in list(self._active.values()):
            reason = self._expiry(buf, now, control_end)
            if reason is TerminalReason.PERMISSION_DENIED:
                buf.validation_result = "turn_not_bound"
            if reason is not None:
                self._terminate(buf, reason, now, out)
        self._forget(now - self.limits.retention_seconds)
        return out

    def _expiry(
        self, buf: CallBuffer, now: float, control_end: int | None
    ) -> TerminalReason | None:
        """Why a waiting buffer has waited too long, if it has."""
        limits = self.limits
        if buf.state is CallState.COLLECTING:
            idle = now - buf.last_activity > limits.idle_timeout_seconds
            return TerminalReason.IDLE_TIMEOUT if idle else None
        if buf.state is CallState.TERMINAL_CANDIDATE and buf.awaiting_binding_since is not None:
            unbound = self._binding_expired(buf, now, control_end)
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


_FRAGMENT_EVENTS = (CallStarted, CallDelta, CallEnded, ResponseEnded)
