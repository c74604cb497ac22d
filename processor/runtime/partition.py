"""One input partition p: its Assembler, its transactional producer, and what it has processed.

A :class:`PartitionTask` owns partition p of ``fragments`` and of ``control`` (co-partitioned)
and partition p of the state changelog. Its life:

``prepare`` (on assignment, and again after any failed transaction)
    1. close the previous producer of this task, if any;
    2. start a transactional producer with ``transactional.id = f"{application_id}-{p}"``: its
       InitProducerId fences every older producer of that id (a previous owner, a zombie, or
       our own producer that timed out) and aborts its open transaction; then end any
       transaction of its producer id still open on an output partition, which the coordinator
       completed without a marker there (:mod:`processor.runtime.hanging`; aborted, or committed
       when the coordinator's state, read just before, says it committed). Without the
       permission to, the task stays held (``TransactionHeld``): it never commits over one;
    3. restore a fresh Assembler from changelog partition p (:mod:`processor.runtime.restore`),
       or, when this worker owned p until the rebalance that gives it back (aiokafka revokes
       everything on every rebalance), keep the Assembler it had and apply only the changelog
       tail written since its own last committed transaction (``warm``). Only an Assembler
       whose every change is committed is kept; anything else is restored in full;
    4. read the group's committed offsets for both input partitions (after the fence, so they
       are final) and seek the consumer there; ``expected`` holds these next offsets.

``build`` (synchronous, no IO)
    Merges the batch's control and fragment records by timestamp (each topic stays in offset
    order; ties go to control, so a cancellation stamped with the same millisecond as a terminal
    event is applied first), feeds them to the Assembler and collects a :class:`Step`: the
    commit plan (outputs, changelog records for partition p, next offsets) and the facts the
    metrics need. Records below ``expected`` were already processed and are skipped. A record
    whose type does not belong to its topic (a control event on ``fragments`` or the reverse) is
    a dead letter: adapters may write fragments, only the gateway and operators write control.

``commit``
    Runs the numbered transaction (:mod:`processor.runtime.transaction`) and, on success,
    advances ``expected``. On failure the caller resets the task (``prepare`` again), which
    discards the in-memory state the failed batch produced.

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
control is applied up to the batch's barrier or no call waits for it any more (control itself
is never paused, so that always comes). Only calls that wait for control count: open buffers
that wait for their own events (an abandoned stream) never pause a partition.

``traceparent``: each output takes the header of the input record that caused it; outputs of
``tick`` (idle expiry) and outputs caused by a record without the header use the last traceparent
seen on a fragment of the same turn (a bounded, in-memory map: lost on restart).

Why one module: a :class:`PartitionTask` is one object with one life (``prepare``, then
``build`` and ``commit`` per batch, ``close``), and its phases share every field: the
Assembler, the producer, ``expected``, the changelog position, whether the Assembler is clean
enough to keep, the local store and the traceparents. ``prepare``'s order (fence, end hanging
transactions, restore from the kept Assembler, the store or the changelog, then seek) is the
invariant this docstring states, and it reads best in one place. The parts it drives already
live apart: the store (:mod:`~processor.runtime.store`), the restore
(:mod:`~processor.runtime.restore`), the transaction (:mod:`~processor.runtime.transaction`),
hanging transactions (:mod:`~processor.runtime.hanging`) and record encoding
(:mod:`~processor.runtime.codec`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError
from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.core.assembler import Assembler, RecordSource
from processor.core.errors import PROCESS_EXCEPTIONS
from processor.core.events import (
    CONTROL_TYPES,
    FRAGMENT_TYPES,
    OUTPUT_TOPIC,
    Audit,
    DeadLetter,
    Dispatch,
    Ledger,
    OutputRecord,
    turn_key,
)
from processor.observability import metrics, tracing
from processor.observability.logging import fields
from processor.runtime import collector, hanging, transaction
from processor.runtime.codec import (
    encode_change,
    encode_output,
    output_role,
    traceparent_of,
    valid_traceparent,
)
from processor.runtime.partitioner import default_partitioner, misrouted
from processor.runtime.restore import RestoreGap, RestoreResult, restore_partition
from processor.runtime.store import RocksStore, StateStore, StoreCorrupt
from processor.runtime.transaction import CommitPlan
from processor.settings import Settings

# raised while a record is handled, yet not the record's doing: these pass through
_NOT_A_RECORDS: Final[tuple[type[BaseException], ...]] = (
    *PROCESS_EXCEPTIONS,
    asyncio.CancelledError,
)

log = logging.getLogger(__name__)

_MAX_TRACES: Final = 10_000
# how long after a transaction's timeout a coordinator may take to abort it
# (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default) and a margin
_COORDINATOR_ABORT_INTERVAL_S: Final = 15.0
_UNPARSED: Final = object()  # a record that is not JSON (the Assembler says why)
_ALLOWED: Final = {"fragments": FRAGMENT_TYPES, "control": CONTROL_TYPES}


def _timestamp(record: ConsumerRecord) -> int:
    return int(record.timestamp)


class TaskState(enum.Enum):
    PREPARING = "preparing"
    READY = "ready"
    CLOSED = "closed"


@dataclass(frozen=True)
class TickFence:
    """When a tick may expire what waits (``at``, the worker's clock), and the committed end
    offsets of both inputs read at or after ``at``: the tick runs once they are applied, so
    every record written before ``at`` is seen before anything is expired for having waited
    until ``at``. Read fresh, not from the last fetch response, whose end may predate records
    written since (a worker paused or slowed between two fetches)."""

    at: float
    ends: Mapping[TopicPartition, int]


@dataclass
class Step:
    """One batch of one partition: what to commit and what to count once it is committed."""

    plan: CommitPlan = field(default_factory=CommitPlan)
    consumed: dict[str, int] = field(default_factory=dict)  # topic role → records
    skipped: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)  # output role → records
    terminal: list[tuple[str, str]] = field(default_factory=list)  # (state, reason)
    deadletters: list[str] = field(default_factory=list)  # reasons
    commands: list[tuple[str, str, str]] = field(default_factory=list)  # (type, outcome, rejection)
    dispatch_triggers: list[float] = field(default_factory=list)  # trigger record times (s)
    changes: list[tuple[str, bytes | None]] = field(default_factory=list)  # for the local store
    # back-pressure: the first fragment offset not handed over (read again after the pause)
    held_from: int | None = None


class PartitionTask:
    """Partition p's Assembler, transactional producer and consumed positions."""

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
        self.roles = {self.topics.fragments: "fragments", self.topics.control: "control"}
        self._new_assembler = new_assembler
        self.assembler: Assembler = new_assembler()
        self.producer: AIOKafkaProducer | None = None
        self.state = TaskState.PREPARING
        self.expected: dict[TopicPartition, int] = {}
        self.ready_seq = 0  # the manager's sequence number when this task last became ready
        self.last_tick = 0.0
        # the expiry fence (see ``build``): when the next tick may run, and the inputs' committed
        # end offsets read at or after that time, which must be applied before it does
        self.tick_fence: TickFence | None = None
        self.input_partitions = 0  # partition count of the inputs, known once prepared
        # changelog offset after everything this task's Assembler reflects (None: unknown), and
        # whether the Assembler holds no change that is not committed (it may then be kept)
        self.changelog_next: int | None = None
        self.clean = False
        self.warm: tuple[Assembler, int] | None = None  # (Assembler, changelog_next) to keep
        self.restore_kind = "full"
        self._traces: OrderedDict[str, str] = OrderedDict()
        self.store: StateStore | None = None  # the local store (PROCESSOR_STATE_DIR), if any
        self.store_records = 0  # records loaded from the local store by the last prepare
        # back-pressure (see the module docstring): fragments are paused until control is
        # applied up to this offset, or until no call waits for control any more
        limits = settings.limits
        self.hold_at = max(1, min(limits.max_open_buffers_per_tenant, limits.max_open_buffers) // 2)
        self.fragments_paused_until: int | None = None
        # the last commit failed after its EndTxn was sent: the next fence waits for the
        # coordinator to decide that transaction (hanging.decided_previous). A new task does
        # not know how its partition's last owner (another worker, or this one before the
        # rebalance) ended, so its first fence waits too
        self.in_doubt = True
        # what the last unfinished fence read of the transaction before it (hanging.across_retries)
        self.fenced_before: hanging.Previous | None = None
        # the sweep for commit markers the coordinator skipped (sweep_skipped)
        self.sweeps = hanging.SweepSchedule()

    @property
    def transactional_id(self) -> str:
        return self.settings.transactional_id(self.partition)

    # ------------------------------------------------------------------ prepare / close

    async def prepare(self, consumer: Any) -> RestoreResult:
        """Fence, restore, seek (see the module docstring). Raises on failure or timeout."""
        s = self.settings
        self.state = TaskState.PREPARING
        self.fragments_paused_until = None  # the worker resumes the partition once ready
        await self.close_producer()
        # The fence, bounded: aiokafka retries InitProducerId and waits for metadata without
        # an end of its own, and a whole-cluster restart once held a partition here, silent,
        # for 325 s (chaos seed 4 on three brokers); past the bound the preparation fails with
        # a logged cause and is tried again with a new producer and fresh lookups.
        limit = 2 * s.request_timeout_ms / 1000
        producer: AIOKafkaProducer | None = None
        phase = "reading the previous transaction's state"  # named by a timeout: its diagnosis
        try:
            async with asyncio.timeout(limit):
                # how the coordinator left this id's last transaction, before InitProducerId
                # forgets it
                previous = await hanging.decided_previous(
                    consumer._client,
                    self.transactional_id,
                    in_doubt=self.in_doubt,
                    bound=s.transaction_timeout_ms / 1000 + _COORDINATOR_ABORT_INTERVAL_S,
                )
                self.in_doubt = False  # decided: what it says of the last transaction is final
                # a try whose InitProducerId went through unanswered left the id Empty
                previous = hanging.across_retries(previous, self.fenced_before)
                self.fenced_before = previous  # until the hanging ones are ended
                # a commit the coordinator made without a marker here, which we may not
                # write: held here, before InitProducerId makes the coordinator forget it
                phase = "checking for a commit we may not write"
                await hanging.hold_before_fence(
                    consumer._client,
                    previous=previous,
                    transactional_id=self.transactional_id,
                    partitions=await self._output_partitions(consumer._client),
                    owner="worker",
                    bootstrap=s.bootstrap_servers,
                )
                producer = AIOKafkaProducer(
                    transactional_id=self.transactional_id,
                    partitioner=default_partitioner,
                    **transaction.producer_kwargs(
                        s, client_id=f"{s.client_id}-txn-{self.partition}"
                    ),
                )
                phase = "InitProducerId"
                await producer.start()  # InitProducerId: fences older producers of this id
                phase = "ending hanging transactions"
                await self._end_hanging(producer, previous)  # before it writes anything
                self.fenced_before = None
        except BaseException as exc:
            if producer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.stop(), 5)
            if isinstance(exc, TimeoutError):
                raise KafkaTimeoutError(
                    f"fencing partition {self.partition} took over {limit:.0f} s ({phase})"
                ) from None
            raise
        self.producer = producer
        warm, self.warm = self.warm, None  # one try: a retry restores in full
        self.clean = False
        store = self._open_store()
        checkpoint: int | None = None
        if store is not None:
            try:
                checkpoint = store.checkpoint()
            except StoreCorrupt as exc:
                store = self._replace_store(store, exc)
        pending: list[tuple[str, bytes | None]] = []

        def sink(key: str, value: bytes | None) -> None:
            pending.append((key, value))
            if store is not None and len(pending) >= 10_000:
                store.apply(pending, None)  # no checkpoint yet: replaying the tail is idempotent
                pending.clear()

        result: RestoreResult | None = None
        self.store_records = 0
        if warm is not None and store is not None and checkpoint != warm[1]:
            warm = None  # the store fell behind (a failed write): continue from the store instead
        if warm is not None:
            assembler, start = warm
            with contextlib.suppress(RestoreGap):
                result = await restore_partition(
                    assembler,
                    self.topics.changelog,
                    self.partition,
                    s,
                    timeout=s.restore_timeout_seconds,
                    start=start,
                    sink=sink if store is not None else None,
                )
                self.restore_kind = "tail"
            if result is None and store is not None:
                store.clear()  # the kept Assembler and its store cannot be continued
                checkpoint = None
        if result is None and store is not None and checkpoint is not None:
            try:
                assembler, result = await self._restore_from_store(store, checkpoint, sink)
            except StoreCorrupt as exc:  # never a short load: what the scan read is dropped
                store = self._replace_store(store, exc)
                pending.clear()
                result = None
        if result is None:
            pending.clear()
            if store is not None:
                try:
                    store.clear()
                except Exception as exc:  # a store RocksDB refuses to write: start a new one
                    store = self._replace_store(store, StoreCorrupt(type(exc).__name__))
            assembler = self._new_assembler()
            result = await restore_partition(
                assembler,
                self.topics.changelog,
                self.partition,
                s,
                timeout=s.restore_timeout_seconds,
                sink=sink if store is not None else None,
            )
            self.restore_kind = "full"
        if store is not None:
            store.apply(pending, result.end_offset)
            pending.clear()
        self.assembler = assembler
        self.changelog_next = result.end_offset
        self.input_partitions = self._input_partitions(consumer)
        for tp in self.tps:
            committed = await consumer.committed(tp)
            if committed is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)
            self.expected[tp] = await consumer.position(tp)
        self._traces.clear()
        self.last_tick = 0.0
        self.tick_fence = None
        self.clean = True
        return result

    def _input_partitions(self, consumer: Any) -> int:
        """The inputs' partition count, from the consumer's metadata, for the misrouting check
        (:meth:`_misplaced`). Metadata refreshed while a topic reported an error (a leader
        moving) lacks the topic: the preparation then fails and is tried again, rather than
        accept records without knowing their home partition."""
        known = consumer.partitions_for_topic(self.topics.fragments) or set()
        if self.partition not in known:
            raise KafkaTimeoutError(
                f"partition {self.partition}: the partitions of {self.topics.fragments} are not "
                "in the consumer's metadata yet"
            )
        return len(known)

    async def sweep_skipped(self, now: float) -> None:
        """Between two transactions: COMMIT what the coordinator committed for us without a
        marker on an output partition (:func:`~processor.runtime.hanging.end_skipped_commits`),
        when :attr:`sweeps` says it is due (bounded; one that fails is tried again later)."""
        if self.producer is None:
            return
        await hanging.sweep(
            self.producer,
            self.sweeps,
            now,
            transactional_id=self.transactional_id,
            topics=sorted({self.topics.output(kind) for kind in OUTPUT_TOPIC.values()}),
            also=[TopicPartition(self.topics.changelog, self.partition)],
            owner="worker",
            partition=self.partition,
        )

    async def _output_partitions(self, client: Any) -> list[TopicPartition]:
        """Every partition of the output topics (records are routed by key) and changelog
        partition p: where this task's transactions write."""
        outputs = sorted({self.topics.output(kind) for kind in OUTPUT_TOPIC.values()})
        partitions = await hanging.partitions_of(client, outputs)
        partitions.append(TopicPartition(self.topics.changelog, self.partition))
        return partitions

    async def _end_hanging(
        self, producer: AIOKafkaProducer, previous: hanging.Previous | None
    ) -> None:
        """End what the coordinator left open of this producer id on the task's outputs.

        ``InitProducerId`` completed the id's previous transaction, but a coordinator that could
        not reach a leader completes an abort without that partition's marker, and our next
        commit marker there would make the aborted records visible (:mod:`.hanging`). Every
        partition of the output topics (records are routed by key) and changelog partition p.
        Raises :class:`~processor.runtime.hanging.TransactionHeld` when it may not."""
        await hanging.end_own_hanging(
            producer.client,
            producer_id=producer._txn_manager.producer_id,
            transactional_id=self.transactional_id,
            partitions=await self._output_partitions(producer.client),
            owner="worker",
            bootstrap=self.settings.bootstrap_servers,
            previous=previous,
        )

    def _open_store(self) -> StateStore | None:
        """This partition's local store, opened once (None without ``PROCESSOR_STATE_DIR``)."""
        if self.store is not None or self.settings.state_dir is None:
            return self.store
        path = (
            Path(self.settings.state_dir)
            / self.settings.application_id
            / (f"{self.topics.changelog}-{self.partition}")
        )
        identity = {"changelog": self.topics.changelog, "partition": self.partition}
        cache = self.settings.state_cache_mb * 1024 * 1024
        store, rebuilt = RocksStore.open_or_rebuild(path, identity, cache_bytes=cache)
        if rebuilt is not None:
            log.warning(
                "local state store unusable; rebuilt from the changelog",
                extra=fields(partition=self.partition, reason=rebuilt),
            )
        self.store = store
        return store

    def _replace_store(self, store: StateStore, exc: StoreCorrupt) -> StateStore | None:
        """A damaged store: destroy it and open an empty one (the caller restores in full)."""
        log.error(
            "local state store damaged; rebuilding in full from the changelog",
            extra=fields(partition=self.partition, reason=str(exc)),
        )
        metrics.STATE_STORE_REBUILDS.inc()
        store.destroy()
        self.store = None
        return self._open_store()

    async def _restore_from_store(
        self, store: StateStore, checkpoint: int, sink: Callable[[str, bytes | None], None]
    ) -> tuple[Assembler, RestoreResult | None]:
        """Load the local store, then apply the changelog tail after its checkpoint.

        ``(assembler, None)`` when the checkpoint cannot be continued (beyond the changelog's
        end: newer than what is committed, or before its beginning): restore in full.
        ``StoreCorrupt`` when the store cannot be read whole and exactly (a read or checksum
        error, a key that does not decode, a record the Assembler cannot read back, records
        that do not add up to the store's tally): the caller restores in full.
        """
        assembler = self._new_assembler()
        loaded = 0
        for key, value in store.scan():
            loaded += 1
            problem = assembler.restore(key, value)
            if problem is not None:  # only readable records are ever written to the store
                raise StoreCorrupt(f"record {loaded}: {problem}")
            collector.restored(loaded)
            if loaded % 2000 == 0:
                await asyncio.sleep(0)  # heartbeats and other partitions go on meanwhile
        try:
            result = await restore_partition(
                assembler,
                self.topics.changelog,
                self.partition,
                self.settings,
                timeout=self.settings.restore_timeout_seconds,
                start=checkpoint,
                sink=sink,
            )
        except RestoreGap:
            log.warning(
                "local state store checkpoint outside the changelog; restoring in full",
                extra=fields(partition=self.partition, checkpoint=checkpoint),
            )
            return assembler, None
        self.store_records = loaded
        self.restore_kind = "checkpoint"
        return assembler, result

    def _store_committed(self, changes: list[tuple[str, bytes | None]], checkpoint: int) -> None:
        """After the commit only: the store never holds a write of an aborted transaction."""
        if self.store is None:
            return
        try:
            self.store.apply(changes, checkpoint)
        except (
            Exception
        ) as exc:  # a full or failing disk: the batch is atomic, nothing half-written
            log.error(
                "local state store write failed; it continues from its checkpoint",
                extra=fields(partition=self.partition, error=type(exc).__name__),
            )
            store, self.store = self.store, None  # its checkpoint stays where its data is
            with contextlib.suppress(Exception):
                store.close()

    async def close_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), 10)

    async def close(self) -> None:
        self.state = TaskState.CLOSED
        await self.close_producer()
        store, self.store = self.store, None
        if store is not None:
            store.close()

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
        """Feed one batch (topic role → records), then the optional tick, to the Assembler.

        ``barrier`` is control's committed end offset read after this batch was fetched (needed
        when the batch holds fragments); ``control_position`` the consumer's position on
        control once the batch's control records are handed over (see the module docstring),
        and ``fragments_position`` the same on fragments: past the batch's last record, a
        position has stepped over transaction markers only (of a transactional writer), which
        the step's offsets then pass too, so the committed offset and the lag reach the end.
        The tick comes after the records, at ``tick.at`` (not ``now``), and the caller asks for
        it only once both inputs are applied up to the end offsets ``tick.ends`` read at or after
        ``tick.at`` (:meth:`caught_up`): expiry must never overtake a record written before the
        time it judges by. An idle call fails only if no fragment of it was written before its
        idle time ran out, an unbound call only if its binding was not in control before its
        wait ran out (``Assembler.tick``'s ``control_end`` is control's end in the fence), and
        so on for the response and confirmation waits. A tick that did not run (held
        fragments) keeps its fence for the next batch.
        """
        step = Step()
        self.clean = False  # until this step is committed (or turns out empty)
        control, fragments = records.get("control", ()), records.get("fragments", ())
        merged: Iterable[ConsumerRecord] = (
            heapq.merge(control, fragments, key=_timestamp)
            if control and fragments
            else control or fragments
        )
        tps = {self.topics.fragments: self.fragments_tp, self.topics.control: self.control_tp}
        for record in merged:
            role = self.roles[record.topic]
            tp = tps[record.topic]  # this task's partition: the worker routes by partition
            if record.offset < self.expected.get(tp, 0):
                step.skipped[role] = step.skipped.get(role, 0) + 1
                continue
            if role == "fragments" and barrier is not None:
                if step.held_from is None and self.assembler.waiting_for_control >= self.hold_at:
                    step.held_from = record.offset  # this one and the rest wait for control
                if step.held_from is not None:
                    continue
            step.plan.offsets[tp] = record.offset + 1
            step.consumed[role] = step.consumed.get(role, 0) + 1
            trace = traceparent_of(record.headers)
            if trace is not None and role == "fragments" and record.key:
                self._remember(record.key.decode("utf-8", "replace"), trace)
            for out in self._handle(record, role, now, barrier):
                self._emit(step, out, trace, record.timestamp / 1000.0)
            if role == "control":
                for out in self.assembler.advance_control(record.offset + 1, now):
                    self._emit(step, out, None, record.timestamp / 1000.0)
        if control_position is not None:
            for out in self.assembler.advance_control(control_position, now):
                self._emit(step, out, None, now)
        passed: list[tuple[TopicPartition, int | None]] = [(self.control_tp, control_position)]
        if step.held_from is None:  # else fragments are read again from there
            passed.append((self.fragments_tp, fragments_position))
        for tp, position in passed:
            if position is not None and position > step.plan.offsets.get(
                tp, self.expected.get(tp, 0)
            ):
                step.plan.offsets[tp] = position
        if tick is not None and step.held_from is None:  # held fragments may hold what a
            # buffer awaits
            self.last_tick = now
            self.tick_fence = None
            for out in self.assembler.tick(tick.at, control_end=tick.ends.get(self.control_tp)):
                self._emit(step, out, None, None)
        for change in self.assembler.drain_changes():
            step.plan.changelog.append(encode_change(change, self.topics.changelog, self.partition))
            step.changes.append((change.key, change.value))
        self.clean = step.plan.empty
        return step

    def _handle(
        self, record: ConsumerRecord, role: str, now: float, barrier: int | None
    ) -> list[OutputRecord]:
        payload: bytes = record.value or b""
        source = RecordSource(record.topic, record.partition, record.offset)
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:  # the Assembler dead-letters it, with the parse error
            data = _UNPARSED
        problem = None if data is _UNPARSED else self._misplaced(data, role)
        if problem is not None:
            reason, detail = problem
            return [self.assembler.dead_letter(payload, source, reason, detail, now)]
        try:
            written = record.timestamp / 1000.0  # control uses LogAppendTime: the broker's clock
            if data is _UNPARSED:
                return self.assembler.handle(
                    payload, now, source=source, record_time=written, barrier=barrier
                )
            return self.assembler.handle(
                payload,
                now,
                source=source,
                parsed=data,
                record_time=written,
                barrier=barrier if role == "fragments" else None,
            )
        except _NOT_A_RECORDS:
            raise
        except BaseException as exc:  # a core bug (or an extension's panic) must not stop it
            # no traceback: an exception message from the core could quote argument text
            log.error(
                "assembler failed on a record; dead-lettered",
                extra=fields(
                    partition=self.partition,
                    topic=role,
                    offset=record.offset,
                    error=type(exc).__name__,
                ),
            )
            detail = f"internal error {type(exc).__name__}"
            return [self.assembler.dead_letter(payload, source, "internal_error", detail, now)]

    def _misplaced(self, data: object, role: str) -> tuple[str, str] | None:
        """A decodable record (parsed) on the wrong topic or partition: (reason, detail), else
        None. Undecodable records are the Assembler's to dead-letter, with their own reasons.
        """
        if not isinstance(data, dict):
            return None
        kind = data.get("type")
        if not isinstance(kind, str) or kind not in FRAGMENT_TYPES | CONTROL_TYPES:
            return None
        if kind not in _ALLOWED[role]:
            return "wrong_topic", f"a {kind} record is not accepted on the {role} topic"
        if self.input_partitions:
            detail = misrouted(data, self.partition, self.input_partitions)
            if detail is not None:
                return "misrouted", detail
        return None

    def _emit(
        self, step: Step, out: OutputRecord, trace: str | None, trigger_time: float | None
    ) -> None:
        if trace is None and not isinstance(out, Audit | DeadLetter):
            trace = self._traces.get(turn_key(out.tenant, out.turn_id))
        if isinstance(out, Ledger | Dispatch):
            trace = self._trace_decision(out, trace)
        step.plan.outputs.append(encode_output(out, self.topics, trace))
        role = output_role(out)
        step.outputs[role] = step.outputs.get(role, 0) + 1
        if isinstance(out, Dispatch) and trigger_time is not None:
            step.dispatch_triggers.append(trigger_time)
        elif isinstance(out, Ledger):
            step.terminal.append((out.state, out.terminal_reason or "none"))
        elif isinstance(out, DeadLetter):
            step.deadletters.append(out.reason)
        elif isinstance(out, Audit):
            step.commands.append((out.command_type, out.outcome.value, out.rejection or "none"))

    def passed_markers(self, positions: Mapping[TopicPartition, int | None]) -> bool:
        """Whether the consumer stepped past offsets with no record to apply (transaction
        markers) beyond ``expected``: a step then commits the new offsets alone."""
        return any(
            (position := positions.get(tp)) is not None and position > self.expected.get(tp, 0)
            for tp in self.tps
        )

    def caught_up(
        self,
        end_offsets: Mapping[TopicPartition, int | None],
        fed: Mapping[str, Sequence[ConsumerRecord]],
        positions: Mapping[TopicPartition, int | None] | None = None,
    ) -> bool:
        """Whether both inputs are read up to ``end_offsets`` once ``fed`` is applied (for the
        tick: ``end_offsets`` are its fence's). ``positions``, the consumer's, count too: past
        the last record it also steps over transaction markers, which hold an offset each, so
        an input written by a transactional producer still reaches its end (the last record's
        offset + 1 stops one short of it, for ever)."""
        for tp in self.tps:
            end = end_offsets.get(tp)
            if end is None:
                return False
            records = fed.get(self.roles[tp.topic])
            position = records[-1].offset + 1 if records else self.expected.get(tp, 0)
            position = max(position, (positions or {}).get(tp) or 0)
            if position < end:
                return False
        return True

    def _trace_decision(self, out: Ledger | Dispatch, trace: str | None) -> str | None:
        """The span of an assembly decision (a ledger record: dispatched, failed, …) or of a
        dispatch (a ``send`` to the dispatch topic, whose context the dispatch record carries on
        to the executor). Without OpenTelemetry, or with nothing recording spans: no span,
        ``trace`` unchanged (a non-recording span would only carry ``trace`` on)."""
        if not tracing.recording():
            return trace if isinstance(out, Ledger) else valid_traceparent(trace)
        if isinstance(out, Ledger):
            attributes: dict[str, tracing.AttributeValue] = {
                "toolcall.tool": out.tool or "",
                "toolcall.state": out.state,
                "toolcall.terminal_reason": out.terminal_reason or "",
                "toolcall.dispatch_decision": out.dispatch_decision,
                "toolcall.fragment_count": out.fragment_count,
                "messaging.destination.partition.id": str(self.partition),
            }
            with tracing.span(
                f"assemble {out.tool or 'call'}", "internal", attributes, traceparent=trace
            ):
                return trace
        topic = self.topics.dispatch
        attributes = tracing.kafka_attributes(topic, "send", key=turn_key(out.tenant, out.turn_id))
        attributes.update({"toolcall.tool": out.tool, "toolcall.dispatch_id": out.dispatch_id})
        with tracing.span(f"send {topic}", "producer", attributes, traceparent=trace):
            return valid_traceparent(tracing.current_traceparent(trace))

    def _remember(self, key: str, trace: str) -> None:
        self._traces[key] = trace
        self._traces.move_to_end(key)
        while len(self._traces) > _MAX_TRACES:
            self._traces.popitem(last=False)

    async def commit(self, step: Step, *, timeout: float) -> float:
        """Commit the step's plan in one transaction; advance ``expected`` on success."""
        if self.producer is None:
            raise transaction.TransactionFailed("error", "no producer (partition not prepared)")
        committed = await transaction.commit(
            self.producer, step.plan, group_id=self.settings.group_id, timeout=timeout
        )
        self.expected.update(step.plan.offsets)
        self.sweeps.committed = True
        if committed.changelog_next is not None:
            self.changelog_next = committed.changelog_next
            self._store_committed(step.changes, committed.changelog_next)
        self.clean = True
        return committed.seconds
