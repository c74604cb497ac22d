"""The executor's records of state: what it owns per partition, per running call, and counts.

Owns the data the executor's parts pass to each other, and nothing that acts on it:

* :class:`OwnedPartition`: a dispatch partition this executor owns (its transactional producer,
  its ledger view, the offset not yet committed, the ends of calls waiting for a transaction,
  the handlers running on it);
* :class:`RunningCall` and :class:`FinishedCall`: a claimed call while its handler runs, and
  its end (ledger entry, result, status) until its transaction;
* :class:`Progress` (what the loop does now, for the stall watchdog) and :class:`Tally` (the
  outcome counters and metrics);
* the internal signals between the parts (:class:`Fenced`, :class:`EndsUnrecorded`,
  :class:`TransactionFailed`, :class:`Stopping`) and :class:`ExecutorStalled`.

The parts that act on these records take them explicitly (h11's ``Connection`` pattern):
:mod:`~processor.executor.transactions` (the writer), :mod:`~processor.executor.fencing` (the
gate), :mod:`~processor.executor.running` (the runner), :mod:`~processor.executor.claims` (the
claimer), :mod:`~processor.executor.ownership` (the partition table) and
:mod:`~processor.executor.client` (the lifecycle and the loop)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Final

from aiokafka import AIOKafkaProducer

from processor.core.errors import ExecutionError, KafkaStepError
from processor.core.events import Dispatch
from processor.executor.fence import Refusal, Requirements
from processor.executor.handlers import Call, Registration
from processor.executor.records import ExecutionEntry, ExecutionOutcome
from processor.kafka.codec import Outbound
from processor.kafka.hanging import SweepSchedule
from processor.observability import metrics
from processor.observability.logging import fields

__all__ = [
    "DEFAULT_GROUP",
    "ClaimedCall",
    "EndsUnrecorded",
    "ExecutorStalled",
    "ExecutorStats",
    "Fenced",
    "FinishedCall",
    "OutRecord",
    "OwnedPartition",
    "Progress",
    "RunningCall",
    "Stopping",
    "Tally",
    "TransactionFailed",
]

DEFAULT_GROUP: Final = "toolcall-executors"

log = logging.getLogger("processor.executor.client")  # one logger for all the client's parts

OutRecord = Outbound
"""One record to write: topic, key, value, headers, partition (None: by key)."""


@dataclass
class ExecutorStats:
    """Counters for tests and diagnostics (by outcome, and records not run)."""

    outcomes: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    other_tools: int = 0
    undecodable: int = 0

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def skip(self, why: str) -> None:
        """Count a record not run: ``undecodable``, ``other_tool`` or ``duplicate``."""
        if why == "duplicate":
            self.duplicates += 1
        elif why == "other_tool":
            self.other_tools += 1
        else:
            self.undecodable += 1


@dataclass
class Tally:
    """The outcomes and skips of one executor: its :class:`ExecutorStats` and the metrics."""

    stats: ExecutorStats = field(default_factory=ExecutorStats)
    # the metrics' children by labels, looked up once each (``labels()`` costs a lock and a
    # tuple per call); bounded as the labels are (metrics.py)
    _outcomes: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    _durations: dict[str, Any] = field(default_factory=dict)

    def outcome(self, tool: str, outcome: ExecutionOutcome, reason: str | None) -> None:
        self.stats.count(outcome.value)
        labels = (tool, outcome.value, reason or "")
        child = self._outcomes.get(labels)
        if child is None:
            child = self._outcomes[labels] = metrics.EXECUTOR_OUTCOMES.labels(*labels)
        child.inc()

    def handler_duration(self, tool: str, seconds: float) -> None:
        child = self._durations.get(tool)
        if child is None:
            child = self._durations[tool] = metrics.EXECUTOR_HANDLER_DURATION.labels(tool)
        child.observe(seconds)

    def skip(self, why: str) -> None:
        self.stats.skip(why)
        metrics.EXECUTOR_SKIPPED.labels(why).inc()

    def refusal(self, dispatch: Dispatch, code: str, blocked_by: str | None) -> None:
        """Count and log a refusal (once it is committed, or queued after a claim)."""
        self.outcome(dispatch.tool, ExecutionOutcome.REFUSED, code)
        log.info(
            "call refused by the fence",
            extra=fields(
                dispatch_id=dispatch.dispatch_id,
                tool=dispatch.tool,
                reason=code,
                blocked_by=blocked_by,
            ),
        )


@dataclass
class Progress:
    """When the loop last made progress and what it does now (the stall watchdog's view;
    handlers run beside the loop and do not hold it up)."""

    step: str = "starting"
    at: float = field(default_factory=time.monotonic)

    def __call__(self, step: str) -> None:
        self.at = time.monotonic()
        self.step = step

    def seconds_since(self) -> float:
        return time.monotonic() - self.at


class Fenced(KafkaStepError):
    """This executor lost the partition (its transactional producer was fenced)."""


class TransactionFailed(KafkaStepError):
    """A transaction kept failing; the record in hand must be fetched and decided again."""


class EndsUnrecorded(Fenced):
    """The end of a claimed call could not be written for several rounds: the partition is
    given up and taken again, as after a fence; the take reports the call ``unknown`` from its
    claim."""


class Stopping(ExecutionError):
    """The executor is stopping; leave the record in hand unacknowledged."""


class ExecutorStalled(ExecutionError):
    """The executor's loop made no progress for ``executor_stall_timeout_seconds``: it was
    stopped, abandoning its partitions (nothing committed on the way out), to be restarted."""

    def __init__(self, seconds: float, step: str) -> None:
        super().__init__(f"no progress for {seconds:.0f} s (last step: {step})")
        self.seconds = seconds
        self.step = step


@dataclass
class OwnedPartition:
    """A dispatch partition this executor owns: its transactional producer and ledger view."""

    partition: int
    producer: AIOKafkaProducer
    entries: dict[str, ExecutionEntry]
    pending_offset: int | None = None  # next offset to commit, not yet in a transaction
    lost: bool = False  # its producer was fenced (Ownership.lose)
    discarded: bool = False  # its producer was dropped after a failed transaction: make a new one
    in_doubt: bool = False  # that transaction failed after its commit was sent (it may commit)
    # the sweep for commit markers the coordinator skipped (PartitionWriter.sweep_skipped)
    sweeps: SweepSchedule = field(default_factory=SweepSchedule)
    resume_at: int | None = None  # once lost: the record in hand, fetched again after a retake
    # the ends of claimed calls (dispatch id → records) whose transaction failed: written before
    # anything else of the partition (PartitionWriter.write_unended); failed rounds since the
    # last success, and when the loop may try again with no record fetched
    unended: dict[str, list[OutRecord]] = field(default_factory=dict)
    unended_failures: int = 0
    unended_retry_at: float = 0.0
    # the handler tasks of claimed calls of this partition that run now, and the ends of
    # claimed calls not written yet: the next transaction of the partition writes them all
    running: set[asyncio.Task[None]] = field(default_factory=set)
    finished: list[FinishedCall] = field(default_factory=list)
    calls: dict[str, RunningCall] = field(default_factory=dict)  # by dispatch id
    # paused because an in-order call waits for the one before it (Claimer.decide): resumed
    # once no in-order call of the partition runs
    ordered_wait: bool = False


@dataclass(frozen=True)
class ClaimedCall:
    """A call whose claim is committed, waiting for a slot (or starting now)."""

    owned: OwnedPartition
    offset: int
    dispatch: Dispatch
    headers: list[tuple[str, bytes]]
    registration: Registration
    requirements: Requirements
    claim: ExecutionEntry


@dataclass
class RunningCall:
    """A claimed call whose handler runs: what the stop watch checks, and how it is told."""

    dispatch: Dispatch
    requirements: Requirements
    call: Call
    task: asyncio.Task[None] | None = None
    stopped_by: Refusal | None = None  # the fence's verdict that told it to stop
    in_order: bool = False  # its registration's: the next call of its turn waits for it


@dataclass(frozen=True)
class FinishedCall:
    """The end of a claimed call (ledger entry, result, status) waiting for its transaction."""

    dispatch_id: str
    outputs: list[OutRecord]
