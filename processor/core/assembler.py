"""The per-partition Assembler: fragment and control events in, decisions out. No IO.

``handle(record, now)`` and ``tick(now)`` return output records (dispatch, proposal, status,
ledger, audit, deadletter). A record is either the raw bytes read from a topic (with its
``source``: anything undecodable or stale becomes a dead letter) or an event decoded in
process. Time is passed in; there is no clock, randomness or IO inside, so the same inputs always
give the same outputs (the offline replay relies on it).

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

Where the rules live. This module is the facade, built h11-style from parts rather than base
classes: one state object (:class:`~processor.core.assembly_state.AssemblyState`, at
``Assembler.state``) and rule modules whose functions take that state explicitly, each importing
only the modules above it in this list. The facade owns the verbs (``handle`` for records,
``tick`` for time, ``advance_control``, ``drain_changes`` / ``restore``), decoding a raw record
and the stale check, routing each event to its rule, and the read-only figures the runtime
reads; it holds no rule of its own:

* :mod:`~processor.core.assembly_state`: every field of the state, the open-buffer indexes and
  the dirty keys;
* :mod:`~processor.core.forgetting`: ``terminate`` / ``stop``; the retention window and count
  bounds (``forget``);
* :mod:`~processor.core.changelog`: ``drain_changes`` and ``restore``;
* :mod:`~processor.core.gating`: response verdicts, the control barrier, ``try_release`` and
  ``dispatch``;
* :mod:`~processor.core.binding`: turn bindings, admission (fair share), ``try_validate``;
* :mod:`~processor.core.control_commands`: cancellation, confirmation, denial, operator
  commands, replay protection;
* :mod:`~processor.core.fragments`: ``on_fragment`` (``call.started`` / ``call.delta`` /
  ``call.ended``, the per-delta path);
* :mod:`~processor.core.expiry`: the idle, binding-wait, response-wait and confirmation expiry
  that ``tick`` applies.
"""

from __future__ import annotations

from processor.core import changelog, gating, outputs
from processor.core.assembly_state import AssemblyState
from processor.core.authn import CommandVerifier
from processor.core.binding import on_turn_started
from processor.core.buffer import CallBuffer
from processor.core.changelog import StateChange
from processor.core.control import ControlState
from processor.core.control_commands import (
    on_confirmed,
    on_denied,
    on_operator,
    on_turn_cancelled,
)
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
from processor.core.expiry import expire
from processor.core.forgetting import forget, stale_before
from processor.core.fragments import on_fragment
from processor.core.gating import on_response_ended
from processor.core.inert import CallTuple, InertCall
from processor.core.outputs import RecordSource
from processor.core.policy import Limits
from processor.core.registry import Registry
from processor.core.states import CallState

__all__ = ["Assembler", "RecordSource", "StateChange"]

_NOT_PARSED: object = object()  # ``parsed`` not given: the record's bytes are parsed here


class Assembler:
    """Owns the call buffers and control state of one partition (:attr:`state`), and applies
    the rules of the modules listed in :mod:`processor.core.assembler` to them."""

    def __init__(
        self,
        registry: Registry,
        limits: Limits | None = None,
        *,
        verifier: CommandVerifier | None = None,
    ) -> None:
        self.state = AssemblyState(registry, limits, verifier=verifier)

    # ================================================================== records

    def handle(
        self,
        record: bytes | InputEvent,
        now: float,
        *,
        source: RecordSource | None = None,
        parsed: object = _NOT_PARSED,
        decoded: InputEvent | None = None,
        record_time: float | None = None,
        barrier: int | None = None,
    ) -> list[OutputRecord]:
        """Apply one record; return its outputs.

        ``record`` is either the raw bytes of a record read from ``source`` (required then):
        decoded here, and an unusable or stale record becomes a dead letter; ``parsed`` is its
        JSON value when the caller already parsed it (``orjson.loads`` of the bytes, which dead
        letters quote: the same decisions, one parse fewer), ``decoded`` the event when it
        already decoded it. Or ``record`` is an event decoded in process (offline tools, tests),
        applied as it is.

        ``now`` is processing time (buffers' activity, expiry deadlines); ``record_time``, when
        known, is when the record was written (the broker's append time): operator-command
        expiry and confirmation deadlines are judged by it, so a worker that reads a backlog late
        does not reject what arrived in time. Without it, ``now`` stands in (offline replay).
        ``barrier`` is, for a fragment record, the control position that must be applied before
        what it completes may act (see the module docstring).
        """
        if type(record) is CallDelta:  # the hot path (what ``_apply`` does for a delta)
            out: list[OutputRecord] = []
            on_fragment(self.state, record, now, barrier, out)
            return out
        if isinstance(record, bytes):
            if source is None:
                raise TypeError("a raw record is handled with the source it was read from")
            return self._receive(
                record,
                source,
                now,
                parsed=parsed,
                decoded=decoded,
                record_time=record_time,
                barrier=barrier,
            )
        return self._apply(record, now, record_time, barrier)

    def _receive(
        self,
        payload: bytes,
        source: RecordSource,
        now: float,
        *,
        parsed: object,
        decoded: InputEvent | None,
        record_time: float | None,
        barrier: int | None,
    ) -> list[OutputRecord]:
        """Decode a raw record and apply it; an unusable or stale one becomes a dead letter."""
        state = self.state
        limits = state.limits
        if decoded is not None:
            event = decoded
        else:
            try:  # dated by the worker's own clock: a producer's record timestamp may lie
                if parsed is _NOT_PARSED:
                    event = decode_input(payload, now=now, clock_skew=limits.max_clock_skew_seconds)
                else:
                    skew = limits.max_clock_skew_seconds
                    event = decode_input_value(parsed, now=now, clock_skew=skew)
            except RecordRejected as exc:
                return [self.dead_letter(payload, source, exc.reason, exc.detail, now)]
        when = event_time(event)
        # a fragment event at or before the latest ts of a call of its tenant that the count
        # bound forgot is stale
        if when < now - limits.retention_seconds or (
            isinstance(event, _FRAGMENT_EVENTS)
            and (
                when <= state.evicted_before
                or (state.stale_cutoffs and when <= state.stale_cutoffs.get(event.tenant, 0.0))
            )
        ):
            detail = "older than the retention window; its state may have been forgotten"
            return [self.dead_letter(payload, source, "stale_event", detail, now)]
        return self._apply(event, now, record_time, barrier)

    def _apply(
        self, event: InputEvent, now: float, record_time: float | None, barrier: int | None
    ) -> list[OutputRecord]:
        """Route one decoded event to the rule that owns it."""
        state = self.state
        out: list[OutputRecord] = []
        if type(event) is CallDelta:  # the hot path (what the match below does for a delta)
            on_fragment(state, event, now, barrier, out)
            return out
        written = now if record_time is None else record_time
        match event:
            case CallStarted() | CallDelta() | CallEnded():
                on_fragment(state, event, now, barrier, out)
            case ResponseEnded():
                on_response_ended(state, event, now, barrier, out)
            case TurnStarted():
                on_turn_started(state, event, now, out)
            case TurnCancelled():
                on_turn_cancelled(state, event, now, out)
            case CallConfirmed():
                on_confirmed(state, event, now, written, out)
            case CallDenied():
                on_denied(state, event, now, written, out)
            case _:
                on_operator(state, event, now, written, out)
        return out

    def dead_letter(
        self, payload: bytes, source: RecordSource, reason: str, detail: str, now: float
    ) -> DeadLetter:
        return outputs.dead_letter(payload, source, reason, detail, now)

    # ================================================================== time and control

    def tick(self, now: float, *, control_end: int | None = None) -> list[OutputRecord]:
        """Expire idle buffers, unbound candidates, unanswered confirmations; forget old state.

        ``control_end`` is this partition's ``control`` end offset (last stable) read at ``now``
        or later, from a runtime that reads control apart from fragments: an unbound candidate
        then fails for want of its binding only once control is applied up to an end read after
        its wait ran out (:func:`processor.core.expiry.binding_expired`).
        """
        out: list[OutputRecord] = []
        expire(self.state, now, control_end, out)
        forget(self.state, now - self.state.limits.retention_seconds)
        return out

    def advance_control(self, position: int, now: float) -> list[OutputRecord]:
        """This partition's ``control`` is applied up to ``position`` (its next offset).

        Releases the calls that were held only until that position; returns their outputs.
        """
        return gating.advance_control(self.state, position, now)

    # ================================================================== the changelog

    def drain_changes(self) -> list[StateChange]:
        """The state records changed since the last drain, for the changelog topic."""
        return changelog.drain_changes(self.state)

    def restore(self, key: str, value: bytes | None) -> str | None:
        """Apply one changelog record (the last one per key wins, as in a compacted topic).

        Returns None, or why the record was skipped (:func:`processor.core.changelog.restore`).
        """
        return changelog.restore(self.state, key, value)

    # ================================================================== read-only figures

    @property
    def registry(self) -> Registry:
        return self.state.registry

    @property
    def limits(self) -> Limits:
        return self.state.limits

    @property
    def control(self) -> ControlState:
        return self.state.control

    @property
    def calls(self) -> dict[CallKey, CallBuffer]:
        """The calls not yet terminal (read only: the rules own them)."""
        return self.state.calls

    @property
    def inert(self) -> dict[CallTuple, InertCall]:
        """The terminal calls still remembered (read only: the rules own them)."""
        return self.state.inert

    @property
    def control_position(self) -> int | None:
        return self.state.control_position

    @property
    def holds_for_control(self) -> bool:
        """Whether some call waits for ``control`` to be applied further."""
        return gating.holds_for_control(self.state)

    @property
    def waiting_for_control(self) -> int:
        """How many open calls wait for ``control`` (:func:`gating.waiting_for_control`)."""
        return gating.waiting_for_control(self.state)

    def stale_before(self, tenant: str) -> float:
        """Fragment events of ``tenant`` dated at or before this are stale (0.0: none)."""
        return stale_before(self.state, tenant)

    @property
    def open_buffers(self) -> int:
        return self.state.open_total

    @property
    def buffered_bytes(self) -> int:
        return self.state.buffered_bytes

    @property
    def inert_calls(self) -> int:
        """Terminal calls still remembered (absorbing their late events)."""
        return len(self.state.inert)

    @property
    def evictions(self) -> int:
        """Open buffers failed to admit another tenant's call (fair share)."""
        return self.state.evictions

    @property
    def turn_evictions(self) -> int:
        return self.state.turn_evictions

    @property
    def response_evictions(self) -> int:
        return self.state.response_evictions

    @property
    def late_events(self) -> int:
        """Events for absorbing calls, ignored (a delivery condition)."""
        return self.state.late_events

    @property
    def duplicate_deltas(self) -> int:
        return self.state.duplicate_deltas

    def call_state(self, key: CallKey) -> CallState:
        state = self.state
        buf = state.calls.get(key)
        if buf is not None:
            return buf.state
        inert = state.inert.get(key.as_tuple)
        return inert.state if inert else CallState.ABSENT


_FRAGMENT_EVENTS = (CallStarted, CallDelta, CallEnded, ResponseEnded)
