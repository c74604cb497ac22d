"""One input partition p: the facade that composes its parts and drives its life.

A :class:`PartitionTask` owns partition p of ``fragments`` and of ``control`` (co-partitioned)
and partition p of the state changelog. It is built h11-style from parts with explicit state
rather than from base classes sharing one ``self``, each part in a module named for what it
owns:

* :mod:`~processor.runtime.task_states`: ``preparing`` → ``ready`` → ``closed``, the one
  transition table; the task's state is read-only and changes only through it;
* :mod:`~processor.runtime.task_fence` (:attr:`PartitionTask.fence`): the transactional
  producer, the fence (InitProducerId, hanging transactions via
  :mod:`~processor.kafka.hanging`), whether the last transaction is in doubt, the sweep of
  skipped commit markers;
* :mod:`~processor.runtime.recovery` (:attr:`PartitionTask.recovery`): the local store's life
  and what the Assembler is restored from (kept, store, changelog); the seek;
* :mod:`~processor.runtime.step` (:attr:`PartitionTask.progress`): what the partition has
  processed; ``build`` (the causal-control barrier, back-pressure, the tick), ``commit``;
* :mod:`~processor.runtime.intake`: one record into the Assembler, and the dead letters the
  runtime decides (wrong topic, misrouted, internal error);
* :mod:`~processor.runtime.emission` (:attr:`PartitionTask.emitter`): each output into the step,
  with its traceparent and span;
* :mod:`~processor.runtime.step_plan`: the :class:`Step` and :class:`TickFence` records.

The facade owns the order of the life and nothing else:

``prepare`` (on assignment, and again after any failed transaction)
    1. close the previous producer of this task, if any;
    2. fence: start a transactional producer with ``transactional.id =
       f"{application_id}-{p}"`` (its InitProducerId fences every older producer of that id and
       aborts its open transaction), then end any transaction of its producer id still open on
       an output partition, which the coordinator completed without a marker there (aborted, or
       committed when the coordinator's state, read just before, says it committed). Without
       the permission to, the task stays held (``TransactionHeld``): it never commits over one;
    3. restore a fresh Assembler from the local store or changelog partition p, or keep the
       Assembler this worker had before the rebalance that gives p back and apply only the
       changelog tail written since its own last committed transaction. Only an Assembler whose
       every change is committed is kept; anything else is restored in full;
    4. read the group's committed offsets for both input partitions, after the fence and as
       stable offsets (KIP-447: the coordinator answers once the last transaction's offsets
       are applied; :mod:`~processor.kafka.stable_offsets`), under the fence's bound, and seek
       the consumer there; ``expected`` holds these next offsets.

``build`` (synchronous, no IO) and ``commit`` per batch, then ``close``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.core.assembler import Assembler
from processor.runtime import recovery
from processor.runtime import step as step_rules
from processor.runtime.emission import Emitter
from processor.runtime.recovery import Recovery
from processor.runtime.restore import RestoreResult
from processor.runtime.step import Inputs, Progress
from processor.runtime.step_plan import Step, TickFence
from processor.runtime.task_fence import TaskFence
from processor.runtime.task_states import TaskState, TaskTrigger, next_task_state
from processor.settings import Settings

__all__ = ["PartitionTask", "Step", "TaskState", "TaskTrigger", "TickFence"]


class PartitionTask:
    """Partition p's parts: its fence, its recovery, its progress and its emitter."""

    def __init__(
        self,
        partition: int,
        settings: Settings,
        new_assembler: Callable[[], Assembler],
    ) -> None:
        self.partition = partition
        self.settings = settings
        self.topics = settings.topics
        self.fragments_tp = TopicPartition(self.topics.fragments, partition)
        self.control_tp = TopicPartition(self.topics.control, partition)
        self.tps = (self.fragments_tp, self.control_tp)
        self.inputs = Inputs(partition, self.fragments_tp, self.control_tp, self.topics.changelog)
        self._state = TaskState.PREPARING
        self.ready_seq = 0  # the manager's sequence number when this task last became ready
        self.fence = TaskFence(partition, settings)
        self.recovery = Recovery(partition, settings, new_assembler)
        self.progress = Progress(new_assembler(), step_rules.hold_at(settings.limits))
        self.emitter = Emitter(partition, self.topics)

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> TaskState:
        return self._state

    def advance(self, trigger: TaskTrigger) -> TaskState:
        """Change the state through the table (InvalidTransition when it does not allow it)."""
        self._state = next_task_state(self._state, trigger)
        return self._state

    @property
    def assembler(self) -> Assembler:
        return self.progress.assembler

    @property
    def expected(self) -> dict[TopicPartition, int]:
        """The next offset to process per input partition."""
        return self.progress.expected

    # ------------------------------------------------------------------ prepare / close

    async def prepare(self, consumer: Any) -> RestoreResult:
        """Fence, restore, seek (see the module docstring). Raises on failure or timeout."""
        self.advance(TaskTrigger.PREPARE)
        progress = self.progress
        progress.fragments_paused_until = None  # the worker resumes the partition once ready
        await self.fence.fence(consumer._client)
        progress.clean = False
        assembler, result = await self.recovery.restore()
        progress.restart(assembler, result.end_offset)
        progress.input_partitions = recovery.input_partitions(
            consumer, self.topics.fragments, self.partition
        )
        await recovery.seek(
            consumer,
            self.tps,
            progress.expected,
            group_id=self.settings.group_id,
            timeout=2 * self.settings.request_timeout_ms / 1000,  # the fence's bound
        )
        self.emitter.clear()
        progress.prepared()
        return result

    async def close(self) -> None:
        self.advance(TaskTrigger.CLOSE)
        await self.fence.close_producer()
        self.recovery.close_store()

    # ------------------------------------------------------------------ processing

    def build(
        self,
        records: Mapping[str, Sequence[ConsumerRecord]],
        now: float,
        *,
        tick: TickFence | None = None,
        barrier: int | None = None,
        control_position: int | None = None,
        fragments_position: int | None = None,
    ) -> Step:
        """One batch into a step (:func:`processor.runtime.step.build`)."""
        return step_rules.build(
            self.progress,
            self.inputs,
            self.emitter,
            records,
            now,
            tick=tick,
            barrier=barrier,
            control_position=control_position,
            fragments_position=fragments_position,
        )

    def passed_markers(self, positions: Mapping[TopicPartition, int | None]) -> bool:
        """:func:`processor.runtime.step.passed_markers`."""
        return step_rules.passed_markers(self.progress, self.inputs, positions)

    def caught_up(
        self,
        end_offsets: Mapping[TopicPartition, int | None],
        fed: Mapping[str, Sequence[ConsumerRecord]],
        positions: Mapping[TopicPartition, int | None] | None = None,
    ) -> bool:
        """:func:`processor.runtime.step.caught_up`."""
        return step_rules.caught_up(self.progress, self.inputs, end_offsets, fed, positions)

    async def commit(self, step: Step, *, timeout: float) -> float:
        """Commit the step's plan in one transaction; advance ``expected`` on success, then
        write its changes to the local store (after the commit only: the store never holds a
        write of an aborted transaction). The transaction's duration."""
        committed = await step_rules.commit(
            self.progress,
            self.fence.producer,
            step,
            group_id=self.settings.group_id,
            timeout=timeout,
        )
        self.fence.sweeps.committed = True
        if committed.changelog_next is not None:
            self.recovery.store_committed(step.changes, committed.changelog_next)
        return committed.seconds
