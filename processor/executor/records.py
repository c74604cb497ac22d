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

:func:`decode_dispatch` and :func:`decode_entry` read the ``dispatch`` and ``executions`` records
strictly (the wire contract's types, finite times) and totally: any bytes give a model or
:class:`~processor.core.errors.RecordRejected`, never another exception.

Neither carries argument values. ``ExecutionResult.output`` is what the handler returned (for
example a booking reference): handlers must not echo the call's arguments into it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final, Literal, TypedDict, TypeVar, Unpack

import orjson
from pydantic import BaseModel, ValidationError

from processor.core.errors import RecordRejected
from processor.core.events import (
    CallRecord,
    Dispatch,
    Id,
    Name,
    Reason,
    Time,
    describe_validation_error,
    stable_id,
)

__all__ = [
    "MAX_OUTPUT_BYTES",
    "EntryState",
    "ExecutionEntry",
    "ExecutionOutcome",
    "ExecutionResult",
    "decode_dispatch",
    "decode_entry",
    "entry_key",
]

M = TypeVar("M", bound=BaseModel)

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


class ResultDetails(TypedDict, total=False):
    """The optional fields of an :class:`ExecutionResult` (keyword arguments of its builders)."""

    reason: str | None
    blocked_by: str | None
    retry_possible: bool
    detail: str
    output: dict[str, Any] | None
    started_at: float | None


class ExecutionResult(CallRecord):
    """What became of one dispatched call in one executor group. Never argument values."""

    type: Literal["execution.result"] = "execution.result"
    result_id: Id
    dispatch_id: Id
    tool: Name
    namespace: Name | None = None  # the tool's namespace (absent: a bare tool)
    tool_version: str
    executor_group: Id
    executor_id: Id
    outcome: ExecutionOutcome
    reason: Reason | None = None
    """The refusal code (fence), the handler's failure code, or why the outcome is unknown."""
    blocked_by: Id | None = None
    """The control command id that caused a refusal, where one did."""
    retry_possible: bool = False
    detail: Reason = ""
    output: dict[str, Any] | None = None
    started_at: Time | None = None
    ts: Time

    @classmethod
    def for_dispatch(
        cls,
        dispatch: Dispatch,
        *,
        group: str,
        executor_id: str,
        outcome: ExecutionOutcome,
        ts: float,
        **details: Unpack[ResultDetails],
    ) -> ExecutionResult:
        return cls._of(
            dispatch, group=group, executor_id=executor_id, outcome=outcome, ts=ts, details=details
        )

    @classmethod
    def from_entry(
        cls,
        entry: ExecutionEntry,
        *,
        outcome: ExecutionOutcome,
        executor_id: str,
        ts: float,
        **details: Unpack[ResultDetails],
    ) -> ExecutionResult:
        return cls._of(
            entry,
            group=entry.group,
            executor_id=executor_id,
            outcome=outcome,
            ts=ts,
            details=details,
        )

    @classmethod
    def _of(
        cls,
        call: Dispatch | ExecutionEntry,
        *,
        group: str,
        executor_id: str,
        outcome: ExecutionOutcome,
        ts: float,
        details: ResultDetails,
    ) -> ExecutionResult:
        """The result of the call a dispatch or a ledger entry identifies (its fields read
        directly: no intermediate key or entry on the per-call path)."""
        output = details.get("output")
        detail = details.get("detail", "")
        if output is not None and len(orjson.dumps(output)) > MAX_OUTPUT_BYTES:
            output, detail = None, detail or "output_too_large"
        return cls(
            tenant=call.tenant,
            turn_id=call.turn_id,
            response_id=call.response_id,
            item_id=call.item_id,
            call_id=call.call_id,
            result_id=stable_id("result", group, call.dispatch_id),
            dispatch_id=call.dispatch_id,
            tool=call.tool,
            namespace=call.namespace,
            tool_version=call.tool_version,
            executor_group=group,
            executor_id=executor_id,
            outcome=outcome,
            reason=details.get("reason"),
            blocked_by=details.get("blocked_by"),
            retry_possible=details.get("retry_possible", False),
            detail=detail[:512],
            output=output,
            started_at=details.get("started_at"),
            ts=ts,
        )


class ExecutionEntry(CallRecord):
    """One ledger entry of the ``executions`` topic (the last one per key wins)."""

    type: Literal["execution.entry"] = "execution.entry"
    group: Id
    dispatch_id: Id
    state: EntryState
    tool: Name
    namespace: Name | None = None  # the tool's namespace (absent: a bare tool)
    tool_version: str
    executor_id: Id
    dispatch_partition: int
    dispatch_offset: int
    ts: Time

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
            namespace=dispatch.namespace,
            tool_version=dispatch.tool_version,
            executor_id=executor_id,
            dispatch_partition=partition,
            dispatch_offset=offset,
            ts=ts,
        )

    def moved_to(self, state: EntryState, executor_id: str, ts: float) -> ExecutionEntry:
        return self.model_copy(update={"state": state, "executor_id": executor_id, "ts": ts})


def decode_dispatch(payload: bytes | None) -> Dispatch:
    """One ``dispatch`` record, or RecordRejected (never another exception)."""
    return _decode(Dispatch, payload)


def decode_entry(payload: bytes | None) -> ExecutionEntry:
    """One ``executions`` ledger entry, or RecordRejected (never another exception)."""
    return _decode(ExecutionEntry, payload)


def _decode(model: type[M], payload: bytes | None) -> M:
    if payload is None:
        raise RecordRejected("undecodable", "no value (a tombstone)")
    try:
        return model.model_validate_json(payload)
    except ValidationError as exc:
        raise RecordRejected("invalid_record", describe_validation_error(exc)) from None
    except ValueError as exc:  # pydantic-core raises ValidationError; belt and braces
        raise RecordRejected("undecodable", type(exc).__name__) from None


def entry_key(group: str, dispatch_id: str) -> bytes:
    """The Kafka key of a ledger entry: injective in (group, dispatch id)."""
    return orjson.dumps([group, dispatch_id])
