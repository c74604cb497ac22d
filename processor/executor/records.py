"""The executor's records: results for the application, and its at-most-once ledger entries.

``results`` (topic ``<prefix>results``, keyed by turn key): one :class:`ExecutionResult` per
dispatch an executor group handled, telling whether the handler ran and how it ended
(``succeeded``, ``failed``), whether the fence refused it (``refused``, with the refusal code),
or whether nobody can tell (``unknown``: the executor stopped between claiming the call and
recording its end, so the external side effect may or may not have happened, and the call is
not run again).

``executions`` (topic ``<prefix>executions``, compacted, partition = the dispatch partition,
keyed by ``[group, dispatch_id]``): :class:`ExecutionEntry`, the durable ledger behind
"at most one execution per ``dispatch_id`` per executor group" (see
:mod:`processor.executor.ledger`).

Neither carries argument values. ``ExecutionResult.output`` is what the handler returned (for
example a booking reference): handlers must not echo the call's arguments into it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from processor.core.events import CallKey, Dispatch, stable_id

__all__ = [
    "MAX_OUTPUT_BYTES",
    "EntryState",
    "ExecutionEntry",
    "ExecutionOutcome",
    "ExecutionResult",
    "entry_key",
]

Id = Annotated[str, Field(min_length=1, max_length=256)]
Name = Annotated[str, Field(min_length=1, max_length=128)]
Short = Annotated[str, Field(max_length=512)]

MAX_OUTPUT_BYTES: Final = 64 * 1024
"""A handler's encoded output larger than this is dropped from the result (``output_too_large``)."""


class ExecutionOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REFUSED = "refused"
    UNKNOWN = "unknown"


class EntryState(StrEnum):
    """A ledger entry's state. ``claimed`` is written, with the dispatch offsets, before the
    handler runs; every other state is terminal."""

    CLAIMED = "claimed"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REFUSED = "refused"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self is not EntryState.CLAIMED


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    tenant: Id
    turn_id: Id
    response_id: Id
    item_id: Id
    call_id: Id

    @property
    def key(self) -> CallKey:
        return CallKey(
            tenant=self.tenant,
            turn_id=self.turn_id,
            response_id=self.response_id,
            item_id=self.item_id,
            call_id=self.call_id,
        )


class ExecutionResult(_Record):
    """What became of one dispatched call in one executor group. Never argument values."""

    type: Literal["execution.result"] = "execution.result"
    result_id: Id
    dispatch_id: Id
    tool: Name
    tool_version: str
    executor_group: Id
    executor_id: Id
    outcome: ExecutionOutcome
    reason: Short | None = None
    """The refusal code (fence), the handler's failure code, or why the outcome is unknown."""
    blocked_by: Id | None = None
    """The control command id that caused a refusal, where one did."""
    retry_possible: bool = False
    detail: Short = ""
    output: dict[str, Any] | None = None
    started_at: float | None = None
    ts: float

    @classmethod
    def for_dispatch(
        cls,
        dispatch: Dispatch,
        *,
        group: str,
        executor_id: str,
        outcome: ExecutionOutcome,
        ts: float,
        reason: str | None = None,
        blocked_by: str | None = None,
        retry_possible: bool = False,
        detail: str = "",
        output: dict[str, Any] | None = None,
        started_at: float | None = None,
    ) -> ExecutionResult:
        return cls.from_entry(
            ExecutionEntry.for_dispatch(dispatch, group, executor_id, EntryState.CLAIMED, ts),
            outcome=outcome,
            executor_id=executor_id,
            ts=ts,
            reason=reason,
            blocked_by=blocked_by,
            retry_possible=retry_possible,
            detail=detail,
            output=output,
            started_at=started_at,
        )

    @classmethod
    def from_entry(
        cls,
        entry: ExecutionEntry,
        *,
        outcome: ExecutionOutcome,
        executor_id: str,
        ts: float,
        reason: str | None = None,
        blocked_by: str | None = None,
        retry_possible: bool = False,
        detail: str = "",
        output: dict[str, Any] | None = None,
        started_at: float | None = None,
    ) -> ExecutionResult:
        if output is not None and len(orjson.dumps(output)) > MAX_OUTPUT_BYTES:
            output, detail = None, detail or "output_too_large"
        return cls(
            tenant=entry.tenant,
            turn_id=entry.turn_id,
            response_id=entry.response_id,
            item_id=entry.item_id,
            call_id=entry.call_id,
            result_id=stable_id("result", entry.group, entry.dispatch_id),
            dispatch_id=entry.dispatch_id,
            tool=entry.tool,
            tool_version=entry.tool_version,
            executor_group=entry.group,
            executor_id=executor_id,
            outcome=outcome,
            reason=reason,
            blocked_by=blocked_by,
            retry_possible=retry_possible,
            detail=detail[:512],
            output=output,
            started_at=started_at,
            ts=ts,
        )


class ExecutionEntry(_Record):
    """One ledger entry of the ``executions`` topic (the last one per key wins)."""

    type: Literal["execution.entry"] = "execution.entry"
    group: Id
    dispatch_id: Id
    state: EntryState
    tool: Name
    tool_version: str
    executor_id: Id
    dispatch_partition: int
    dispatch_offset: int
    ts: float

    @classmethod
    def for_dispatch(
        cls,
        dispatch: Dispatch,
        group: str,
        executor_id: str,
        state: EntryState,
        ts: float,
        *,
        partition: int = -1,
        offset: int = -1,
    ) -> ExecutionEntry:
        return cls(
            tenant=dispatch.tenant,
            turn_id=dispatch.turn_id,
            response_id=dispatch.response_id,
            item_id=dispatch.item_id,
            call_id=dispatch.call_id,
            group=group,
            dispatch_id=dispatch.dispatch_id,
            state=state,
            tool=dispatch.tool,
            tool_version=dispatch.tool_version,
            executor_id=executor_id,
            dispatch_partition=partition,
            dispatch_offset=offset,
            ts=ts,
        )

    def moved_to(self, state: EntryState, executor_id: str, ts: float) -> ExecutionEntry:
        return self.model_copy(update={"state": state, "executor_id": executor_id, "ts": ts})


def entry_key(group: str, dispatch_id: str) -> bytes:
    """The Kafka key of a ledger entry: injective in (group, dispatch id)."""
    return orjson.dumps([group, dispatch_id])
