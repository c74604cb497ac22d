"""Group membership: which input partitions this worker owns, and getting each one ready.

:class:`PartitionManager` is the consumer's rebalance listener. aiokafka rebalances eagerly:
every rebalance revokes the whole assignment, then assigns the new one.

``on_partitions_revoked``
    Takes the processing lock, so a batch being processed finishes its transaction first (its
    commit step is bounded), then cancels the preparations in flight and closes every task's
    producer. No transaction of ours stays open past revocation. The Assembler of every ready
    partition whose changes are all committed is kept aside: if the next assignment gives the
    partition back (the common case: eager rebalancing revokes everything, then returns most of
    it), its preparation applies only the changelog tail written since (a partition that moved
    and came back gets the other owner's changes in that tail). Kept Assemblers not given back
    are dropped when the assignment arrives.

``on_partitions_assigned``
    Checks co-partitioning (partition p of ``fragments`` and of ``control`` must both be ours;
    aiokafka's ``RangePartitionAssignor`` guarantees it when every member subscribes to both
    topics and their counts match, which the worker checks at start-up). It pauses the new
    partitions and starts one preparation job per partition (fence, restore, seek; see
    :mod:`processor.runtime.partition`), in the background, so the rebalance itself stays short
    and a rebalance during a restore simply cancels it. A job resumes its partitions when done;
    a failed or timed-out job is retried with backoff while the partition stays assigned.

``reset`` rebuilds one partition after a failed transaction the same way. After ``fenced`` it
waits one session timeout first: another member probably owns the partition now and this worker
will be told so by the next rebalance; fencing it back at once would only make the two ping-pong.

The manager counts "ready" transitions (``seq``), so the worker can drop records fetched before a
partition's latest seek (they would be processed twice otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from aiokafka import ConsumerRebalanceListener
from aiokafka.errors import IllegalStateError, KafkaError
from aiokafka.structs import TopicPartition

from processor.core.assembler import Assembler
from processor.core.errors import ConfigurationError, Described
from processor.kafka.hanging import TransactionHeld
from processor.observability import metrics
from processor.observability.logging import fields
from processor.runtime.partition import PartitionTask
from processor.runtime.task_states import TaskState, TaskTrigger
from processor.settings import Settings

log = logging.getLogger(__name__)

_RETRY_MIN_S: Final = 0.5
_RETRY_MAX_S: Final = 30.0
# a preparation that failed (a coordinator or leader not there yet, a broker restarting) is
# retried at least this often: a broker's leaders move within seconds, and a backoff grown to
# 8 or 16 s during the move was idle time after it (issue 31's recovery figures)
_RETRY_FAILED_MAX_S: Final = 2.0


class CopartitioningError(Described, ConfigurationError):
    """The group gave this member partition p of one input topic but not of the other."""

    reason = "copartitioning"


class PartitionManager(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(
        self,
        settings: Settings,
        new_assembler: Callable[[], Assembler],
        *,
        on_fatal: Callable[[BaseException], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        # how a preparation waits before its retry (a seam: tests read the retry schedule
        # without waiting it out, and without patching the event loop's asyncio.sleep)
        self._sleep = sleep
        self.topics = settings.topics
        self.new_assembler = new_assembler
        self._on_fatal = on_fatal
        self.consumer: Any = None  # set by the worker before subscribing
        self.lock = asyncio.Lock()  # held while a batch is processed and committed
        self.tasks: dict[int, PartitionTask] = {}
        self._jobs: dict[int, asyncio.Task[None]] = {}
        self.seq = 0
        self.assigned_once = False
        self._kept: dict[int, tuple[Assembler, int]] = {}  # partition → (Assembler, changelog)

    # ------------------------------------------------------------------ queries

    def ready_tasks(self) -> list[PartitionTask]:
        return [t for t in self.tasks.values() if t.state is TaskState.READY]

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        ready = sorted(t.partition for t in self.ready_tasks())
        assigned = sorted(self.tasks)
        ok = bool(assigned) and ready == assigned
        return ok, {"assigned": assigned, "ready": ready}

    # ------------------------------------------------------------------ rebalance callbacks

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        metrics.REBALANCES.labels("revoked").inc()
        async with self.lock:
            self._kept = {
                t.partition: (t.assembler, t.progress.changelog_next)
                for t in self.ready_tasks()
                if t.progress.clean and t.progress.changelog_next is not None
            }
            await self.close_all()
        partitions = sorted({tp.partition for tp in revoked})
        log.info("partitions revoked", extra=fields(partitions=partitions))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        metrics.REBALANCES.labels("assigned").inc()
        self.assigned_once = True
        by_topic: dict[str, set[int]] = {self.topics.fragments: set(), self.topics.control: set()}
        for tp in assigned:
            by_topic.setdefault(tp.topic, set()).add(tp.partition)
        fragments, control = by_topic[self.topics.fragments], by_topic[self.topics.control]
        if fragments != control:
            self._on_fatal(
                CopartitioningError(
                    f"assigned fragments partitions {sorted(fragments)} but control partitions "
                    f"{sorted(control)}: every member of group {self.settings.group_id!r} must "
                    "subscribe to both topics with the range assignor, and their partition "
                    "counts must match"
                )
            )
            return
        async with self.lock:  # revocation already closed every task; be safe anyway
            await self.close_all()
            kept, self._kept = self._kept, {}
            for p in sorted(fragments):
                task = PartitionTask(p, self.settings, self.new_assembler)
                task.recovery.warm = kept.get(p)
                self.tasks[p] = task
                self._pause(task)
                self._jobs[p] = asyncio.create_task(self.prepare_until_ready(task, delay=0.0))
        metrics.ASSIGNED_PARTITIONS.set(len(self.tasks))
        metrics.READY_PARTITIONS.set(0)
        log.info("partitions assigned", extra=fields(partitions=sorted(fragments)))

    # ------------------------------------------------------------------ reset / close

    def reset(self, task: PartitionTask, cause: str) -> None:
        """Rebuild ``task`` after a failed transaction (call with the lock held)."""
        if self.tasks.get(task.partition) is not task or task.state is TaskState.CLOSED:
            return
        metrics.PARTITION_RESETS.inc()
        task.advance(TaskTrigger.RESET)
        self._pause(task)
        delay = self.settings.session_timeout_ms / 1000 if cause == "fenced" else _RETRY_MIN_S
        old = self._jobs.pop(task.partition, None)
        if old is not None:
            old.cancel()
        self._jobs[task.partition] = asyncio.create_task(
            self.prepare_until_ready(task, delay=delay)
        )
        self._update_ready_gauge()

    async def close_all(self) -> None:
        jobs = list(self._jobs.values())
        self._jobs.clear()
        for job in jobs:
            job.cancel()
        for job in jobs:
            with contextlib.suppress(BaseException):
                await job
        tasks = list(self.tasks.values())
        self.tasks.clear()
        await asyncio.gather(*(t.close() for t in tasks), return_exceptions=True)
        for t in tasks:
            _forget_partition_metrics(t)
        metrics.ASSIGNED_PARTITIONS.set(0)
        metrics.READY_PARTITIONS.set(0)

    # ------------------------------------------------------------------ preparation job

    async def prepare_until_ready(self, task: PartitionTask, *, delay: float) -> None:
        """The preparation job of ``task``: after ``delay`` seconds, prepare it, again and
        again with a bounded back-off while it fails, until it is ready or no longer the
        partition's task (the job a take or a reset starts)."""
        backoff = _RETRY_MIN_S
        if delay:
            await self._sleep(delay)
        while self.tasks.get(task.partition) is task:
            started = time.monotonic()
            try:
                result = await task.prepare(self.consumer)
            except asyncio.CancelledError:
                raise
            except TransactionHeld:  # logged once by processor.kafka.hanging
                metrics.RESTORE_FAILURES.inc()
                await self._sleep(backoff)
                backoff = min(backoff * 2, _RETRY_MAX_S)
                continue
            except Exception as exc:
                metrics.RESTORE_FAILURES.inc()
                log.warning(
                    "partition preparation failed; retrying",
                    extra=fields(
                        partition=task.partition,
                        error=type(exc).__name__,
                        # Kafka errors only: other messages could quote restored state
                        detail=str(exc)[:200] if isinstance(exc, KafkaError) else "",
                        retry_in_s=backoff,
                    ),
                )
                await self._sleep(backoff)
                backoff = min(backoff * 2, _RETRY_FAILED_MAX_S)
                continue
            metrics.RESTORE_DURATION.observe(result.seconds)
            metrics.RESTORE_RECORDS.inc(result.records)
            self.seq += 1
            task.ready_seq = self.seq
            task.advance(TaskTrigger.PREPARED)
            self._resume(task)
            self._update_ready_gauge()
            log.info(
                "partition ready",
                extra=fields(
                    partition=task.partition,
                    restored_records=result.records,
                    restore=task.recovery.restore_kind,
                    store_records=task.recovery.store_records,
                    changelog_end_offset=result.end_offset,
                    restore_seconds=round(result.seconds, 4),
                    prepare_seconds=round(time.monotonic() - started, 4),
                    open_buffers=task.assembler.open_buffers,
                    fragments_offset=task.expected.get(task.fragments_tp),
                    control_offset=task.expected.get(task.control_tp),
                ),
            )
            return

    # ------------------------------------------------------------------ helpers

    def _pause(self, task: PartitionTask) -> None:
        with contextlib.suppress(IllegalStateError, AssertionError, KeyError):
            self.consumer.pause(*task.tps)

    def _resume(self, task: PartitionTask) -> None:
        with contextlib.suppress(IllegalStateError, AssertionError, KeyError):
            self.consumer.resume(*task.tps)

    def _update_ready_gauge(self) -> None:
        metrics.READY_PARTITIONS.set(len(self.ready_tasks()))


def _forget_partition_metrics(task: PartitionTask) -> None:
    label = str(task.partition)
    for gauge in (metrics.OPEN_BUFFERS, metrics.BUFFERED_BYTES):
        with contextlib.suppress(KeyError):
            gauge.remove(label)
    for role in ("fragments", "control"):
        with contextlib.suppress(KeyError):
            metrics.CONSUMER_LAG.remove(role, label)
