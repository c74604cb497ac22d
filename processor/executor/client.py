"""The executor client: consume ``dispatch``, fence each call, run its handler at most once.

An application embeds :class:`ExecutorClient` with its
:class:`~processor.executor.handlers.Handlers` (or runs ``processor executor run --handlers
module:object``)::

    async with ExecutorClient(settings, handlers, group="bookings", verifier=keyring) as client:
        await client.run()

A poll is always pending; what it returns waits in the backlog
(:mod:`processor.executor.backlog`) until it can be claimed. Per claim round (one dispatch
partition's records decided in offset order; rounds of different partitions run side by side,
:mod:`processor.executor.rounds`; up to ``max_in_flight`` handlers,
``PROCESSOR_EXECUTOR_MAX_IN_FLIGHT``, 64 by default, run at once):

1. Decode each record; a tool this executor has no handler for belongs to another executor group
   and is skipped; a ``dispatch_id`` already in the group's ledger is skipped (never run twice).
   Only as many calls go on as may be claimed: the free slots plus the claim-ahead
   (``PROCESSOR_EXECUTOR_CLAIM_AHEAD``, half the in-flight limit by default) less the calls
   already waiting for a slot; the records after them stay in the backlog.
2. **Fence** (:mod:`processor.executor.fence`, :mod:`processor.executor.barrier`), once for all
   the calls of the round: each control partition they need is read up to its current end
   offset (one barrier read per partition), and each call is checked: its turn not cancelled,
   its response not quarantined, its tool not disabled, its tenant not stopped, the call not
   denied, and a required confirmation present, bound to this digest and the turn's actor, and
   fresh. A refused call's handler never runs.
3. **Claim** (:mod:`processor.executor.ledger`): per dispatch partition, ONE transaction writes a
   ``claimed`` ledger entry for every call that passed, the refusals (ledger entry, result,
   user status), the ends of calls that finished meanwhile, and the offset past the records,
   before anything runs.
4. **Fence again**, right before the handlers start, shared by the calls that start together: a
   cancellation that raced the claims, or came while a call waited for a slot, is still seen
   (the call's end is then a refusal). A claimed call waits for a slot at most until one
   frees (:meth:`Runner.start_waiting <processor.executor.running.Runner.start_waiting>`, as
   soon as a handler ends, without a fetch or a claim in the way).
5. **Run** the handlers side by side (:mod:`processor.executor.inflight`), each with its timeout;
   as they end, their outcomes (``succeeded`` / ``failed``, or ``unknown`` when the handler timed
   out or was stopped) are written together, one transaction per partition,
   ``executor_flush_interval_ms`` (5 ms) after the first of them ended, or with the partition's
   claim round in flight when it ends, plus the transaction (docs/guarantees.md: measured).

Which calls overlap: any two, of different turns or of one turn, on one dispatch partition or
several (calls of one response are independent by every provider's definition of parallel tool
calls), except the calls of one turn of tools registered ``in_order``, which run one at a time
in dispatch order (the rest of their partition waits with them). At most once is kept by the
claim: a claimed call whose outcome was not written (the executor killed in the window above, or
while the call waited for a slot) is reported ``unknown`` by the next owner, never run again; a
release or a stop ends the waiting ones as refusals (``executor_stopped``: they did not run).
A slow or hung handler holds up no other call (its timeout ends it); with nothing claimable the
records stay in the backlog, a partition whose backlog is full is paused on the consumer, and the
loop goes on. A revoke or a stop waits for the partition's running
handlers up to ``executor_release_wait_seconds`` (10 s), then cancels the rest (``unknown``).
While calls run, their control partitions are read every 0.2 s: a call whose turn was stopped
since it started is told (``Call.stop``) and cancelled ``executor_stop_grace_seconds`` later
(:meth:`Runner.tell_stopped <processor.executor.running.Runner.tell_stopped>`).

Results go to ``<prefix>results`` (:class:`~processor.executor.records.ExecutionResult`);
refusals, failures and unknown outcomes also go to ``status`` as what the user may be told. The
``traceparent`` header of the dispatch record is passed to the handler and copied to the outputs.
Nothing here logs, counts or writes argument values.

Where the parts live. The client is composed of parts that take their state explicitly (h11's
``Connection`` pattern), each in a module named for what it owns; a call's arguments can be
followed from the record to the handler through them:

* :class:`~processor.executor.claims.Claimer`: a claim round through steps 1-5 above (skip,
  refuse, claim, start);
* :class:`~processor.executor.fencing.CallGate`: the requirements of a dispatch and the fence,
  after the control barrier (:class:`~processor.executor.barrier.ControlBarrier`);
* :class:`~processor.executor.transactions.PartitionWriter`: the producer of a partition, one
  transaction with the offset; :class:`~processor.executor.outputs.OutputRecords`: the records
  written about a call;
* :class:`~processor.executor.running.Runner`: handlers side by side, their outcomes, the stop
  watch; :class:`~processor.executor.inflight.InFlight`: the in-flight bound;
* :class:`~processor.executor.ownership.Ownership`: the owned partitions, takes and releases;
* :class:`~processor.executor.rounds.Rounds`: the claim and flush rounds in flight, a partition
  in one at a time; :class:`~processor.executor.rounds.RoundGate`: rounds side by side, a
  rebalance alone;
* :mod:`~processor.executor.executor_state`: the records they pass to each other.

This module owns the lifecycle (``start``, ``stop``, ``request_stop``), the consumer loop
(``run``: fetch, and start a claim round for each partition with records in hand while calls
may be claimed; the ends of finished calls written as they come; the back-pressure of the
in-flight bound), and the stall watchdog beside the loop. It must not decide about a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Final

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from processor.core.authn import CommandVerifier
from processor.core.errors import ConfigurationError
from processor.core.registry import Registry
from processor.executor.backlog import Backlog
from processor.executor.barrier import ControlBarrier
from processor.executor.claims import Claimer, Decided
from processor.executor.executor_state import (
    DEFAULT_GROUP,
    ExecutorStalled,
    ExecutorStats,
    OwnedPartition,
    Progress,
    Tally,
)
from processor.executor.fence import FenceState
from processor.executor.fencing import CallGate
from processor.executor.freezes import FreezeWatch
from processor.executor.handlers import Handlers
from processor.executor.inflight import InFlight
from processor.executor.outputs import OutputRecords
from processor.executor.ownership import Ownership
from processor.executor.rounds import Rounds
from processor.executor.running import Runner
from processor.executor.transactions import PartitionWriter
from processor.kafka.clients import committed_reader, stop_consumer
from processor.kafka.topics import partition_counts
from processor.observability import metrics
from processor.observability.logging import fields
from processor.settings import Settings

__all__ = ["DEFAULT_GROUP", "ExecutorClient", "ExecutorStalled", "ExecutorStats"]

log = logging.getLogger(__name__)


# how often the control partitions of running calls are read for a stop (Runner.tell_stopped)
_STOP_WATCH_SECONDS: Final = 0.2
_GATE_POLL_SECONDS: Final = 0.05  # the loop's look at a gate a rebalance holds shut
_RELEASE_SECONDS: Final = 10.0  # a released producer's flush (stop) at most; then discarded


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, client: ExecutorClient) -> None:
        self._client = client

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._client.ownership.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self._client.ownership.on_assigned(assigned)
        self._client.assigned.set()


class ExecutorClient:
    """Consumes ``dispatch`` in consumer group ``group`` and runs registered handlers.

    ``verifier`` authenticates operator commands read from ``control`` (a
    :class:`processor.ops.signing.Keyring`; :class:`processor.core.authn.AllowUnsigned` only for
    tests). ``registry`` (optional) resolves tool aliases in operator commands and supplies
    ``requires_confirmation`` and the confirmation TTL of tools whose registration does not say;
    a handler whose registration does not say, for a tool the registry does not declare (or
    without a registry), is refused at construction (``confirmation_rule_unknown``): whether a
    call needs a confirmation is never guessed.
    """

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
        claim_ahead: int | None = None,
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
        self.assigned = asyncio.Event()
        self._verifier = verifier
        self._clock = clock
        self._retention = settings.limits.retention_seconds
        self._consumer: AIOKafkaConsumer | None = None
        # a consumer never assigned: its client asks the transaction coordinator for a take,
        # with no long-polled fetch ahead of the request on its connection
        self._admin: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        self._started = False
        self._next_forget = 0.0
        # the parts (each takes what it needs; module docstring); public, so that an
        # application or a test can see (and a test wrap) each one
        self._tally = Tally()
        self._progress = Progress()
        self.freezes = FreezeWatch()  # pauses of the whole process (a SIGSTOP, a frozen VM)
        self._freeze_task: asyncio.Task[None] | None = None
        # handlers running at once (None: executor_max_in_flight); records per poll at most
        # (None: as many as may run at once; never more than the free slots)
        limit = max_in_flight or settings.executor_max_in_flight
        ahead = claim_ahead if claim_ahead is not None else settings.executor_claim_ahead
        self._in_flight = InFlight(limit, max(1, limit // 2) if ahead is None else ahead)
        self._batch_size = batch_size or self._in_flight.limit
        # records fetched and not decided yet; a partition with 4 polls' worth is paused
        self._backlog = Backlog(4 * self._batch_size)
        self._barrier = ControlBarrier(settings, self._new_fence)
        outputs = OutputRecords(self.topics, group, self.executor_id, clock)
        self.writer = writer = PartitionWriter(
            settings,
            group,
            lambda: self._admin if self._admin is not None else self._consumer,
            executor_id=self.executor_id,
            restore=lambda p: self.ownership.restore_ledger(p),  # noqa: PLW0108 (built below)
            paused_since=self.freezes.paused_since,
        )
        self.gate = gate = CallGate(
            self._barrier,
            registry,
            retention_seconds=self._retention,
            barrier_timeout_seconds=barrier_timeout_seconds,
            stopping=self._stopping,
            clock=clock,
        )
        self.runner = Runner(
            settings=settings,
            group=group,
            in_flight=self._in_flight,
            outputs=outputs,
            tally=self._tally,
            gate=gate,
            barrier_timeout_seconds=barrier_timeout_seconds,
            resume=self._resume,
            clock=clock,
        )
        self.claimer = Claimer(
            handlers=handlers,
            gate=gate,
            writer=writer,
            runner=self.runner,
            outputs=outputs,
            tally=self._tally,
            progress=self._progress,
            stopping=self._stopping,
            rewind=self._rewind,
        )
        self.ownership = Ownership(
            settings=settings,
            group=group,
            writer=writer,
            claimer=self.claimer,
            runner=self.runner,
            progress=self._progress,
            stopping=self._stopping,
            consumer=lambda: self._consumer,
            admin=lambda: self._admin,
            forget=self._backlog.drop,
            give_back=lambda tp: self._rewind(tp, None),
        )
        # claims and flushes of different partitions in flight side by side (rounds.py)
        self.rounds = Rounds(self.ownership.gate)

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

    def _rewind(self, tp: TopicPartition, offset: int | None) -> None:
        """Seek the consumer back to ``offset`` (None: to the first record the backlog holds
        of the partition, if any): what the backlog holds of it is forgotten, fetched again."""
        held = self._backlog.drop(tp)
        offset = held if offset is None else offset
        consumer = self._consumer
        if consumer is not None and offset is not None:
            with contextlib.suppress(Exception):  # revoked meanwhile: the next owner's
                consumer.seek(tp, offset)

    def _resume(self, owned: OwnedPartition) -> None:
        """A partition paused for an in-order call may go on (:meth:`Runner.resume_ordered`)."""
        consumer = self._consumer
        if consumer is None:
            return
        tp = TopicPartition(self.topics.dispatch, owned.partition)
        with contextlib.suppress(Exception):
            if tp in consumer.assignment():
                consumer.resume(tp)

    # ------------------------------------------------------------------ views

    @property
    def stats(self) -> ExecutorStats:
        """Counters by outcome, and of records not run (tests, diagnostics)."""
        return self._tally.stats

    @property
    def barrier(self) -> ControlBarrier:
        return self._barrier

    @property
    def in_flight(self) -> InFlight:
        """The handlers running now, the bound, and the most that ever ran at once."""
        return self._in_flight

    def owned_partitions(self) -> list[int]:
        """The dispatch partitions this executor owns now (not lost to a fence)."""
        return self.ownership.owned_partitions()

    def paused_partitions(self) -> list[int]:
        """The dispatch partitions paused on the consumer now: a full backlog (the in-flight
        bound's back-pressure), a take being retried, or an in-order call waiting."""
        consumer = self._consumer
        if consumer is None:
            return []
        return sorted(tp.partition for tp in consumer.paused())

    def records_in_hand(self) -> int:
        """Dispatch records fetched and not decided yet (the backlog), across partitions."""
        return len(self._backlog)

    def seconds_since_progress(self) -> float:
        """Seconds since the loop last made progress, or the oldest round in flight started
        (a round that waits for ever stalls the executor; handlers running do not)."""
        oldest = self.rounds.oldest()
        loop = self._progress.seconds_since()
        return loop if oldest is None else max(loop, oldest[0])

    def _stalled_step(self) -> str:
        oldest = self.rounds.oldest()
        if oldest is not None and oldest[0] >= self._progress.seconds_since():
            return f"a round: {oldest[1]}"
        return self._progress.step

    def _maybe_forget(self) -> None:
        now = self._clock()
        if now < self._next_forget:
            return
        self._next_forget = now + 60.0
        self._barrier.forget(now - self._retention)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ExecutorClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Check the topics, start the control barrier, and join the consumer group."""
        topics = self.topics
        counts = await partition_counts(
            self.settings,
            [topics.dispatch, topics.control, topics.status, topics.results, topics.executions],
        )
        for name in (topics.dispatch, topics.control, topics.status, topics.results):
            if name not in counts:
                raise ConfigurationError("missing_topic", f"topic {name!r} does not exist")
        if counts.get(topics.executions) != counts[topics.dispatch]:
            raise ConfigurationError(
                "ledger_partitions",
                f"topic {topics.executions!r} must exist with as many partitions as "
                f"{topics.dispatch!r} ({counts[topics.dispatch]}), "
                f"found {counts.get(topics.executions)}",
            )
        await self._barrier.start()
        admin = committed_reader(
            self.settings, client_id=f"{self.settings.client_id}-executor-admin"
        )
        try:
            await admin.start()
        except BaseException:
            await self._barrier.stop()
            raise
        self._admin = admin
        consumer = AIOKafkaConsumer(
            **self.settings.kafka_client_kwargs(),
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=self.settings.session_timeout_ms,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            max_poll_interval_ms=self.settings.max_poll_interval_ms,
            max_partition_fetch_bytes=max(1024 * 1024, self.settings.max_message_bytes),
        )
        try:
            await consumer.start()
            consumer.subscribe([topics.dispatch], listener=_Listener(self))
        except BaseException:
            await consumer.stop()
            await self._stop_admin()
            await self._barrier.stop()
            raise
        self._consumer = consumer
        self._started = True
        self._freeze_task = asyncio.create_task(self.freezes.run())
        log.info(
            "executor started",
            extra=fields(
                executor_id=self.executor_id, group=self.group, tools=self.handlers.tools()
            ),
        )

    async def stop(self) -> None:
        """Stop consuming; let the running calls end (up to ``executor_release_wait_seconds``,
        the rest cancelled and reported ``unknown``); write their ends; release every
        partition; leave.

        After :meth:`request_stop` with ``abandon=True`` (the broker is gone) nothing is flushed:
        each producer is discarded, its open transaction left to be aborted by the next owner's
        InitProducerId or the transaction timeout, so its calls run again under the fence and
        the ledger; flushing to a broker that is gone would retry until killed."""
        self._stopping.set()
        if not self._started:
            return
        self._started = False
        await self.ownership.release_all()
        freeze_task, self._freeze_task = self._freeze_task, None
        if freeze_task is not None:
            freeze_task.cancel()
            await asyncio.wait({freeze_task})
        await self.runner.close()
        for task in list(self._in_flight.tasks):  # abandoned, or of partitions lost: unknown
            task.cancel()  # from their claims, by the next owner
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await stop_consumer(consumer)
        await self._stop_admin()
        await self._barrier.stop()
        log.info("executor stopped", extra=fields(executor_id=self.executor_id))

    async def _stop_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                await stop_consumer(admin)

    def request_stop(self, *, abandon: bool = False) -> None:
        """Ask :meth:`run` to return after the fetch in hand (signal-safe). ``abandon``: the
        broker is gone, so :meth:`stop` must not try to commit anything on the way out."""
        self._stopping.set()
        if abandon:
            self.ownership.abandon()

    async def run(self) -> None:
        """Process dispatch records until :meth:`request_stop` or :meth:`stop`.

        A watchdog runs beside the loop: when the loop makes no progress for
        ``executor_stall_timeout_seconds`` (a wait on the broker that never ends, whatever its
        cause), it logs one error line, abandons the partitions (as with a lost broker: nothing
        is committed on the way out) and raises :class:`ExecutorStalled`; ``processor executor
        run`` then exits 1 so that its supervisor restarts it. Never alive and silent."""
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("ExecutorClient.start() was not awaited")
        self._progress("polling")
        metrics.EXECUTOR_SECONDS_SINCE_PROGRESS.set_function(self.seconds_since_progress)
        loop = asyncio.create_task(self._loop(consumer))
        watchdog = asyncio.create_task(self._watch())
        try:
            await asyncio.wait({loop, watchdog}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not loop.done():
                loop.cancel()  # a stall, or run() itself cancelled: the loop goes too
                await asyncio.wait({loop}, timeout=_RELEASE_SECONDS)
            stalled = watchdog.done() and not watchdog.cancelled()
            watchdog.cancel()
            await asyncio.wait({watchdog})
        if not stalled:
            return loop.result()
        raise watchdog.result()

    async def _watch(self) -> ExecutorStalled:
        """Return once the loop has made no progress for the stall timeout."""
        limit = self.settings.executor_stall_timeout_seconds
        while True:
            await asyncio.sleep(min(1.0, limit / 10))
            stalled = self.seconds_since_progress()
            if stalled >= limit:
                log.error(
                    "executor stalled: no progress; exiting to be restarted",
                    extra=fields(
                        executor_id=self.executor_id,
                        stalled_seconds=round(stalled, 1),
                        step=self._stalled_step(),
                        owned=self.owned_partitions(),
                        setting="PROCESSOR_EXECUTOR_STALL_TIMEOUT_SECONDS",
                    ),
                )
                self.request_stop(abandon=True)
                return ExecutorStalled(stalled, self._stalled_step())

    async def _loop(self, consumer: AIOKafkaConsumer) -> None:
        """Fetch into the backlog; claim and start from it; write the ends of calls as they
        finish. Handlers run beside it (at most ``max_in_flight``). A poll is always pending,
        so the records a freed slot needs are in hand; a partition whose backlog is full is
        paused on the consumer, never the loop.

        Claims and flushes run as rounds (:mod:`processor.executor.rounds`): a round holds its
        partitions until it ends, and rounds of other partitions start meanwhile, so one
        partition's barrier reads and transaction do not hold up the others'. A rebalance
        waits for the rounds in flight and runs alone.

        The ends of finished calls are written at most ``executor_flush_interval_ms`` after
        the first of them, with the claims of a round of their partition when one comes
        first (one transaction, not two back to back on one transactional id)."""
        stop_wait = asyncio.create_task(self._stopping.wait())
        in_flight = self._in_flight
        ownership = self.ownership
        backlog = self._backlog
        rounds = self.rounds
        flush_seconds = self.settings.executor_flush_interval_ms / 1000
        fetch: asyncio.Task[dict[TopicPartition, list[ConsumerRecord]]] | None = None
        ends_due: float | None = None  # when the ends that finished are to be written
        next_watch = 0.0  # when the running calls' turns are checked again (Runner.tell_stopped)

        def eligible(tp: TopicPartition) -> bool:  # may its records be decided now?
            return tp.partition not in rounds.busy and not ownership.stays_paused(tp)

        def can_claim() -> bool:
            return in_flight.worth_claiming() and ownership.gate.open() and backlog.ready(eligible)

        try:
            while not self._stopping.is_set():
                if fetch is None:
                    fetch = asyncio.create_task(
                        consumer.getmany(timeout_ms=200, max_records=self._batch_size)
                    )
                if not can_claim():
                    ended = asyncio.create_task(in_flight.finished.wait())
                    wait = None if ends_due is None else max(0.0, ends_due - time.monotonic())
                    if not ownership.gate.open():  # a rebalance waits: look again soon
                        wait = _GATE_POLL_SECONDS if wait is None else min(wait, 0.05)
                    try:
                        await asyncio.wait(
                            {fetch, stop_wait, ended, *rounds.tasks},
                            timeout=wait,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                    finally:
                        ended.cancel()
                if stop_wait.done() or rounds.reap():
                    return
                if in_flight.finished.is_set():
                    in_flight.finished.clear()
                if ends_due is None and any(
                    o.finished and not o.lost for o in ownership.owned.values()
                ):
                    ends_due = time.monotonic() + flush_seconds
                polled = fetch.done()
                if polled:
                    backlog.add(fetch.result())
                    fetch = None
                    for tp in backlog.to_pause():
                        with contextlib.suppress(Exception):
                            consumer.pause(tp)
                while can_claim():  # a round per partition, side by side, in turn
                    self._progress("starting a claim round")
                    batches = backlog.take_one(eligible)
                    partitions = {tp.partition for tp in batches}
                    # decided now: the next round's free slots are what this one leaves
                    decided = self.claimer.decide(consumer, ownership.owned, batches)
                    rounds.start(
                        partitions,
                        self._claim_round(decided, partitions),
                        f"claiming on dispatch partition {_listed(partitions)}",
                    )
                    polled = False  # the round's flush follows its claims
                for tp in backlog.to_resume(consumer.assignment()):
                    if not ownership.stays_paused(tp):
                        with contextlib.suppress(Exception):
                            consumer.resume(tp)
                self._maybe_forget()
                if ownership.gate.open():
                    ends_now = ends_due is not None and time.monotonic() >= ends_due
                    if ends_now:
                        ends_due = None
                    if polled or ends_now:  # ends, kept ends of claimed calls, sweeps due
                        due = ownership.due(set(), ends=ends_now, busy=rounds.busy)
                        if due:
                            self._progress("writing the ends of finished calls")
                            rounds.start(
                                {owned.partition for owned in due},
                                self._flush_round(due),
                                "writing on dispatch partitions "
                                + _listed({o.partition for o in due}),
                            )
                if in_flight.running and time.monotonic() >= next_watch:
                    next_watch = time.monotonic() + _STOP_WATCH_SECONDS
                    self._progress("reading control for the running calls")
                    await self.runner.tell_stopped(list(ownership.owned.values()))
                self._progress("polling")
        except BaseException:  # cancelled (a stall: a round may hang for ever), or failed
            rounds.cancel()
            raise
        finally:
            stop_wait.cancel()
            if fetch is not None and not fetch.done():
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, KafkaError):
                    await fetch
            await rounds.settle()  # before the partitions are released (they wait for it)

    async def _claim_round(self, decided: Decided, partitions: set[int]) -> bool:
        """A claim round of records decided up to the fence (:meth:`Claimer.claim`), its
        results applied, then the partitions' offsets and sweeps due; True: the executor
        stops."""
        ownership = self.ownership
        fetched = await self.claimer.claim(decided)
        for owned, resume_at in fetched.fenced:
            ownership.lose(owned, resume_at)
        if fetched.stopping:
            return True
        self._backlog.put_back(fetched.leftover)
        await ownership.flush(ownership.due(partitions, ends=False, among=partitions, busy=set()))
        return False

    async def _flush_round(self, due: list[OwnedPartition]) -> bool:
        await self.ownership.flush(due)
        return False


def _listed(partitions: set[int]) -> str:
    return ", ".join(str(p) for p in sorted(partitions))
