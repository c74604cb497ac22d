"""The worker: one member of the assembler consumer group, driving one Assembler per partition.

The loop, in the spirit of h11's example client (the Assembler is the protocol, this is the IO)::

    start:  load the registry and keyring, check co-partitioning, start the health endpoint,
            subscribe to fragments + control (range assignor, manual offsets, read_committed)
    loop:   garbage collection policy: settle once an assignment is prepared, else age the
            survivors of young collections at most once a second (:mod:`.collector`)
            records = getmany(poll timeout, batch size)             (or stop on SIGTERM)
                      + the fetch that starts then, waited for up to fetch_topup_ms
            with the processing lock:
                barriers = control's committed end offsets, read now (after the fetch), for
                           the partitions whose batch holds fragments or whose tick is due
                           (one ListOffsets, on connections of its own)
                per ready partition: build the step (records in order with the barrier,
                           control applied up to the consumer's position, tick when due) and
                           start its transaction, which runs while the next step is built;
                           pause its fragments if the step held them back (back-pressure)
                await the transactions; reset a partition whose transaction failed
                (remembering a commit in doubt for its next fence); then, at most every
                30 s after a commit, a sweep for commit markers the coordinator skipped
                resume the fragments whose calls no longer wait for control
            every lag interval: export lag and buffer gauges
    stop:   finish the current batch, close every partition's producer, leave the group

Records fetched before a partition's latest preparation (its seek) are dropped and the consumer
re-seeks to the partition's next expected offsets, so nothing is skipped or processed twice.
Time: ``now = time.time()`` once per loop iteration, given to the Assembler (which has no clock).

Why one module: the :class:`Worker` is the loop drawn above, and its methods are that loop's
steps over one shared state (the consumer, the partition tasks, the processing lock, the fatal
error); read in one place, the order of a batch's steps is the loop's order. What the loop
calls lives apart: assignment (:mod:`.assignment`), a partition's work (:mod:`.partition`),
transactions (:mod:`.transaction`), the collector policy (:mod:`.collector`) and reachability
(:mod:`.reachability`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any, Final

from aiokafka import AIOKafkaConsumer
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.core.assembler import Assembler
from processor.core.authn import CommandVerifier
from processor.core.registry import Registry
from processor.exits import Unavailable
from processor.kafka.clients import (
    admin_client,
    committed_reader,
    ignore_fenced_leftovers,
    stop_consumer,
)
from processor.kafka.reachability import BrokerWatch, wait_for_broker
from processor.kafka.topics import (
    check_copartitioning,
    describe_topics,
    smallest_message_limit,
)
from processor.observability import metrics
from processor.observability.health import HealthServer
from processor.observability.logging import fields
from processor.runtime import collector
from processor.runtime.assignment import PartitionManager
from processor.runtime.partition import PartitionTask, Step, TaskState, TickFence
from processor.runtime.transaction import TransactionFailed
from processor.settings import Settings

log = logging.getLogger(__name__)

_STOP_GRACE_S: Final = 30.0


class Worker:
    """One group member. ``await Worker(settings, registry, verifier).run()`` until stopped."""

    def __init__(self, settings: Settings, registry: Registry, verifier: CommandVerifier) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.registry = registry
        self.verifier = verifier  # never ``verifier or ...``: an empty keyring is falsy
        self.limits = settings.core_limits()
        self.manager = PartitionManager(settings, self.new_assembler, on_fatal=self._fatal)
        self._stop = asyncio.Event()
        self._fatal_error: BaseException | None = None
        self._step_started: float | None = None
        self._last_lag = 0.0
        self.health: HealthServer | None = None
        self.broker = BrokerWatch(settings, on_lost=self._fatal)
        self._offsets: AIOKafkaConsumer | None = None  # the barrier's own connections
        self.collector = collector.install(settings.gc_freeze_interval_seconds)
        # counted when scraped: the count walks every frozen object (9 ms a million here),
        # too dear for each aging, once a second
        metrics.GC_FROZEN_OBJECTS.set_function(self.collector.frozen)
        self._settled_seq = -1  # the manager's seq when the collector last settled

    def new_assembler(self) -> Assembler:
        return Assembler(self.registry, self.limits, verifier=self.verifier)

    def stop(self) -> None:
        """Ask the loop to finish its batch and leave the group (signal-safe)."""
        self._stop.set()

    def _fatal(self, exc: BaseException) -> None:
        log.error("fatal worker error", extra=fields(error=type(exc).__name__, detail=str(exc)))
        self._fatal_error = exc
        self._stop.set()

    # ------------------------------------------------------------------ probes

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        stuck = (
            self._step_started is not None
            and time.monotonic() - self._step_started > 3 * self.settings.commit_timeout_seconds
        )
        ok = self._fatal_error is None and not stuck
        return ok, {"fatal": self._fatal_error is not None, "step_stuck": stuck}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        ready, detail = self.manager.readiness()
        if not self.broker.reachable:
            return False, {**detail, "kafka": "unreachable"}
        return ready, detail

    # ------------------------------------------------------------------ run

    async def run(self) -> int:
        """Run until stopped; 0 after a graceful stop, 1 after a fatal error. An unreachable
        broker (at start-up, or lost for ``startup_timeout_seconds``) raises ``Unavailable``."""
        if self.settings.metrics_port is not None:  # live while waiting for the broker, not ready
            self.health = HealthServer(
                self.settings.metrics_host,
                self.settings.metrics_port,
                live=self.liveness,
                ready=self.readiness,
            )
            await self.health.start()
        try:
            await wait_for_broker(self.settings)
            await self._check_topics()
        except BaseException:
            if self.health is not None:
                await self.health.stop()
            raise
        consumer = self._consumer()
        self._offsets = self._offsets_reader()
        self.manager.consumer = consumer
        consumer.subscribe([self.topics.fragments, self.topics.control], listener=self.manager)
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(ignore_fenced_leftovers)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop)
        watch = asyncio.create_task(self.broker.run())
        try:
            await self._offsets.start()
            await consumer.start()
            self._settle()  # modules, registry, clients: long-lived from here on
            log.info(
                "worker started",
                extra=fields(group_id=self.settings.group_id, topics=[*self.topics.all().values()]),
            )
            await self._loop(consumer)
        finally:
            watch.cancel()
            await self._shutdown(consumer)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(stop_consumer(self._offsets), 10)
        if isinstance(self._fatal_error, Unavailable):
            raise self._fatal_error
        return 0 if self._fatal_error is None else 1

    async def _check_topics(self) -> None:
        async with admin_client(self.settings) as admin:
            states = await describe_topics(self.settings, admin)
        check_copartitioning(states)
        self._fit_batches(smallest_message_limit(states))

    def _fit_batches(self, limit: int | None) -> None:
        """Keep the transactions' record batches within what the output topics accept: a topic
        made elsewhere may take less than ``producer_batch_bytes`` (1 MiB by default), and a
        batch above its ``max.message.bytes`` would fail the transaction every time."""
        s = self.settings
        if limit is None or limit >= min(s.producer_batch_bytes, s.max_message_bytes):
            return
        log.warning(
            "record batches capped at the output topics' max.message.bytes",
            extra=fields(producer_batch_bytes=s.producer_batch_bytes, max_message_bytes=limit),
        )
        self.settings = s.model_copy(update={"producer_batch_bytes": limit})
        self.manager.settings = self.settings  # the partition tasks' producers are made from it

    def _consumer(self) -> AIOKafkaConsumer:
        s = self.settings
        return AIOKafkaConsumer(
            group_id=s.group_id,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            partition_assignment_strategy=(RangePartitionAssignor,),
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            max_poll_interval_ms=s.max_poll_interval_ms,
            max_poll_records=s.batch_max_records,
            max_partition_fetch_bytes=max(1024 * 1024, s.max_message_bytes),
            # a fetch of caught-up partitions (control, mostly) is held by the broker this long,
            # and aiokafka sends no other fetch to that broker meanwhile: at the default 500 ms
            # a backlog of fragments was read at ~1,000 records/s (bench_worker_kafka.py)
            fetch_max_wait_ms=s.poll_timeout_ms,
            **s.kafka_client_kwargs(),
        )

    def _offsets_reader(self) -> AIOKafkaConsumer:
        """A consumer that only answers ``end_offsets`` (no group, no subscription) for the
        barrier. The group consumer's own connection would queue the ListOffsets behind its
        pending fetch (a broker answers a connection's requests in order): the barrier took
        ~30 ms a batch that way, a third of the worker's time on a backlog."""
        return committed_reader(self.settings, client_id=f"{self.settings.client_id}-barrier")

    async def _loop(self, consumer: AIOKafkaConsumer) -> None:
        stop_wait = asyncio.create_task(self._stop.wait())
        try:
            while not self._stop.is_set():
                self._collect()
                fetch_seq = self.manager.seq
                fetch = asyncio.create_task(
                    consumer.getmany(
                        timeout_ms=self.settings.poll_timeout_ms,
                        max_records=self.settings.batch_max_records,
                    )
                )
                await asyncio.wait({fetch, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not fetch.done():
                    fetch.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await fetch
                    break  # stopping; nothing was handed to us
                try:
                    batch = await self._top_up(consumer, fetch.result())
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    log.warning("poll failed; retrying", extra=fields(error=type(exc).__name__))
                    await asyncio.sleep(1.0)
                    continue
                async with self.manager.lock:
                    self._step_started = time.monotonic()
                    try:
                        await self._process(consumer, batch, fetch_seq)
                    finally:
                        self._step_started = None
                self._export_gauges(consumer)
        finally:
            stop_wait.cancel()

    async def _top_up(
        self, consumer: AIOKafkaConsumer, batch: Mapping[TopicPartition, Sequence[ConsumerRecord]]
    ) -> Mapping[TopicPartition, Sequence[ConsumerRecord]]:
        """Add what the consumer is fetching now (``fetch_topup_ms``) to a batch it handed over.

        aiokafka sends a broker no new fetch while records of its last fetch wait to be handed
        out, so that fetch returned early in the previous iteration with only what had arrived
        by then; the rest arrived meanwhile, and the fetch that carries it starts only now. The
        records of that fetch would otherwise wait for the next iteration (measured at
        1,000 calls/s: a terminal waited 43 ms at the median for the iteration that read it,
        17-20 ms with a 3 ms top-up). A full or empty batch is handed on as it is.
        """
        wait = self.settings.fetch_topup_ms
        room = self.settings.batch_max_records - sum(len(rs) for rs in batch.values())
        if not wait or not batch or room <= 0:
            return batch
        more = await consumer.getmany(timeout_ms=wait, max_records=room)
        return merge_fetched(batch, more)

    # ------------------------------------------------------------------ garbage collection

    def _collect(self) -> None:
        """The collector's policy (:mod:`.collector`): settle once every partition of the last
        assignment is prepared (the restored state is long-lived), else age the survivors."""
        manager = self.manager
        if manager.seq != self._settled_seq and len(manager.ready_tasks()) == len(manager.tasks):
            self._settle()
        else:
            self.collector.age(time.monotonic())

    def _settle(self) -> None:
        self._settled_seq = self.manager.seq
        seconds = self.collector.settle(time.monotonic())
        if self.collector.enabled:
            frozen = self.collector.frozen()
            log.info(
                "garbage collector settled",
                extra=fields(frozen_objects=frozen, seconds=round(seconds, 4)),
            )

    # ------------------------------------------------------------------ one iteration

    async def _process(
        self,
        consumer: AIOKafkaConsumer,
        batch: Mapping[TopicPartition, Sequence[ConsumerRecord]],
        fetch_seq: int,
    ) -> None:
        now = time.time()
        by_partition: dict[int, dict[str, list[ConsumerRecord]]] = defaultdict(dict)
        roles = {self.topics.fragments: "fragments", self.topics.control: "control"}
        for tp, fetched in batch.items():
            if fetched:
                by_partition[tp.partition][roles[tp.topic]] = list(fetched)
        commits: list[asyncio.Task[None]] = []
        tasks = self.manager.ready_tasks()
        for task in tasks:
            if task.partition in by_partition and task.ready_seq > fetch_seq:
                # fetched before the task's latest seek: re-read from its expected offsets
                self._drop(consumer, task, by_partition.pop(task.partition))
        interval = self.settings.tick_interval_seconds
        # a tick due now takes a fence: both inputs' committed ends, read below (after `now`)
        due = {
            task.partition
            for task in tasks
            if task.progress.tick_fence is None and now - task.progress.last_tick >= interval
        }
        ends = await self._committed_ends(consumer, tasks, by_partition, due)
        for task in tasks:
            records = by_partition.pop(task.partition, {})
            barrier = ends.get(task.control_tp)
            if "fragments" in records and barrier is None:
                self._drop(consumer, task, records)  # no barrier, no fragments: retry them
                records = {}
            if task.partition in due and all(tp in ends for tp in task.tps):
                task.progress.tick_fence = TickFence(now, {tp: ends[tp] for tp in task.tps})
            # expire only once both inputs are applied up to the fence: a backlog, or records
            # written since the last fetch, may hold what a buffer awaits
            positions = {tp: await _position(consumer, tp) for tp in task.tps}
            fence = task.progress.tick_fence
            tick = fence if fence and task.caught_up(fence.ends, records, positions) else None
            if (
                not records
                and tick is None
                and not task.assembler.holds_for_control
                and not task.passed_markers(positions)
            ):
                continue
            step = task.build(
                records,
                now,
                tick=tick,
                barrier=barrier,
                control_position=positions[task.control_tp],
                fragments_position=positions[task.fragments_tp],
            )
            if step.held_from is not None and barrier is not None:
                self._pause_fragments(consumer, task, step.held_from, barrier)
            if not step.plan.empty:
                # each partition has its own transaction: commit it while the next is built
                commits.append(asyncio.create_task(self._commit(task, step)))
                await asyncio.sleep(0)  # and let the earlier ones take their next step
        for leftover in by_partition.values():  # partitions that are not ready (or not ours)
            for role, rs in leftover.items():
                metrics.RECORDS_SKIPPED.labels(role).inc(len(rs))
        if commits:
            await asyncio.gather(*commits)
        # between transactions: what the coordinator committed without a marker (bounded)
        clock = time.monotonic()
        sweeping = [t for t in self.manager.ready_tasks() if t.fence.sweeps.due(clock)]
        if sweeping:
            await asyncio.gather(*(t.fence.sweep_skipped(clock) for t in sweeping))
        self._resume_fragments(consumer, tasks)

    def _pause_fragments(
        self, consumer: AIOKafkaConsumer, task: PartitionTask, held_from: int, barrier: int
    ) -> None:
        """Back-pressure (:mod:`.partition`): read fragments again from ``held_from`` once
        control is applied up to ``barrier``; control keeps flowing meanwhile."""
        consumer.seek(task.fragments_tp, held_from)
        if task.fragments_tp not in consumer.paused():
            consumer.pause(task.fragments_tp)
            metrics.FRAGMENTS_PAUSED.labels(str(task.partition)).inc()
            log.info(
                "fragments paused until control catches up",
                extra=fields(
                    partition=task.partition,
                    waiting_calls=task.assembler.waiting_for_control,
                    control_applied=task.assembler.control_position,
                    barrier=barrier,
                ),
            )
        task.progress.fragments_paused_until = max(
            barrier, task.progress.fragments_paused_until or 0
        )

    def _resume_fragments(self, consumer: AIOKafkaConsumer, tasks: Sequence[PartitionTask]) -> None:
        """Resume the paused fragments whose calls no longer wait for control (or that a
        reset left paused: a prepared task starts unpaused)."""
        paused = consumer.paused()
        if not paused:
            return
        for task in tasks:
            until = task.progress.fragments_paused_until
            if until is not None:
                applied = task.assembler.control_position
                if task.assembler.waiting_for_control and (applied is None or applied < until):
                    continue
                task.progress.fragments_paused_until = None
            if task.fragments_tp in paused and task.state is TaskState.READY:
                consumer.resume(task.fragments_tp)

    async def _committed_ends(
        self,
        consumer: AIOKafkaConsumer,
        tasks: Sequence[PartitionTask],
        by_partition: Mapping[int, Mapping[str, Sequence[ConsumerRecord]]],
        ticking: Set[int] = frozenset(),
    ) -> dict[TopicPartition, int]:
        """Committed end offsets read now, in one request: control's of each partition whose
        batch holds fragments (the barrier), and both inputs' of each partition whose tick is
        due (``ticking``: the tick's fence, :class:`~processor.runtime.partition.TickFence`).

        Read after the batch was fetched, so the barrier covers every control record committed
        before any of those fragments was written (the causal rule: see :mod:`.partition`), and
        the fence every record written before the tick's time (each wait the tick ends: see
        ``Assembler.tick``). Empty on failure: the caller then re-reads those fragments later,
        and takes no fence, rather than run without them.
        """
        wanted = [
            tp
            for task in tasks
            for tp in (
                task.tps
                if task.partition in ticking
                else (task.control_tp,)
                if "fragments" in by_partition.get(task.partition, {})
                else ()
            )
        ]
        if not wanted:
            return {}
        reader = self._offsets if self._offsets is not None else consumer
        try:
            ends = await asyncio.wait_for(
                reader.end_offsets(wanted), self.settings.request_timeout_ms / 1000
            )
        except (KafkaError, TimeoutError) as exc:
            log.warning("control barrier unavailable; batch re-read", extra=fields(error=repr(exc)))
            return {}
        return {tp: int(end) for tp, end in ends.items() if tp in wanted}

    def _drop(
        self, consumer: AIOKafkaConsumer, task: PartitionTask, records: Mapping[str, Any]
    ) -> None:
        for role, rs in records.items():
            metrics.RECORDS_SKIPPED.labels(role).inc(len(rs))
        for tp in task.tps:
            with contextlib.suppress(Exception):
                consumer.seek(tp, task.expected[tp])

    async def _commit(self, task: PartitionTask, step: Step) -> None:
        try:
            seconds = await task.commit(step, timeout=self.settings.commit_timeout_seconds)
        except TransactionFailed as exc:
            metrics.TRANSACTION_ABORTS.labels(exc.cause).inc()
            log.warning(
                "transaction failed; rebuilding the partition",
                extra=fields(partition=task.partition, cause=exc.cause, detail=exc.detail),
            )
            task.fence.in_doubt = task.fence.in_doubt or exc.in_doubt
            self.manager.reset(task, exc.cause)
            return
        committed_at = time.time()
        metrics.TRANSACTIONS.inc()
        metrics.TRANSACTION_DURATION.observe(seconds)
        for role, n in step.consumed.items():
            metrics.RECORDS_CONSUMED.labels(role).inc(n)
        for role, n in step.skipped.items():
            metrics.RECORDS_SKIPPED.labels(role).inc(n)
        for role, n in step.outputs.items():
            metrics.OUTPUT_RECORDS.labels(role).inc(n)
        for state, reason in step.terminal:
            metrics.TERMINAL_OUTCOMES.labels(state, reason).inc()
        for reason in step.deadletters:
            metrics.DEADLETTERS.labels(reason).inc()
        for command_type, outcome, rejection in step.commands:
            metrics.CONTROL_COMMANDS.labels(command_type, outcome, rejection).inc()
        for trigger in step.dispatch_triggers:
            metrics.DISPATCH_LATENCY.observe(max(0.0, committed_at - trigger))

    # ------------------------------------------------------------------ gauges

    def _export_gauges(self, consumer: AIOKafkaConsumer) -> None:
        export_state_gauges(self.manager.ready_tasks())
        now = time.monotonic()
        if now - self._last_lag < self.settings.lag_interval_seconds:
            return
        self._last_lag = now
        for task in self.manager.ready_tasks():
            for role, tp in (("fragments", task.fragments_tp), ("control", task.control_tp)):
                with contextlib.suppress(Exception):
                    end = consumer.last_stable_offset(tp)
                    if end is not None and end >= 0:
                        lag = max(0, end - task.expected.get(tp, end))
                        metrics.CONSUMER_LAG.labels(role, str(task.partition)).set(lag)

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self, consumer: AIOKafkaConsumer) -> None:
        log.info("worker stopping")
        try:
            async with asyncio.timeout(_STOP_GRACE_S):
                async with self.manager.lock:
                    await self.manager.close_all()
                await stop_consumer(consumer)  # leaves the group
        except Exception as exc:
            log.warning("unclean shutdown", extra=fields(error=type(exc).__name__))
        if self.health is not None:
            await self.health.stop()
        log.info("worker stopped")


async def _position(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """The consumer's position on ``tp`` (past transaction markers), or None if unknown now."""
    try:
        return int(await asyncio.wait_for(consumer.position(tp), 1.0))
    except Exception:  # not assigned any more, or being reset: try again next batch
        return None


def merge_fetched(
    first: Mapping[TopicPartition, Sequence[ConsumerRecord]],
    then: Mapping[TopicPartition, Sequence[ConsumerRecord]],
) -> dict[TopicPartition, list[ConsumerRecord]]:
    """Two consecutive ``getmany`` results as one: each partition's records in offset order."""
    merged = {tp: list(records) for tp, records in first.items()}
    for tp, records in then.items():
        merged.setdefault(tp, []).extend(records)
    return merged


def export_state_gauges(tasks: Sequence[PartitionTask]) -> None:
    """The gauges of what each partition holds, exported after every iteration: each read must
    cost the same whatever the state's size (``bench/bench_state_scaling.py`` times it)."""
    for task in tasks:
        label = str(task.partition)
        metrics.OPEN_BUFFERS.labels(label).set(task.assembler.open_buffers)
        metrics.BUFFERED_BYTES.labels(label).set(task.assembler.buffered_bytes)


async def run_worker(
    settings: Settings,
    registry: Registry,
    verifier: CommandVerifier,
    *,
    on_started: Callable[[Worker], None] | None = None,
) -> int:
    worker = Worker(settings, registry, verifier)
    if on_started is not None:
        on_started(worker)
    return await worker.run()
