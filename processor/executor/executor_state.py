"""The executor client's state: every field, declared once, and the small helpers on it.

Owns ``__init__`` (settings, handlers, the control barrier, the consumer, the owned partitions,
the lock and stop flags), :class:`ExecutorStats`, the per-partition record :class:`_Owned`, the
internal signals (:class:`_Fenced`, :class:`_EndsUnrecorded`, :class:`_TransactionFailed`,
:class:`_Stopping`), the fence factory the barrier uses (``_new_fence``), outcome counting and the
periodic forgetting of old control state.

Must not talk to Kafka nor decide about a record: that is the layers above.

:class:`~processor.executor.client.ExecutorClient` is one class built in layers, each module's
class the base of the next (bottom to top: ``executor_state``, ``transactions``, ``fencing``,
``running``, ``claims``, ``client``); a layer calls only itself and the layers below it. They are
layers of one object rather than collaborators because the state is genuinely shared: the owned
partitions (producer, ledger view, pending offset), the consumer, the lock and the stop flags
are read and changed by the loop, the rebalance callbacks and the per-record steps alike, and
tests reach the running client through one object. All parts log to
``processor.executor.client``."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from processor.core.authn import CommandVerifier
from processor.core.errors import ConfigurationError, ExecutionError, KafkaStepError
from processor.core.events import Dispatch
from processor.core.registry import Registry
from processor.executor.barrier import ControlBarrier
from processor.executor.fence import FenceState, Refusal, Requirements
from processor.executor.handlers import Call, Handlers
from processor.executor.inflight import InFlight
from processor.executor.records import ExecutionEntry, ExecutionOutcome
from processor.kafka.hanging import SweepSchedule
from processor.kafka.owner_fence import OwnerFence
from processor.observability import metrics
from processor.settings import Settings

__all__ = ["DEFAULT_GROUP", "ClientState", "ExecutorStalled", "ExecutorStats"]

DEFAULT_GROUP: Final = "toolcall-executors"


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


class _Fenced(KafkaStepError):
    """This executor lost the partition (its transactional producer was fenced)."""


class _TransactionFailed(KafkaStepError):
    """A transaction kept failing; the record in hand must be fetched and decided again."""


class _EndsUnrecorded(_Fenced):
    """The end of a claimed call could not be written for several rounds: the partition is
    given up and taken again, as after a fence; the take reports the call ``unknown`` from its
    claim."""


_Out = tuple[str, bytes, bytes, int | None, list[tuple[str, bytes]]]
"""One record to write: topic, key, value, partition (None: by key), headers."""


_T = TypeVar("_T")


class _Stopping(ExecutionError):
    """The executor is stopping; leave the record in hand unacknowledged."""


class ExecutorStalled(ExecutionError):
    """The executor's loop made no progress for ``executor_stall_timeout_seconds``: it was
    stopped, abandoning its partitions (nothing committed on the way out), to be restarted."""

    def __init__(self, seconds: float, step: str) -> None:
        super().__init__(f"no progress for {seconds:.0f} s (last step: {step})")
        self.seconds = seconds
        self.step = step


@dataclass
class _Owned:
    """A dispatch partition this executor owns: its transactional producer and ledger view."""

    partition: int
    producer: AIOKafkaProducer
    entries: dict[str, ExecutionEntry]
    pending_offset: int | None = None  # next offset to commit, not yet in a transaction
    lost: bool = False  # its producer was fenced (client._lose)
    discarded: bool = False  # its producer was dropped after a failed transaction: make a new one
    in_doubt: bool = False  # that transaction failed after its commit was sent (it may commit)
    # the sweep for commit markers the coordinator skipped (Transactions._sweep_skipped)
    sweeps: SweepSchedule = field(default_factory=SweepSchedule)
    resume_at: int | None = None  # once lost: the record in hand, fetched again after a retake
    # the ends of claimed calls (dispatch id → records) whose transaction failed: written before
    # anything else of the partition (Transactions._write_unended); failed rounds since the last
    # success, and when the loop may try again with no record fetched
    unended: dict[str, list[_Out]] = field(default_factory=dict)
    unended_failures: int = 0
    unended_retry_at: float = 0.0
    # the handler tasks of claimed calls of this partition that run now, and the ends of
    # claimed calls not written yet: the next transaction of the partition writes them all
    running: set[asyncio.Task[None]] = field(default_factory=set)
    finished: list[_Finished] = field(default_factory=list)
    calls: dict[str, _RunningCall] = field(default_factory=dict)  # by dispatch id
    # paused because an in-order call waits for the one before it (Claims._decide): resumed
    # once no in-order call of the partition runs
    ordered_wait: bool = False


@dataclass
class _RunningCall:
    """A claimed call whose handler runs: what the stop watch checks, and how it is told."""

    dispatch: Dispatch
    requirements: Requirements
    call: Call
    task: asyncio.Task[None] | None = None
    stopped_by: Refusal | None = None  # the fence's verdict that told it to stop
    in_order: bool = False  # its registration's: the next call of its turn waits for it


@dataclass(frozen=True)
class _Finished:
    """The end of a claimed call (ledger entry, result, status) waiting for its transaction."""

    dispatch_id: str
    outputs: list[_Out]


class ClientState:
    """The fields of one executor client and the helpers every layer uses."""

    def __init__(
        self,
        settings: Settings,
        handlers: Handlers,
        *,
        verifier: CommandVerifier,
        group: str = DEFAULT_GROUP,
        executor_id: str | None = None,
        registry: Registry | None = None,
        barrier_timeout_seconds: float = 30.0,
        batch_size: int | None = None,
        max_in_flight: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not len(handlers):
            raise ConfigurationError("invalid_handlers", "no handlers registered")
        undecided = sorted(
            {
                f"{r.namespace}.{r.tool}" if r.namespace is not None else r.tool
                for r in handlers
                if r.requires_confirmation is None
                and (registry is None or registry.resolve(r.tool, r.namespace) is None)
            }
        )
        if undecided:  # fail closed: never guess that a tool needs no confirmation
            raise ConfigurationError(
                "confirmation_rule_unknown",
                "neither the handler nor the tool registry says whether "
                f"{', '.join(undecided)} needs a confirmation: pass the registry (--tools) "
                "or register the handler with requires_confirmation",
            )
        self.settings = settings
        self.handlers = handlers
        self.group = group
        self.executor_id = executor_id or f"{socket.gethostname()}-{os.getpid()}"
        self.registry = registry
        self.topics = settings.topics
        self.stats = ExecutorStats()
        self.assigned = asyncio.Event()
        self._verifier = verifier
        self._barrier_timeout = barrier_timeout_seconds
        # handlers running at once (None: executor_max_in_flight); records per poll at most
        # (None: as many as may run at once; never more than the free slots)
        self._in_flight = InFlight(max_in_flight or settings.executor_max_in_flight)
        self._batch_size = batch_size or self._in_flight.limit
        self._clock = clock
        self._retention = settings.limits.retention_seconds
        self._barrier = ControlBarrier(settings, self._new_fence)
        self._consumer: AIOKafkaConsumer | None = None
        # a consumer never assigned: its client asks the transaction coordinator for a take,
        # with no long-polled fetch ahead of the request on its connection
        self._admin: AIOKafkaConsumer | None = None
        self._owned: dict[int, _Owned] = {}
        # partition → what its last unfinished fence read (hanging.across_retries)
        # the owner fence of each partition being taken (processor.kafka.owner_fence), kept
        # across the tries of one take
        self._owner_fences: dict[int, OwnerFence] = {}
        self._retakes: dict[int, asyncio.Task[None]] = {}  # partitions whose take failed
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._abandon = False
        # takes and releases in progress (they wait on the broker): abandon cancels them
        self._broker_work: set[asyncio.Task[Any]] = set()
        self._started = False
        self._next_forget = 0.0
        # liveness: when the loop last made progress and what it is doing (handlers run
        # beside the loop, which goes on polling and writing outcomes while they run)
        self._progress_at = time.monotonic()
        self._step = "starting"

    def _new_fence(self) -> FenceState:
        registry = self.registry
        if registry is None:  # a disabled name it cannot resolve then refuses the tenant's calls
            known = frozenset(self.handlers.tools())
            return FenceState(verifier=self._verifier, known_tools=known)

        def canonical(name: str) -> str | None:
            resolution = registry.resolve(name)
            return resolution.declaration.name if resolution else None

        def switch_names(name: str, namespace: str | None) -> frozenset[str] | None:
            resolution = registry.resolve(name, namespace)
            return registry.switch_names(resolution.declaration) if resolution else None

        return FenceState(
            verifier=self._verifier, canonical_tool=canonical, switch_names=switch_names
        )

    def _progress(self, step: str) -> None:
        """The loop made progress; ``step`` names what it does next (for the stall line)."""
        self._progress_at = time.monotonic()
        self._step = step

    def seconds_since_progress(self) -> float:
        """Seconds since the loop last made progress (handlers running do not hold it up)."""
        return time.monotonic() - self._progress_at

    def _count(self, tool: str, outcome: ExecutionOutcome, reason: str | None) -> None:
        self.stats.count(outcome.value)
        metrics.EXECUTOR_OUTCOMES.labels(tool, outcome.value, reason or "").inc()

    def _maybe_forget(self) -> None:
        now = self._clock()
        if now < self._next_forget:
            return
        self._next_forget = now + 60.0
        self._barrier.forget(now - self._retention)

    @property
    def barrier(self) -> ControlBarrier:
        return self._barrier

    @property
    def in_flight(self) -> InFlight:
        """The handlers running now, the bound, and the most that ever ran at once."""
        return self._in_flight

    def owned_partitions(self) -> list[int]:
        return sorted(p for p, o in self._owned.items() if not o.lost)
