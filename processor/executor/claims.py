"""The claims ledger: one dispatch record from decoding to its recorded end.

Owns ``_process`` (steps 1-5 of :mod:`processor.executor.client`: decode, skip another group's
tools and what the ledger already holds, fence, claim with the offset in one transaction, fence
again, run), skipped records (their offset goes with the next transaction), refusals (ledger
entry, result, user status and offset in one transaction) and ``unknown`` for claims a previous
owner left unfinished.

Must not touch partition ownership or the consumer loop (``client``).

:class:`~processor.executor.client.ExecutorClient` is one class built in layers; why, and
their order, is in :mod:`processor.executor.executor_state`."""

from __future__ import annotations

import logging
from typing import Final

from aiokafka.structs import ConsumerRecord

from processor.core.errors import RecordRejected
from processor.core.events import Dispatch, UserState
from processor.executor.executor_state import _Owned, _Stopping
from processor.executor.fence import Refusal, RefusalCode
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


class Claims(Running):
    """Takes one dispatch record through skip, fence, claim, run or refusal."""

    async def _process(self, owned: _Owned, record: ConsumerRecord) -> None:
        if self._stopping.is_set():
            raise _Stopping
        next_offset = record.offset + 1
        try:
            dispatch = decode_dispatch(record.value)
        except RecordRejected:
            log.warning(
                "not a dispatch record; skipped",
                extra=fields(partition=owned.partition, offset=record.offset),
            )
            self._skip(owned, next_offset, "undecodable")
            return
        if not self.handlers.handles(dispatch.tool, dispatch.namespace):
            self._skip(owned, next_offset, "other_tool")
            return
        if dispatch.dispatch_id in owned.entries:
            log.info(
                "dispatch already in the ledger; not run again",
                extra=fields(dispatch_id=dispatch.dispatch_id, tool=dispatch.tool),
            )
            self._skip(owned, next_offset, "duplicate")
            return
        headers = _trace_headers(record)
        where = (owned.partition, record.offset)
        registration = self.handlers.lookup(
            dispatch.tool, dispatch.tool_version, dispatch.namespace
        )
        if registration is None:
            await self._refuse(owned, dispatch, headers, "unsupported_tool_version", where=where)
            return
        requirements = self._requirements(registration, dispatch)
        refusal = await self._fence(dispatch, requirements)
        if refusal is not None:
            await self._refuse(
                owned, dispatch, headers, refusal.code.value, where=where, refusal=refusal
            )
            return
        claim = ExecutionEntry.for_dispatch(
            dispatch,
            self.group,
            self.executor_id,
            EntryState.CLAIMED,
            self._clock(),
            partition=owned.partition,
            offset=record.offset,
        )
        await self._transact(owned, [self._entry_out(claim)], next_offset)
        owned.entries[dispatch.dispatch_id] = claim
        # The claim and the offset are committed: this dispatch never runs again in this group.
        try:
            refusal = await self._fence(dispatch, requirements)
        except _Stopping:
            await self._refuse(
                owned, dispatch, headers, "executor_stopped", where=where, claim=claim
            )
            raise
        if refusal is not None:
            await self._refuse(
                owned,
                dispatch,
                headers,
                refusal.code.value,
                where=where,
                refusal=refusal,
                claim=claim,
            )
            return
        await self._execute(owned, dispatch, headers, registration, claim)

    def _skip(self, owned: _Owned, next_offset: int, why: str) -> None:
        """Pass over a record that is not run; its offset goes with the next transaction."""
        self.stats.skip(why)
        metrics.EXECUTOR_SKIPPED.labels(why).inc()
        owned.pending_offset = next_offset

    async def _refuse(
        self,
        owned: _Owned,
        dispatch: Dispatch,
        headers: list[tuple[str, bytes]],
        code: str,
        *,
        where: tuple[int, int],
        refusal: Refusal | None = None,
        claim: ExecutionEntry | None = None,
    ) -> None:
        """Record that a call is not run: ledger entry, result, user status and the offset past
        its record (``where`` = dispatch partition and offset), in one transaction; after a
        ``claim``, whose transaction took the offset, as the end of a claimed call
        (``_after_claim``)."""
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
        if claim is None:
            await self._transact(owned, outputs, where[1] + 1)
        else:  # the claim's transaction took the offset; if this one fails, it is kept
            await self._after_claim(owned, dispatch.dispatch_id, outputs)
        owned.entries[dispatch.dispatch_id] = entry
        self._count(dispatch.tool, ExecutionOutcome.REFUSED, code)
        log.info(
            "call refused by the fence",
            extra=fields(
                dispatch_id=dispatch.dispatch_id,
                tool=dispatch.tool,
                reason=code,
                blocked_by=blocked_by,
            ),
        )

    async def _record_unknown(self, owned: _Owned, entry: ExecutionEntry, reason: str) -> None:
        now = self._clock()
        result = ExecutionResult.from_entry(
            entry,
            outcome=ExecutionOutcome.UNKNOWN,
            executor_id=self.executor_id,
            ts=now,
            reason=reason,
        )
        final = entry.moved_to(EntryState.UNKNOWN, self.executor_id, now)
        outputs = [
            self._entry_out(final),
            self._result_out(result, []),
            self._status_out(entry.key, entry.tool, _UNKNOWN_VIEW, "unknown", []),
        ]
        await self._transact(owned, outputs, None)
        owned.entries[entry.dispatch_id] = final
        self._count(entry.tool, ExecutionOutcome.UNKNOWN, reason)
        log.warning(
            "claimed call never finished: outcome unknown, not run again",
            extra=fields(dispatch_id=entry.dispatch_id, tool=entry.tool),
        )


def _trace_headers(record: ConsumerRecord) -> list[tuple[str, bytes]]:
    found: dict[str, bytes] = {}
    for name, value in record.headers or ():
        if name in _TRACE_HEADERS and isinstance(value, bytes) and len(value) <= 512:
            found[name] = value
    return list(found.items())
