"""The step: one batch of partition p built into a commit plan, committed, and held back.

``build`` (synchronous, no IO)
    Merges the batch's control and fragment records by timestamp (each topic stays in offset
    order; ties go to control, so a cancellation stamped with the same millisecond as a terminal
    event is applied first), feeds them to the Assembler (:mod:`processor.runtime.intake`) and
    collects a :class:`~processor.runtime.step_plan.Step`: the commit plan (outputs, changelog
    records for partition p, next offsets) and the facts the metrics need
    (:mod:`processor.runtime.emission`). Records below ``expected`` were already processed and
    are skipped.

``commit``
    Runs the numbered transaction (:mod:`processor.runtime.transaction`) and, on success,
    advances ``expected`` and the changelog position. On failure the caller resets the task
    (prepares it again), which discards the in-memory state the failed batch produced.

Causal control. Ordering across the two topics by timestamp within one batch is a best effort
(two clocks), and Kafka gives no order across batches, so safety rests on a barrier instead:
``build`` receives ``barrier``, the committed end offset of ``control`` partition p taken (by
the worker, with one ListOffsets request) *after* the batch was fetched, and hands it to the
Assembler with every fragment record; after each control record, and at the end of the batch
with the consumer's position (which also steps over transaction markers), it tells the
Assembler how far ``control`` is applied. A call whose terminal events were read under barrier
B acts only once control is applied up to B, so every cancellation, quarantine, disable, stop
or denial committed before its terminal wins, across batches, restarts and rebalances (the
barrier is an offset, and it is kept in the changelog with the call). Only those calls wait;
the rest of the partition flows. Executors still re-check at execution time (§7).

Back-pressure. On a backlog the consumer reads fragments faster than the turn bindings and
cancellations on ``control``, and every call read ahead of control stays open until control
catches up: a tenant with more such calls than ``max_open_buffers_per_tenant`` would lose the
rest to ``buffer_limit``. So once ``hold_at`` calls (half the smaller open-buffer bound) wait
for control, ``build`` hands no further fragment of the batch to the Assembler
(``Step.held_from``); the worker seeks fragments back to that record and pauses them until
control is applied up to the batch's barrier (:attr:`Progress.fragments_paused_until`) or no
call waits for it any more (control itself is never paused, so that always comes). Only calls
that wait for control count: open buffers that wait for their own events (an abandoned stream)
never pause a partition.

State: :class:`Progress`, what partition p has processed (its Assembler, the next input
offsets, the changelog position, whether the Assembler is clean enough to keep, the tick fence
and the back-pressure pause), passed explicitly to every function here; a preparation sets it
afresh (:meth:`Progress.restart`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.core.assembler import Assembler
from processor.kafka.codec import encode_change, traceparent_of
from processor.runtime import intake, transaction
from processor.runtime.emission import Emitter
from processor.runtime.step_plan import Step, TickFence
from processor.settings import LimitsSettings


def _timestamp(record: ConsumerRecord) -> int:
    return int(record.timestamp)


def hold_at(limits: LimitsSettings) -> int:
    """How many calls may wait for control before fragments are held (back-pressure)."""
    return max(1, min(limits.max_open_buffers_per_tenant, limits.max_open_buffers) // 2)


@dataclass(frozen=True)
class Inputs:
    """Partition p's input partitions (``fragments`` and ``control``, co-partitioned) and its
    changelog topic."""

    partition: int
    fragments: TopicPartition
    control: TopicPartition
    changelog: str

    @property
    def tps(self) -> tuple[TopicPartition, TopicPartition]:
        return (self.fragments, self.control)

    @property
    def roles(self) -> dict[str, str]:
        """Topic name → role."""
        return {self.fragments.topic: "fragments", self.control.topic: "control"}


@dataclass
class Progress:
    """What partition p has processed (see the module docstring)."""

    assembler: Assembler
    hold_at: int
    expected: dict[TopicPartition, int] = field(default_factory=dict)
    # changelog offset after everything the Assembler reflects (None: unknown), and whether the
    # Assembler holds no change that is not committed (it may then be kept)
    changelog_next: int | None = None
    clean: bool = False
    input_partitions: int = 0  # partition count of the inputs, known once prepared
    last_tick: float = 0.0
    # the expiry fence (see ``build``): when the next tick may run, and the inputs' committed
    # end offsets read at or after that time, which must be applied before it does
    tick_fence: TickFence | None = None
    # back-pressure: fragments are paused until control is applied up to this offset, or until
    # no call waits for control any more
    fragments_paused_until: int | None = None

    def restart(self, assembler: Assembler, changelog_next: int) -> None:
        """A preparation's restored Assembler and changelog position."""
        self.assembler = assembler
        self.changelog_next = changelog_next

    def prepared(self) -> None:
        """The preparation is done: no tick has run or is fenced yet, and the Assembler, just
        restored from what is committed, is clean."""
        self.last_tick = 0.0
        self.tick_fence = None
        self.clean = True


def build(
    progress: Progress,
    inputs: Inputs,
    emitter: Emitter,
    records: Mapping[str, Sequence[ConsumerRecord]],
    now: float,
    *,
    tick: TickFence | None = None,
    barrier: int | None = None,
    control_position: int | None = None,
    fragments_position: int | None = None,
) -> Step:
    """Feed one batch (topic role → records), then the optional tick, to the Assembler.

    ``barrier`` is control's committed end offset read after this batch was fetched (needed
    when the batch holds fragments); ``control_position`` the consumer's position on control
    once the batch's control records are handed over (see the module docstring), and
    ``fragments_position`` the same on fragments: past the batch's last record, a position has
    stepped over transaction markers only (of a transactional writer), which the step's offsets
    then pass too, so the committed offset and the lag reach the end. The tick comes after the
    records, at ``tick.at`` (not ``now``), and the caller asks for it only once both inputs are
    applied up to the end offsets ``tick.ends`` read at or after ``tick.at``
    (:func:`caught_up`): expiry must never overtake a record written before the time it judges
    by. An idle call fails only if no fragment of it was written before its idle time ran out,
    an unbound call only if its binding was not in control before its wait ran out
    (``Assembler.tick``'s ``control_end`` is control's end in the fence), and so on for the
    response and confirmation waits. A tick that did not run (held fragments) keeps its fence
    for the next batch.
    """
    step = Step()
    progress.clean = False  # until this step is committed (or turns out empty)
    assembler, expected = progress.assembler, progress.expected
    control, fragments = records.get("control", ()), records.get("fragments", ())
    merged: Iterable[ConsumerRecord] = (
        heapq.merge(control, fragments, key=_timestamp)
        if control and fragments
        else control or fragments
    )
    fragments_tp, control_tp = inputs.fragments, inputs.control
    tps = {fragments_tp.topic: fragments_tp, control_tp.topic: control_tp}
    roles = inputs.roles
    partition, partitions = inputs.partition, progress.input_partitions
    for record in merged:
        role = roles[record.topic]
        tp = tps[record.topic]  # this task's partition: the worker routes by partition
        if record.offset < expected.get(tp, 0):
            step.skipped[role] = step.skipped.get(role, 0) + 1
            continue
        if role == "fragments" and barrier is not None:
            if step.held_from is None and assembler.waiting_for_control >= progress.hold_at:
                step.held_from = record.offset  # this one and the rest wait for control
            if step.held_from is not None:
                continue
        step.plan.offsets[tp] = record.offset + 1
        step.consumed[role] = step.consumed.get(role, 0) + 1
        trace = traceparent_of(record.headers)
        if trace is not None and role == "fragments" and record.key:
            emitter.remember(record.key.decode("utf-8", "replace"), trace)
        outs = intake.handle(
            assembler,
            record,
            role,
            now,
            barrier,
            partition=partition,
            input_partitions=partitions,
        )
        for out in outs:
            emitter.emit(step, out, trace, record.timestamp / 1000.0)
        if role == "control":
            for out in assembler.advance_control(record.offset + 1, now):
                emitter.emit(step, out, None, record.timestamp / 1000.0)
    if control_position is not None:
        for out in assembler.advance_control(control_position, now):
            emitter.emit(step, out, None, now)
    passed: list[tuple[TopicPartition, int | None]] = [(control_tp, control_position)]
    if step.held_from is None:  # else fragments are read again from there
        passed.append((fragments_tp, fragments_position))
    for tp, position in passed:
        if position is not None and position > step.plan.offsets.get(tp, expected.get(tp, 0)):
            step.plan.offsets[tp] = position
    if tick is not None and step.held_from is None:  # held fragments may hold what a
        # buffer awaits
        progress.last_tick = now
        progress.tick_fence = None
        for out in assembler.tick(tick.at, control_end=tick.ends.get(control_tp)):
            emitter.emit(step, out, None, None)
    for change in assembler.drain_changes():
        step.plan.changelog.append(encode_change(change, inputs.changelog, partition))
        step.changes.append((change.key, change.value))
    progress.clean = step.plan.empty
    return step


def passed_markers(
    progress: Progress, inputs: Inputs, positions: Mapping[TopicPartition, int | None]
) -> bool:
    """Whether the consumer stepped past offsets with no record to apply (transaction markers)
    beyond ``expected``: a step then commits the new offsets alone."""
    return any(
        (position := positions.get(tp)) is not None and position > progress.expected.get(tp, 0)
        for tp in inputs.tps
    )


def caught_up(
    progress: Progress,
    inputs: Inputs,
    end_offsets: Mapping[TopicPartition, int | None],
    fed: Mapping[str, Sequence[ConsumerRecord]],
    positions: Mapping[TopicPartition, int | None] | None = None,
) -> bool:
    """Whether both inputs are read up to ``end_offsets`` once ``fed`` is applied (for the
    tick: ``end_offsets`` are its fence's). ``positions``, the consumer's, count too: past the
    last record it also steps over transaction markers, which hold an offset each, so an input
    written by a transactional producer still reaches its end (the last record's offset + 1
    stops one short of it, for ever)."""
    roles = inputs.roles
    for tp in inputs.tps:
        end = end_offsets.get(tp)
        if end is None:
            return False
        records = fed.get(roles[tp.topic])
        position = records[-1].offset + 1 if records else progress.expected.get(tp, 0)
        position = max(position, (positions or {}).get(tp) or 0)
        if position < end:
            return False
    return True


async def commit(
    progress: Progress, producer: Any, step: Step, *, group_id: str, timeout: float
) -> transaction.Committed:
    """Commit the step's plan in one transaction with ``producer`` (None: not prepared, which
    fails the commit); on success advance ``expected`` and the changelog position."""
    if producer is None:
        raise transaction.TransactionFailed("error", "no producer (partition not prepared)")
    committed = await transaction.commit(producer, step.plan, group_id=group_id, timeout=timeout)
    progress.expected.update(step.plan.offsets)
    if committed.changelog_next is not None:
        progress.changelog_next = committed.changelog_next
    progress.clean = True
    return committed
