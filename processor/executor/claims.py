"""The executor's claimer: a round of records in hand, from decoding to claims, side by side.

Owns :class:`Claimer`: ``decide`` then ``claim`` (steps 1-5 of :mod:`processor.executor.client`
for the records of one partition the backlog hands a round, in offset order): decode, skip
another group's tools and what the ledger already holds, ONE fence for all the calls of the round
(:class:`~processor.executor.fencing.CallGate`: one barrier read per control partition), ONE
transaction per dispatch partition (:class:`~processor.executor.transactions.PartitionWriter`)
that claims every call that passed it, refuses the others and commits the offset past the
records decided (with the ends of calls that finished meanwhile), then the claimed calls wait
for slots and start (:class:`~processor.executor.running.Runner`, the fence read again right
before). It claims at most as many calls as may be claimed now (the free slots plus the
claim-ahead, less what rounds beside it hold,
:meth:`InFlight.claimable <processor.executor.inflight.InFlight.claimable>`; ``decide`` holds
its candidates' slots at once, synchronously);
the records after them go back to the backlog (``Fetched.leftover``). Also skipped records
(their offset goes with the next transaction), refusals
(:class:`~processor.executor.outputs.OutputRecords`), and ``unknown`` for claims a previous
owner left unfinished (``record_unknown``: one transaction for all of them).

Must not touch partition ownership or the consumer loop (:mod:`processor.executor.ownership`,
:mod:`processor.executor.client`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from processor.core.errors import RecordRejected
from processor.core.events import Dispatch
from processor.executor.executor_state import (
    ClaimedCall,
    Fenced,
    OwnedPartition,
    Progress,
    Stopping,
    Tally,
    TransactionFailed,
)
from processor.executor.fence import Refusal, Requirements
from processor.executor.fencing import CallGate
from processor.executor.handlers import Handlers, Registration
from processor.executor.inflight import InFlight
from processor.executor.outputs import OutputRecords, Refused
from processor.executor.records import ExecutionEntry, ExecutionOutcome, decode_dispatch
from processor.executor.running import Runner
from processor.executor.transactions import PartitionWriter
from processor.observability.logging import fields

__all__ = ["Claimer", "Decided", "Fetched"]

log = logging.getLogger("processor.executor.client")  # one logger for all the client's parts

_TRACE_HEADERS: Final = ("traceparent", "tracestate")

_FENCED: Final = "fenced"


@dataclass
class Fetched:
    """What became of a fetch: whether the executor is stopping, and the partitions whose
    producer was fenced (with the offset to fetch again from once taken back)."""

    stopping: bool = False
    fenced: list[tuple[OwnedPartition, int]] = field(default_factory=list)
    # records taken and not decided (no claim possible yet, or an in-order call waiting):
    # back to the backlog, at the front
    leftover: dict[TopicPartition, list[ConsumerRecord]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Candidate:
    """A dispatch record that may run: decoded, handled here, not in the ledger."""

    offset: int
    dispatch: Dispatch
    headers: list[tuple[str, bytes]]
    registration: Registration
    requirements: Requirements


@dataclass
class _Plan:
    """One dispatch partition's share of a fetch: what its transaction writes."""

    tp: TopicPartition
    owned: OwnedPartition
    first: int  # the first record's offset: fetched again from here if nothing is committed
    next_offset: int | None = None  # past the last record decided
    candidates: list[_Candidate] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    claims: list[tuple[_Candidate, ExecutionEntry]] = field(default_factory=list)
    leftover: list[ConsumerRecord] = field(default_factory=list)  # not decided: put back


@dataclass
class Decided:
    """A claim round's records, decided up to the fence, and the slots its candidates hold."""

    plans: list[_Plan]
    in_flight: InFlight
    held: int

    def release(self) -> None:
        """Give the held slots back (the claimed calls now wait in the queue, or the round
        ended)."""
        self.in_flight.reserved -= self.held
        self.held = 0


class Claimer:
    """Takes a fetch's dispatch records through skip, fence, claim, run or refusal."""

    def __init__(
        self,
        *,
        handlers: Handlers,
        gate: CallGate,
        writer: PartitionWriter,
        runner: Runner,
        outputs: OutputRecords,
        tally: Tally,
        progress: Progress,
        stopping: asyncio.Event,
        rewind: Callable[[TopicPartition, int], None],
    ) -> None:
        self.handlers = handlers
        self._rewind = rewind  # seek the consumer back, forgetting the partition's backlog
        self._gate = gate
        self._writer = writer
        self._runner = runner
        self._outputs = outputs
        self._tally = tally
        self._progress = progress
        self._stopping = stopping
        self._in_flight: InFlight = runner.in_flight

    def decide(
        self,
        consumer: AIOKafkaConsumer,
        owned_partitions: dict[int, OwnedPartition],
        batches: dict[TopicPartition, list[ConsumerRecord]],
    ) -> Decided:
        """The steps before the fence for the records in hand (each partition's in offset
        order), now, synchronously: which records are skipped, refused outright, or
        candidates to claim, as many as may be claimed; the slots the candidates take are
        held from now on (a round beside this one sees them taken), until the claimed calls
        wait in the runner's queue or the round ends (:meth:`claim`)."""
        claimable = free = self._in_flight.claimable()
        plans: list[_Plan] = []
        for tp, records in batches.items():
            owned = owned_partitions.get(tp.partition)
            if owned is None:  # revoked after the fetch, or its take is being retried
                self._rewind(tp, records[0].offset)  # fetch them again once it is ours
                continue
            if owned.lost:
                continue
            plan = _Plan(tp=tp, owned=owned, first=records[0].offset)
            free = self._decide(consumer, plan, records, free)
            plans.append(plan)
        decided = Decided(plans, self._in_flight, claimable - free)
        self._in_flight.reserved += decided.held
        return decided

    async def claim(self, decided: Decided) -> Fetched:
        """Fence, claim and start what :meth:`decide` chose; the records after the last call
        that may be claimed now come back in ``Fetched.leftover``. When the executor is
        stopping, the undecided records are left for the next owner."""
        try:
            return await self._claim_decided(decided.plans, decided.release)
        finally:
            decided.release()

    async def _claim_decided(self, plans: list[_Plan], release: Callable[[], None]) -> Fetched:
        """The fence, the claim transactions and the start of what :meth:`decide` chose;
        ``release`` gives back the slots it held once the claimed calls wait in the queue."""
        if self._stopping.is_set():
            self._fetch_again(plans)
            return Fetched(stopping=True)
        candidates = [c for plan in plans for c in plan.candidates]
        if candidates:
            where = ", ".join(str(plan.tp.partition) for plan in plans if plan.candidates)
            self._progress(f"dispatch partition {where}: fencing {len(candidates)} calls")
            try:
                refusals = await self._gate.check(
                    [(c.dispatch, c.requirements) for c in candidates]
                )
            except Stopping:
                self._fetch_again(plans)
                return Fetched(stopping=True)
            verdicts = iter(refusals)
            for plan in plans:
                for candidate in plan.candidates:
                    self._claim_or_refuse(plan, candidate, next(verdicts))
        self._progress(f"claiming {sum(len(p.claims) for p in plans)} calls")
        committed = await asyncio.gather(*(self._commit_plan(plan) for plan in plans))
        claimed = [
            (plan.owned, candidate, claim)
            for plan, ok in zip(plans, committed, strict=True)
            if ok is True
            for candidate, claim in plan.claims
        ]
        # The claims and the offsets are committed: these calls never run again in this group.
        if claimed:
            await self._start_claimed(claimed, release)
        for plan in plans:  # an in-order call waited for one that was refused, or not claimed
            self._runner.resume_ordered(plan.owned)
        fenced = [
            (plan.owned, plan.first)
            for plan, ok in zip(plans, committed, strict=True)
            if ok is _FENCED
        ]
        leftover = {
            plan.tp: plan.leftover
            for plan, ok in zip(plans, committed, strict=True)
            if ok is True and plan.leftover
        }
        return Fetched(stopping=self._stopping.is_set(), fenced=fenced, leftover=leftover)

    def _decide(
        self, consumer: AIOKafkaConsumer, plan: _Plan, records: list[ConsumerRecord], free: int
    ) -> int:
        """Steps before the fence, for one partition's records in offset order; returns the
        slots left. A record that would need a slot when none is left is fetched again."""
        owned = plan.owned
        seen: set[str] = set()
        # turns with an in-order call running or claimed ahead in this fetch
        ordered = {
            (rc.dispatch.tenant, rc.dispatch.turn_id) for rc in owned.calls.values() if rc.in_order
        } | self._runner.waiting_in_order(owned)
        for index, record in enumerate(records):
            self._progress(f"dispatch partition {owned.partition} offset {record.offset}")
            next_offset = record.offset + 1
            try:
                dispatch = decode_dispatch(record.value)
            except RecordRejected:
                log.warning(
                    "not a dispatch record; skipped",
                    extra=fields(partition=owned.partition, offset=record.offset),
                )
                self._skip(plan, next_offset, "undecodable")
                continue
            if not self.handlers.handles(dispatch.tool, dispatch.namespace):
                self._skip(plan, next_offset, "other_tool")
                continue
            if dispatch.dispatch_id in owned.entries or dispatch.dispatch_id in seen:
                log.info(
                    "dispatch already in the ledger; not run again",
                    extra=fields(dispatch_id=dispatch.dispatch_id, tool=dispatch.tool),
                )
                self._skip(plan, next_offset, "duplicate")
                continue
            headers = _trace_headers(record)
            registration = self.handlers.lookup(
                dispatch.tool, dispatch.tool_version, dispatch.namespace
            )
            if registration is None:
                seen.add(dispatch.dispatch_id)
                plan.refused.append(
                    self._outputs.refusal(
                        dispatch,
                        headers,
                        "unsupported_tool_version",
                        where=(owned.partition, record.offset),
                    )
                )
                plan.next_offset = next_offset
                continue
            turn = (dispatch.tenant, dispatch.turn_id)
            if registration.in_order and turn in ordered:
                # the call before it in its turn has not ended: it and the rest of the
                # partition wait in the backlog (paused, resumed by Runner.resume_ordered)
                with contextlib.suppress(Exception):
                    consumer.pause(plan.tp)
                owned.ordered_wait = True
                plan.leftover = records[index:]
                break
            if free <= 0:  # claim only what can start soon: the rest waits in the backlog
                plan.leftover = records[index:]
                break
            free -= 1
            if registration.in_order:
                ordered.add(turn)
            seen.add(dispatch.dispatch_id)
            plan.candidates.append(
                _Candidate(
                    record.offset,
                    dispatch,
                    headers,
                    registration,
                    self._gate.requirements(registration, dispatch),
                )
            )
            plan.next_offset = next_offset
        return free

    def _claim_or_refuse(self, plan: _Plan, candidate: _Candidate, refusal: Refusal | None) -> None:
        dispatch = candidate.dispatch
        where = (plan.owned.partition, candidate.offset)
        if refusal is not None:
            plan.refused.append(
                self._outputs.refusal(
                    dispatch, candidate.headers, refusal.code.value, where=where, refusal=refusal
                )
            )
            return
        plan.claims.append((candidate, self._outputs.claim(dispatch, where)))

    async def _commit_plan(self, plan: _Plan) -> bool | str:
        """ONE transaction of the partition: its claims and refusals, the offset past its
        records, and the ends of its calls that finished meanwhile. True once committed; False
        when it failed (its records are fetched again); ``_FENCED`` when the partition's
        producer was fenced (the client loses the partition)."""
        owned = plan.owned
        if not plan.claims and not plan.refused:  # every record skipped
            if plan.next_offset is not None:
                owned.pending_offset = plan.next_offset  # with the next transaction
            return True
        outputs = [out for refused in plan.refused for out in refused.outputs]
        outputs += [self._outputs.entry(claim) for _candidate, claim in plan.claims]
        try:
            if owned.unended:  # a claimed call's end first: records stay in order
                await self._writer.write_unended(owned)
            await self._writer.commit(owned, outputs, plan.next_offset)
        except TransactionFailed:
            self._rewind(plan.tp, plan.first)  # decide them again on the next fetch
            return False
        except Fenced:
            return _FENCED
        for refused in plan.refused:
            self._tally.refusal(refused.dispatch, refused.code, refused.blocked_by)
            owned.entries[refused.dispatch.dispatch_id] = refused.entry
        for candidate, claim in plan.claims:
            owned.entries[candidate.dispatch.dispatch_id] = claim
        return True

    async def _start_claimed(
        self,
        claimed: list[tuple[OwnedPartition, _Candidate, ExecutionEntry]],
        release: Callable[[], None],
    ) -> None:
        """The claimed calls wait for slots, in claim order; as many start now as there are
        free slots (:meth:`Runner.start_waiting`: the fence again right before, shared by the
        calls that start together)."""
        self._runner.enqueue(
            [
                ClaimedCall(
                    owned,
                    candidate.offset,
                    candidate.dispatch,
                    candidate.headers,
                    candidate.registration,
                    candidate.requirements,
                    claim,
                )
                for owned, candidate, claim in claimed
            ]
        )
        release()  # counted as waiting now
        await self._runner.start_waiting()

    def _skip(self, plan: _Plan, next_offset: int, why: str) -> None:
        """Pass over a record that is not run; its offset goes with the partition's next
        transaction."""
        self._tally.skip(why)
        plan.next_offset = next_offset

    def _fetch_again(self, plans: list[_Plan]) -> None:
        """Nothing of these plans is committed: their records are fetched again."""
        for plan in plans:
            self._rewind(plan.tp, plan.first)

    async def record_unknown(
        self, owned: OwnedPartition, entries: list[ExecutionEntry], reason: str
    ) -> None:
        """Report claimed calls ``unknown`` (never run again), all in one transaction."""
        if not entries:
            return
        finals, outputs = self._outputs.unknowns(entries, reason)
        await self._writer.transact(owned, outputs, None)
        for final in finals:
            owned.entries[final.dispatch_id] = final
            self._tally.outcome(final.tool, ExecutionOutcome.UNKNOWN, reason)
            log.warning(
                "claimed call never finished: outcome unknown, not run again",
                extra=fields(dispatch_id=final.dispatch_id, tool=final.tool),
            )


def _trace_headers(record: ConsumerRecord) -> list[tuple[str, bytes]]:
    found: dict[str, bytes] = {}
    for name, value in record.headers or ():
        if name in _TRACE_HEADERS and isinstance(value, bytes) and len(value) <= 512:
            found[name] = value
    return list(found.items())
