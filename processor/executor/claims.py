"""The claims ledger: a fetch's dispatch records from decoding to claims, side by side.

Owns ``_claim_fetch`` (steps 1-5 of :mod:`processor.executor.client` for every record of one
fetch): decode, skip another group's tools and what the ledger already holds, ONE fence for all
the calls of the fetch (one barrier read per control partition), ONE transaction per dispatch
partition that claims every call that passed it, refuses the others and commits the offset past
the records (with the ends of calls that finished meanwhile), the fence again right before the
handlers start (shared by the calls that start together), then the handlers
(:meth:`Running._start`). It claims only what can start now: at most as many calls as there are
free in-flight slots; the records after them are fetched again. Also skipped records (their
offset goes with the next transaction), refusals (ledger entry, result, user status), and
``unknown`` for claims a previous owner left unfinished (one transaction for all of them).

Must not touch partition ownership or the consumer loop (``client``).

:class:`~processor.executor.client.ExecutorClient` is one class built in layers; why, and
their order, is in :mod:`processor.executor.executor_state`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from processor.core.errors import RecordRejected
from processor.core.events import Dispatch, UserState
from processor.executor.executor_state import (
    _Fenced,
    _Finished,
    _Out,
    _Owned,
    _Stopping,
    _TransactionFailed,
)
from processor.executor.fence import Refusal, RefusalCode, Requirements
from processor.executor.handlers import Registration
from processor.executor.records import (
    EntryState,
    ExecutionEntry,
    ExecutionOutcome,
    ExecutionResult,
    decode_dispatch,
)
from processor.executor.running import _UNKNOWN_VIEW, Running
from processor.observability import metrics
from processor.observability.logging import fields

__all__ = ["Claims"]

log = logging.getLogger("processor.executor.client")  # one logger for all the client's parts

_TRACE_HEADERS: Final = ("traceparent", "tracestate")

# What the user is told when the executor does not run a call: (state, retry possible, message)
_REFUSAL_VIEW: Final[dict[str, tuple[UserState, bool, str]]] = {
    RefusalCode.TENANT_STOPPED: (
        UserState.CANCELLED,
        False,
        "Actions are paused for your organisation; a person will follow up.",
    ),
    RefusalCode.TURN_CANCELLED: (
        UserState.CANCELLED,
        False,
        "This turn was cancelled before the action ran.",
    ),
    RefusalCode.QUARANTINED: (UserState.CANCELLED, False, "Held back by an operator for review."),
    RefusalCode.TOOL_DISABLED: (UserState.CANCELLED, False, "This tool is currently disabled."),
    RefusalCode.CONFIRMATION_DENIED: (UserState.FAILED, False, "You declined this action."),
    RefusalCode.CONFIRMATION_EXPIRED: (
        UserState.FAILED,
        True,
        "The confirmation is no longer valid; ask again and confirm.",
    ),
    RefusalCode.STALE_DISPATCH: (
        UserState.FAILED,
        True,
        "The request waited too long and was not run; asking again may work.",
    ),
    "executor_stopped": (UserState.FAILED, True, "The action was not run; asking again may work."),
}
_DEFAULT_REFUSAL_VIEW: Final = (UserState.FAILED, False, "The action was not run.")


_FENCED: Final = "fenced"


@dataclass
class _Fetched:
    """What became of a fetch: whether the executor is stopping, and the partitions whose
    producer was fenced (with the offset to fetch again from once taken back)."""

    stopping: bool = False
    fenced: list[tuple[_Owned, int]] = field(default_factory=list)


@dataclass(frozen=True)
class _Candidate:
    """A dispatch record that may run: decoded, handled here, not in the ledger."""

    offset: int
    dispatch: Dispatch
    headers: list[tuple[str, bytes]]
    registration: Registration
    requirements: Requirements


@dataclass
class _Refused:
    """A refusal to write: its records, and its ledger entry once they are committed."""

    dispatch: Dispatch
    code: str
    entry: ExecutionEntry
    outputs: list[_Out]
    blocked_by: str | None


@dataclass
class _Plan:
    """One dispatch partition's share of a fetch: what its transaction writes."""

    tp: TopicPartition
    owned: _Owned
    first: int  # the first record's offset: fetched again from here if nothing is committed
    next_offset: int | None = None  # past the last record decided
    candidates: list[_Candidate] = field(default_factory=list)
    refused: list[_Refused] = field(default_factory=list)
    claims: list[tuple[_Candidate, ExecutionEntry]] = field(default_factory=list)


class Claims(Running):
    """Takes a fetch's dispatch records through skip, fence, claim, run or refusal."""

    async def _claim_fetch(
        self, consumer: AIOKafkaConsumer, batches: dict[TopicPartition, list[ConsumerRecord]]
    ) -> _Fetched:
        """Decide every record of one fetch and start the calls that may run. When the
        executor is stopping, the undecided records are left for the next owner."""
        free = self._in_flight.free()
        plans: list[_Plan] = []
        for tp, records in batches.items():
            owned = self._owned.get(tp.partition)
            if owned is None:  # revoked after the fetch, or its take is being retried
                with contextlib.suppress(Exception):
                    consumer.seek(tp, records[0].offset)  # fetch them again once it is ours
                continue
            if owned.lost:
                continue
            plan = _Plan(tp=tp, owned=owned, first=records[0].offset)
            free = self._decide(consumer, plan, records, free)
            plans.append(plan)
        if self._stopping.is_set():
            _fetch_again(consumer, plans)
            return _Fetched(stopping=True)
        candidates = [c for plan in plans for c in plan.candidates]
        if candidates:
            where = ", ".join(str(plan.tp.partition) for plan in plans if plan.candidates)
            self._progress(f"dispatch partition {where}: fencing {len(candidates)} calls")
            try:
                refusals = await self._fences([(c.dispatch, c.requirements) for c in candidates])
            except _Stopping:
                _fetch_again(consumer, plans)
                return _Fetched(stopping=True)
            verdicts = iter(refusals)
            for plan in plans:
                for candidate in plan.candidates:
                    self._claim_or_refuse(plan, candidate, next(verdicts))
        self._progress(f"claiming {sum(len(p.claims) for p in plans)} calls")
        committed = await asyncio.gather(*(self._commit_plan(consumer, plan) for plan in plans))
        claimed = [
            (plan.owned, candidate, claim)
            for plan, ok in zip(plans, committed, strict=True)
            if ok is True
            for candidate, claim in plan.claims
        ]
        # The claims and the offsets are committed: these calls never run again in this group.
        if claimed:
            await self._start_claimed(claimed)
        for plan in plans:  # an in-order call waited for one that was refused, or not claimed
            self._resume_ordered(plan.owned)
        fenced = [
            (plan.owned, plan.first)
            for plan, ok in zip(plans, committed, strict=True)
            if ok is _FENCED
        ]
        return _Fetched(stopping=self._stopping.is_set(), fenced=fenced)

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
        }
        for record in records:
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
                    self._refusal(
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
                # partition wait (paused, resumed by _resume_ordered), fetched again then
                with contextlib.suppress(Exception):
                    consumer.seek(plan.tp, record.offset)
                    consumer.pause(plan.tp)
                owned.ordered_wait = True
                break
            if free <= 0:  # claim only what can start now: the rest is fetched again
                with contextlib.suppress(Exception):
                    consumer.seek(plan.tp, record.offset)
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
                    self._requirements(registration, dispatch),
                )
            )
            plan.next_offset = next_offset
        return free

    def _claim_or_refuse(self, plan: _Plan, candidate: _Candidate, refusal: Refusal | None) -> None:
        dispatch = candidate.dispatch
        where = (plan.owned.partition, candidate.offset)
        if refusal is not None:
            plan.refused.append(
                self._refusal(
                    dispatch, candidate.headers, refusal.code.value, where=where, refusal=refusal
                )
            )
            return
        claim = ExecutionEntry.for_dispatch(
            dispatch,
            self.group,
            self.executor_id,
            EntryState.CLAIMED,
            self._clock(),
            partition=where[0],
            offset=where[1],
        )
        plan.claims.append((candidate, claim))

    async def _commit_plan(self, consumer: AIOKafkaConsumer, plan: _Plan) -> bool | str:
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
        outputs += [self._entry_out(claim) for _candidate, claim in plan.claims]
        try:
            if owned.unended:  # a claimed call's end first: records stay in order
                await self._write_unended(owned)
            await self._commit(owned, outputs, plan.next_offset)
        except _TransactionFailed:
            with contextlib.suppress(Exception):
                consumer.seek(plan.tp, plan.first)  # decide them again on the next fetch
            return False
        except _Fenced:
            return _FENCED
        for refused in plan.refused:
            self._refused(refused)
            owned.entries[refused.dispatch.dispatch_id] = refused.entry
        for candidate, claim in plan.claims:
            owned.entries[candidate.dispatch.dispatch_id] = claim
        return True

    async def _start_claimed(
        self, claimed: list[tuple[_Owned, _Candidate, ExecutionEntry]]
    ) -> None:
        """The fence again, right before the handlers start (a cancellation that raced the
        claims is still seen), shared by the calls that start together; then start them."""
        try:
            refusals = await self._fences(
                [(candidate.dispatch, candidate.requirements) for _, candidate, _ in claimed]
            )
        except _Stopping:
            refusals = [None] * len(claimed)
            stopped = True
        else:
            stopped = False
        for (owned, candidate, claim), refusal in zip(claimed, refusals, strict=True):
            if stopped or refusal is not None:
                code = refusal.code.value if refusal is not None else "executor_stopped"
                refused = self._refusal(
                    candidate.dispatch,
                    candidate.headers,
                    code,
                    where=(owned.partition, candidate.offset),
                    refusal=refusal,
                    claim=claim,
                )
                # the claim's transaction took the offset: written as the end of a claimed call
                owned.finished.append(_Finished(candidate.dispatch.dispatch_id, refused.outputs))
                owned.entries[candidate.dispatch.dispatch_id] = refused.entry
                self._refused(refused)
                continue
            self._start(
                owned,
                candidate.dispatch,
                candidate.headers,
                candidate.registration,
                claim,
                requirements=candidate.requirements,
            )
        if claimed:
            self._in_flight.finished.set()  # refusals after claims are written promptly too

    def _skip(self, plan: _Plan, next_offset: int, why: str) -> None:
        """Pass over a record that is not run; its offset goes with the partition's next
        transaction."""
        self.stats.skip(why)
        metrics.EXECUTOR_SKIPPED.labels(why).inc()
        plan.next_offset = next_offset

    def _refusal(
        self,
        dispatch: Dispatch,
        headers: list[tuple[str, bytes]],
        code: str,
        *,
        where: tuple[int, int],
        refusal: Refusal | None = None,
        claim: ExecutionEntry | None = None,
    ) -> _Refused:
        """What records that a call is not run: ledger entry, result and user status
        (``where`` = dispatch partition and offset); after a ``claim``, as the claimed call's
        end."""
        now = self._clock()
        view = _REFUSAL_VIEW.get(code, _DEFAULT_REFUSAL_VIEW)
        retry = view[1]
        blocked_by = refusal.command_id if refusal else None
        result = ExecutionResult.for_dispatch(
            dispatch,
            group=self.group,
            executor_id=self.executor_id,
            outcome=ExecutionOutcome.REFUSED,
            ts=now,
            reason=code,
            blocked_by=blocked_by,
            retry_possible=retry,
            detail=refusal.detail if refusal else "",
        )
        if claim is not None:
            entry = claim.moved_to(EntryState.REFUSED, self.executor_id, now)
        else:
            entry = ExecutionEntry.for_dispatch(
                dispatch,
                self.group,
                self.executor_id,
                EntryState.REFUSED,
                now,
                partition=where[0],
                offset=where[1],
            )
        outputs = [
            self._entry_out(entry),
            self._result_out(result, headers),
            self._status_out(dispatch.key, dispatch.tool, view, code, headers),
        ]
        return _Refused(dispatch, code, entry, outputs, blocked_by)

    def _refused(self, refused: _Refused) -> None:
        """Count and log a refusal (once it is committed, or queued after a claim)."""
        dispatch = refused.dispatch
        self._count(dispatch.tool, ExecutionOutcome.REFUSED, refused.code)
        log.info(
            "call refused by the fence",
            extra=fields(
                dispatch_id=dispatch.dispatch_id,
                tool=dispatch.tool,
                reason=refused.code,
                blocked_by=refused.blocked_by,
            ),
        )

    async def _record_unknown(
        self, owned: _Owned, entries: list[ExecutionEntry], reason: str
    ) -> None:
        """Report claimed calls ``unknown`` (never run again), all in one transaction."""
        if not entries:
            return
        now = self._clock()
        outputs: list[_Out] = []
        finals = []
        for entry in entries:
            result = ExecutionResult.from_entry(
                entry,
                outcome=ExecutionOutcome.UNKNOWN,
                executor_id=self.executor_id,
                ts=now,
                reason=reason,
            )
            final = entry.moved_to(EntryState.UNKNOWN, self.executor_id, now)
            finals.append(final)
            outputs += [
                self._entry_out(final),
                self._result_out(result, []),
                self._status_out(entry.key, entry.tool, _UNKNOWN_VIEW, "unknown", []),
            ]
        await self._transact(owned, outputs, None)
        for final in finals:
            owned.entries[final.dispatch_id] = final
            self._count(final.tool, ExecutionOutcome.UNKNOWN, reason)
            log.warning(
                "claimed call never finished: outcome unknown, not run again",
                extra=fields(dispatch_id=final.dispatch_id, tool=final.tool),
            )


def _fetch_again(consumer: AIOKafkaConsumer, plans: list[_Plan]) -> None:
    """Nothing of these plans is committed: their records are fetched again."""
    for plan in plans:
        with contextlib.suppress(Exception):
            consumer.seek(plan.tp, plan.first)


def _trace_headers(record: ConsumerRecord) -> list[tuple[str, bytes]]:
    found: dict[str, bytes] = {}
    for name, value in record.headers or ():
        if name in _TRACE_HEADERS and isinstance(value, bytes) and len(value) <= 512:
            found[name] = value
    return list(found.items())
