"""The executor's runner: claimed calls' handlers, side by side, and their outcomes.

Owns :class:`Runner`: ``start`` runs a claimed call's handler in a slot of its own
(:class:`~processor.executor.inflight.InFlight`, beside the loop and the other calls), under its
timeout and a tracing span; the outcome (``succeeded``, ``failed``, ``unknown`` on a timeout or a
stop while it ran); its result, ledger entry and user status
(:class:`~processor.executor.outputs.OutputRecords`), queued for the partition's next transaction
(``OwnedPartition.finished``, written by
:meth:`~processor.executor.transactions.PartitionWriter.commit` a few milliseconds later,
together with the other ends that finished meanwhile); what a handler's return value becomes
(``_as_output``); and the stop watch (``tell_stopped``): a running call whose turn was stopped is
told so (``Call.stop``), then cancelled after a grace.
Logs and results never hold argument values, and a handler's exception message is never kept
(it may quote them): its class name only.

Must not claim, fence or consume: it runs a call that :mod:`processor.executor.claims` claimed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson
from aiokafka.errors import KafkaError
from pydantic import BaseModel

from processor.core.errors import PROCESS_EXCEPTIONS
from processor.executor.barrier import BarrierTimeout
from processor.executor.executor_state import (
    ClaimedCall,
    FinishedCall,
    OwnedPartition,
    RunningCall,
    Stopping,
    Tally,
)
from processor.executor.fence import Refusal, RefusalCode
from processor.executor.fencing import CallGate
from processor.executor.handlers import Call, ExecutionFailed, OutcomeUnknown, Registration
from processor.executor.inflight import InFlight
from processor.executor.outputs import OutputRecords
from processor.executor.records import ExecutionEntry, ExecutionOutcome, ExecutionResult
from processor.kafka.codec import traceparent_of
from processor.observability import tracing
from processor.observability.logging import fields
from processor.settings import Settings

__all__ = ["Runner"]

log = logging.getLogger("processor.executor.client")  # one logger for all the client's parts

# what stops a running call (a confirmation expiring while it runs does not)
_STOPS: Final = frozenset(
    {
        RefusalCode.TURN_CANCELLED,
        RefusalCode.QUARANTINED,
        RefusalCode.TOOL_DISABLED,
        RefusalCode.TENANT_STOPPED,
    }
)
_WATCH_TIMEOUT: Final = 2.0  # seconds the stop watch may wait for the barrier, then next time


class Runner:
    """Runs claimed calls' handlers side by side and queues their outcomes.

    ``resume(owned)`` is called once a partition paused for an in-order call may go on (its
    waiting call is fetched again)."""

    def __init__(
        self,
        *,
        settings: Settings,
        group: str,
        in_flight: InFlight,
        outputs: OutputRecords,
        tally: Tally,
        gate: CallGate,
        barrier_timeout_seconds: float,
        resume: Callable[[OwnedPartition], None],
        clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.group = group
        self.in_flight = in_flight
        self._outputs = outputs
        self._tally = tally
        self._gate = gate
        self._barrier = gate.barrier
        self._waiting: deque[ClaimedCall] = deque()  # claimed, waiting for a slot
        self._starting: list[ClaimedCall] = []  # taken from the queue, fenced before they start
        self._withdrawn: set[str] = set()  # of those, ended by withdraw meanwhile
        self._starting_lock = asyncio.Lock()
        self._starter: asyncio.Task[None] | None = None
        self._closed = False
        self._watch_timeout = min(barrier_timeout_seconds, _WATCH_TIMEOUT)
        self._resume = resume
        self._clock = clock

    def waiting_in_order(self, owned: OwnedPartition) -> set[tuple[str, str]]:
        """The turns (tenant, turn id) of the partition's in-order calls claimed and not
        started yet (waiting, or being fenced to start)."""
        return {
            (c.dispatch.tenant, c.dispatch.turn_id)
            for c in (*self._waiting, *self._starting)
            if c.owned is owned and c.registration.in_order
        }

    def enqueue(self, claimed: list[ClaimedCall]) -> None:
        """Calls whose claims are committed, to start in claim order as slots free."""
        self._waiting.extend(claimed)
        self._count_waiting()

    def _count_waiting(self) -> None:
        self.in_flight.waiting = len(self._waiting) + len(self._starting)

    def kick(self) -> None:
        """A slot freed: start waiting calls in the background (no fetch, claim or lock in the
        way: the slot is taken within one barrier read)."""
        if not self._waiting or not self.in_flight.free() or self._closed:
            return
        if self._starter is None or self._starter.done():
            self._starter = asyncio.create_task(self.start_waiting())

    async def close(self) -> None:
        """No call starts any more (the executor stops, after its partitions were released)."""
        self._closed = True
        starter, self._starter = self._starter, None
        if starter is not None:
            starter.cancel()
            await asyncio.wait({starter})

    async def start_waiting(self) -> None:
        """Start as many waiting calls as there are free slots, in claim order. The fence is
        read again right before (one barrier read per control partition for all of them): a
        cancellation that raced the claims, or came while they waited, is still seen, and the
        call ends as a refusal of its claim. Calls of a partition lost to a fence meanwhile
        are dropped (the next take reports them ``unknown`` from their claims); calls of a
        partition released meanwhile were ended by :meth:`withdraw`."""
        async with self._starting_lock:
            while self._waiting and self.in_flight.free() > len(self._starting):
                while self._waiting and len(self._starting) < self.in_flight.free():
                    claimed = self._waiting.popleft()
                    if not claimed.owned.lost:
                        self._starting.append(claimed)
                self._count_waiting()
                batch = self._starting
                if not batch:
                    return
                try:
                    checks = [(c.dispatch, c.requirements) for c in batch]
                    refusals = await self._gate.check(checks)
                except Stopping:
                    refusals, stopped = [None] * len(batch), True
                else:
                    stopped = False
                finally:
                    self._starting = []
                    self._count_waiting()
                for claimed, refusal in zip(batch, refusals, strict=True):
                    if claimed.owned.lost or claimed.dispatch.dispatch_id in self._withdrawn:
                        self._withdrawn.discard(claimed.dispatch.dispatch_id)
                        continue
                    if stopped or refusal is not None:
                        code = refusal.code.value if refusal is not None else "executor_stopped"
                        self._end_unstarted(claimed, code, refusal)
                        continue
                    self._start(claimed)
                self.in_flight.finished.set()  # refusals after claims are written promptly too
                if stopped:
                    return

    def withdraw(self, partitions: set[int]) -> None:
        """The claimed calls of these partitions (released, or the executor stopping) that
        have not started never start: each ends as a refusal of its claim
        (``executor_stopped``), written with the release."""
        kept: deque[ClaimedCall] = deque()
        for claimed in self._waiting:
            if claimed.owned.partition not in partitions:
                kept.append(claimed)
            elif not claimed.owned.lost:
                self._end_unstarted(claimed, "executor_stopped", None)
        self._waiting = kept
        for claimed in self._starting:  # being fenced now: not started once that returns
            if claimed.owned.partition in partitions and not claimed.owned.lost:
                self._withdrawn.add(claimed.dispatch.dispatch_id)
                self._end_unstarted(claimed, "executor_stopped", None)
        self._count_waiting()

    def _end_unstarted(self, claimed: ClaimedCall, code: str, refusal: Refusal | None) -> None:
        owned = claimed.owned
        refused = self._outputs.refusal(
            claimed.dispatch,
            claimed.headers,
            code,
            where=(owned.partition, claimed.offset),
            refusal=refusal,
            claim=claimed.claim,
        )
        # the claim's transaction took the offset: written as the end of a claimed call
        owned.finished.append(FinishedCall(claimed.dispatch.dispatch_id, refused.outputs))
        owned.entries[claimed.dispatch.dispatch_id] = refused.entry
        self._tally.refusal(claimed.dispatch, code, refused.blocked_by)

    def _start(self, claimed: ClaimedCall) -> None:
        """Start a claimed call's handler now (a slot is free)."""
        owned, dispatch, headers = claimed.owned, claimed.dispatch, claimed.headers
        registration, claim, requirements = (
            claimed.registration,
            claimed.claim,
            claimed.requirements,
        )
        running = RunningCall(
            dispatch,
            requirements,
            Call.from_dispatch(dispatch, dict(headers)),
            in_order=registration.in_order,
        )
        owned.calls[dispatch.dispatch_id] = running
        task = self.in_flight.start(self._execute(owned, running, headers, registration, claim))
        running.task = task
        owned.running.add(task)
        task.add_done_callback(owned.running.discard)
        task.add_done_callback(lambda _task: self.kick())
        if registration.in_order:
            task.add_done_callback(lambda _task: self.resume_ordered(owned))

    def resume_ordered(self, owned: OwnedPartition) -> None:
        """Resume a partition paused for an in-order call (``Claimer.decide``) once none of its
        in-order calls runs: the waiting call is fetched again and may start."""
        if not owned.ordered_wait or any(rc.in_order for rc in owned.calls.values()):
            return
        owned.ordered_wait = False
        if not owned.lost:
            self._resume(owned)

    async def tell_stopped(self, owned_partitions: list[OwnedPartition]) -> None:
        """The stop watch: the control partitions of the running calls read up to their end
        (one ListOffsets), and each call whose turn was stopped since it started (a
        ``turn.cancelled``, a quarantine, a tool disable, a tenant stop) is told so
        (``Call.stop``) and cancelled ``executor_stop_grace_seconds`` later if it still runs.
        A barrier that cannot be read now is read again at the next watch."""
        running = [
            rc
            for owned in owned_partitions
            if not owned.lost
            for rc in owned.calls.values()
            if rc.stopped_by is None
        ]
        if not running:
            return
        partitions = [
            self._barrier.partition_for_turn(rc.dispatch.tenant, rc.dispatch.turn_id)
            for rc in running
        ]
        try:
            states = await self._barrier.sync_many(
                list(dict.fromkeys(partitions)), self._watch_timeout
            )
        except (BarrierTimeout, KafkaError):
            return
        now = self._clock()
        loop = asyncio.get_running_loop()
        for rc, partition in zip(running, partitions, strict=True):
            refusal = states[partition].check(rc.dispatch, now, rc.requirements)
            if refusal is None or refusal.code not in _STOPS or rc.stopped_by is not None:
                continue
            rc.stopped_by = refusal
            rc.call.stop.set(refusal.code.value)
            log.info(
                "running call told to stop",
                extra=fields(
                    dispatch_id=rc.dispatch.dispatch_id,
                    tool=rc.dispatch.tool,
                    reason=refusal.code.value,
                    blocked_by=refusal.command_id,
                ),
            )
            if rc.task is not None:
                loop.call_later(self.settings.executor_stop_grace_seconds, _cancel, rc.task)

    async def _execute(
        self,
        owned: OwnedPartition,
        running: RunningCall,
        headers: list[tuple[str, bytes]],
        registration: Registration,
        claim: ExecutionEntry,
    ) -> None:
        """The call's handler and outcome in the ``process`` span of its dispatch record (a
        child of the record's ``traceparent``; the ``execute`` span is the handler's own).
        With nothing recording spans (no OpenTelemetry SDK installed), no span: it would only
        carry the record's context on, and the handler has it as ``Call.traceparent``."""
        dispatch = running.dispatch
        try:
            if not tracing.recording():
                await self._run(owned, running, headers, registration, claim, traced=False)
                return
            attributes = tracing.kafka_attributes(
                self.topics.dispatch,
                "process",
                key=dispatch.key.turn_key,
                partition=owned.partition,
                offset=claim.dispatch_offset,
                group=self.group,
            )
            with tracing.span(
                f"process {self.topics.dispatch}",
                "consumer",
                attributes,
                traceparent=traceparent_of(headers),
            ):
                await self._run(owned, running, headers, registration, claim, traced=True)
        finally:
            owned.calls.pop(running.dispatch.dispatch_id, None)

    async def _run(
        self,
        owned: OwnedPartition,
        running: RunningCall,
        headers: list[tuple[str, bytes]],
        registration: Registration,
        claim: ExecutionEntry,
        *,
        traced: bool,
    ) -> None:
        dispatch, call = running.dispatch, running.call
        started_at = self._clock()
        began = time.monotonic()
        outcome = ExecutionOutcome.SUCCEEDED
        reason: str | None = None
        retry = False
        detail = ""
        output: dict[str, Any] | None = None
        try:
            with contextlib.ExitStack() as span:
                if traced:
                    attributes = {
                        "toolcall.tool": dispatch.tool,
                        "toolcall.dispatch_id": call.dispatch_id,
                    }
                    span.enter_context(
                        tracing.span(f"execute {dispatch.tool}", "internal", attributes)
                    )
                async with asyncio.timeout(registration.timeout_seconds) as deadline:
                    returned = await registration.handler(call)
            output, detail = _as_output(returned)
        except ExecutionFailed as exc:
            outcome, reason = ExecutionOutcome.FAILED, exc.code
            retry, detail = exc.retry_possible, exc.detail
        except OutcomeUnknown as exc:
            outcome, reason, detail = ExecutionOutcome.UNKNOWN, exc.code, exc.detail
        except TimeoutError:
            if deadline.expired():
                outcome, reason = ExecutionOutcome.UNKNOWN, "handler_timeout"
            else:
                outcome, reason, detail = (
                    ExecutionOutcome.FAILED,
                    "handler_exception",
                    "TimeoutError",
                )
        except asyncio.CancelledError:  # its turn stopped and the grace over; or a release
            # that could not wait for it (or a stop): it may have acted either way
            outcome = ExecutionOutcome.UNKNOWN
            reason = "executor_stopped" if running.stopped_by is None else "cancelled_while_running"
        except PROCESS_EXCEPTIONS:
            raise
        except BaseException as exc:  # a handler bug (or a panic of an extension it uses): the
            # class name only, the message may hold arguments
            outcome, reason, detail = (
                ExecutionOutcome.FAILED,
                "handler_exception",
                type(exc).__name__,
            )
        self._tally.handler_duration(dispatch.tool, time.monotonic() - began)
        if traced:
            tracing.annotate({"toolcall.outcome": outcome.value, "toolcall.reason": reason or ""})
        now = self._clock()
        result = ExecutionResult.for_dispatch(
            dispatch,
            group=self.group,
            executor_id=self._outputs.executor_id,
            outcome=outcome,
            ts=now,
            reason=reason,
            retry_possible=retry,
            detail=detail,
            output=output,
            started_at=started_at,
            blocked_by=(
                running.stopped_by.command_id
                if running.stopped_by is not None and outcome is not ExecutionOutcome.SUCCEEDED
                else None
            ),
        )
        entry, outputs = self._outputs.ended(dispatch, claim, result, headers)
        owned.entries[dispatch.dispatch_id] = entry
        self._tally.outcome(dispatch.tool, outcome, reason)
        log.info(
            "call executed",
            extra=fields(
                dispatch_id=dispatch.dispatch_id,
                tool=dispatch.tool,
                outcome=outcome.value,
                reason=reason,
            ),
        )
        # written with the partition's next transaction (a few ms); a handler task never writes
        owned.finished.append(FinishedCall(dispatch.dispatch_id, outputs))


def _cancel(task: asyncio.Task[None]) -> None:
    if not task.done():
        task.cancel()


def _as_output(returned: object) -> tuple[dict[str, Any] | None, str]:
    """A handler's return value as a JSON object for the result, or why it was dropped."""
    if returned is None:
        return None, ""
    if isinstance(returned, BaseModel):
        returned = returned.model_dump(mode="json")
    if not isinstance(returned, Mapping):
        return None, "output_not_an_object"
    try:
        data = orjson.loads(orjson.dumps(dict(returned)))
    except (TypeError, orjson.JSONEncodeError):
        return None, "output_not_json"
    return (data, "") if isinstance(data, dict) else (None, "output_not_json")
