"""What the executor writes about a call: ledger entries, results and user statuses, as records.

Owns :class:`OutputRecords`: the records of a call's claim, of its end (``succeeded``,
``failed``, ``unknown``), of a refusal (with what the user is told, :data:`REFUSAL_VIEW`) and of
the ``unknown`` outcome of a claim a previous owner left unfinished. Each record is an
:data:`~processor.executor.executor_state.OutRecord` (topic, key, value, headers, partition) for
:class:`~processor.executor.transactions.PartitionWriter` to write in a transaction; this module
only builds them (pure, given the clock), and never puts an argument value in any of them.

Must not write, decide or run anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from processor.core.events import CallKey, Dispatch, Status, UserState, encode, stable_id
from processor.executor.executor_state import OutRecord
from processor.executor.fence import Refusal, RefusalCode
from processor.executor.records import (
    EntryState,
    ExecutionEntry,
    ExecutionOutcome,
    ExecutionResult,
    entry_key,
)
from processor.kafka.codec import Outbound
from processor.settings import TopicNames

__all__ = ["REFUSAL_VIEW", "UNKNOWN_VIEW", "OutputRecords", "Refused"]

UserView = tuple[UserState, bool, str]
"""What the user is told: state, whether asking again may work, and the message."""

UNKNOWN_VIEW: Final[UserView] = (
    UserState.FAILED,
    False,
    "We could not confirm whether the action completed; please check before trying again.",
)

# What the user is told when the executor does not run a call
REFUSAL_VIEW: Final[dict[str, UserView]] = {
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
_DEFAULT_REFUSAL_VIEW: Final[UserView] = (UserState.FAILED, False, "The action was not run.")


@dataclass
class Refused:
    """A refusal to write: its records, and its ledger entry once they are committed."""

    dispatch: Dispatch
    code: str
    entry: ExecutionEntry
    outputs: list[OutRecord]
    blocked_by: str | None


@dataclass(frozen=True)
class OutputRecords:
    """Builds the executor's records for one group (``group``) and member (``executor_id``)."""

    topics: TopicNames
    group: str
    executor_id: str
    clock: Callable[[], float]

    def entry(self, entry: ExecutionEntry) -> OutRecord:
        key = entry_key(entry.group, entry.dispatch_id)
        return Outbound(self.topics.executions, key, encode(entry), [], entry.dispatch_partition)

    def result(self, result: ExecutionResult, headers: list[tuple[str, bytes]]) -> OutRecord:
        return Outbound(self.topics.results, _turn_key(result.key), encode(result), headers)

    def status(
        self,
        key: CallKey,
        tool: str,
        view: UserView,
        why: str,
        headers: list[tuple[str, bytes]],
    ) -> OutRecord:
        state, retry, message = view
        status = Status(
            **key.model_dump(),
            status_id=stable_id("status", key.encoded(), "executor", self.group, why),
            tool=tool,
            state=state,
            retry_possible=retry,
            message=message,
            ts=self.clock(),
        )
        return Outbound(self.topics.status, _turn_key(key), encode(status), headers)

    def claim(self, dispatch: Dispatch, where: tuple[int, int]) -> ExecutionEntry:
        """The ``claimed`` ledger entry of a call (``where``: dispatch partition and offset)."""
        return ExecutionEntry.for_dispatch(
            dispatch,
            self.group,
            self.executor_id,
            EntryState.CLAIMED,
            self.clock(),
            partition=where[0],
            offset=where[1],
        )

    def ended(
        self,
        dispatch: Dispatch,
        claim: ExecutionEntry,
        result: ExecutionResult,
        headers: list[tuple[str, bytes]],
    ) -> tuple[ExecutionEntry, list[OutRecord]]:
        """A claimed call's end: its ledger entry moved to the result's outcome, the result,
        and the user status when it did not succeed."""
        outcome = result.outcome
        entry = claim.moved_to(EntryState(outcome.value), self.executor_id, result.ts)
        outputs = [self.entry(entry), self.result(result, headers)]
        if outcome is ExecutionOutcome.FAILED:
            message = (
                "The action failed; asking again may work."
                if result.retry_possible
                else "The action could not be completed."
            )
            view = (UserState.FAILED, result.retry_possible, message)
            outputs.append(
                self.status(dispatch.key, dispatch.tool, view, result.reason or "failed", headers)
            )
        elif outcome is ExecutionOutcome.UNKNOWN:
            outputs.append(
                self.status(dispatch.key, dispatch.tool, UNKNOWN_VIEW, "unknown", headers)
            )
        return entry, outputs

    def refusal(
        self,
        dispatch: Dispatch,
        headers: list[tuple[str, bytes]],
        code: str,
        *,
        where: tuple[int, int],
        refusal: Refusal | None = None,
        claim: ExecutionEntry | None = None,
    ) -> Refused:
        """What records that a call is not run: ledger entry, result and user status
        (``where`` = dispatch partition and offset); after a ``claim``, as the claimed call's
        end."""
        now = self.clock()
        view = REFUSAL_VIEW.get(code, _DEFAULT_REFUSAL_VIEW)
        blocked_by = refusal.command_id if refusal else None
        result = ExecutionResult.for_dispatch(
            dispatch,
            group=self.group,
            executor_id=self.executor_id,
            outcome=ExecutionOutcome.REFUSED,
            ts=now,
            reason=code,
            blocked_by=blocked_by,
            retry_possible=view[1],
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
            self.entry(entry),
            self.result(result, headers),
            self.status(dispatch.key, dispatch.tool, view, code, headers),
        ]
        return Refused(dispatch, code, entry, outputs, blocked_by)

    def unknowns(
        self, entries: list[ExecutionEntry], reason: str
    ) -> tuple[list[ExecutionEntry], list[OutRecord]]:
        """Claimed calls reported ``unknown`` (never run again): their final ledger entries and
        the records (entry, result, status) of all of them."""
        now = self.clock()
        outputs: list[OutRecord] = []
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
                self.entry(final),
                self.result(result, []),
                self.status(entry.key, entry.tool, UNKNOWN_VIEW, "unknown", []),
            ]
        return finals, outputs


def _turn_key(key: CallKey) -> bytes:
    return key.turn_key.encode()
