"""The executor client: consume ``dispatch``, fence each call, run its handler at most once.

An application embeds :class:`ExecutorClient` with its
:class:`~processor.executor.handlers.Handlers` (or runs ``processor executor run --handlers
module:object``)::

    async with ExecutorClient(settings, handlers, group="bookings", verifier=keyring) as client:
        await client.run()

Per fetch (each dispatch partition's records decided in offset order; up to ``max_in_flight``
handlers, ``PROCESSOR_EXECUTOR_MAX_IN_FLIGHT``, 64 by default, run at once):

1. Decode each record; a tool this executor has no handler for belongs to another executor group
   and is skipped; a ``dispatch_id`` already in the group's ledger is skipped (never run twice).
   Only as many calls as there are free in-flight slots go on (a claimed call starts at once);
   the records after them are fetched again later.
2. **Fence** (:mod:`processor.executor.fence`, :mod:`processor.executor.barrier`), once for all
   the calls of the fetch: each control partition they need is read up to its current end
   offset (one barrier read per partition), and each call is checked: its turn not cancelled,
   its response not quarantined, its tool not disabled, its tenant not stopped, the call not
   denied, and a required confirmation present, bound to this digest and the turn's actor, and
   fresh. A refused call's handler never runs.
3. **Claim** (:mod:`processor.executor.ledger`): per dispatch partition, ONE transaction writes a
   ``claimed`` ledger entry for every call that passed, the refusals (ledger entry, result,
   user status), the ends of calls that finished meanwhile, and the offset past the records,
   before anything runs.
4. **Fence again**, right before the handlers start, shared by the calls that start together: a
   cancellation that raced the claims is still seen (the call's end is then a refusal).
5. **Run** the handlers side by side (:mod:`processor.executor.inflight`), each with its timeout;
   as they end, their outcomes (``succeeded`` / ``failed``, or ``unknown`` when the handler timed
   out or was stopped) are written together, one transaction per partition, at most
   ``executor_flush_interval_ms`` (5 ms) after the first of them ended plus the transaction.

Which calls overlap: any two, of different turns or of one turn, on one dispatch partition or
several (calls of one response are independent by every provider's definition of parallel tool
calls), except the calls of one turn of tools registered ``in_order``, which run one at a time
in dispatch order (the rest of their partition waits with them). At most once is kept by the
claim: a claimed call whose outcome was not written (the executor killed in the window above) is
reported ``unknown`` by the next owner, never run again.
A slow or hung handler holds up no other call (its timeout ends it); with every slot taken the
consumer is paused, the loop goes on. A revoke or a stop waits for the partition's running
handlers up to ``executor_release_wait_seconds`` (10 s), then cancels the rest (``unknown``).
While calls run, their control partitions are read every 0.2 s: a call whose turn was stopped
since it started is told (``Call.stop``) and cancelled ``executor_stop_grace_seconds`` later
(:meth:`Running._tell_stopped`).

Results go to ``<prefix>results`` (:class:`~processor.executor.records.ExecutionResult`);
refusals, failures and unknown outcomes also go to ``status`` as what the user may be told. The
``traceparent`` header of the dispatch record is passed to the handler and copied to the outputs.
Nothing here logs, counts or writes argument values.

Where the parts live. This module owns the lifecycle (``start``, ``stop``, ``request_stop``), the
consumer loop (``run``: fetch, claim and start under the lock; the ends of finished calls
written as they come; the back-pressure of the in-flight bound) and
rebalances (taking the partitions of an assignment side by side: a new transactional producer
each, the ledger restored, unfinished claims reported ``unknown``; releasing one; retrying a
failed take; taking one back after a fence that no rebalance follows), and the stall watchdog
beside the loop. It must not decide about a
record. :class:`ExecutorClient` is one object built in layers, each a base of
the next and calling only the layers below it (why layers and not collaborators:
:mod:`processor.executor.executor_state`):

* :mod:`~processor.executor.executor_state`: every field, the stats, the internal signals;
* :mod:`~processor.executor.transactions`: the producer, the output records, one transaction
  with the offset;
* :mod:`~processor.executor.fencing`: the requirements of a dispatch and the fence, after the
  control barrier;
* :mod:`~processor.executor.running`: running handlers side by side and queueing their outcomes;
* :mod:`~processor.executor.claims`: a fetch through steps 1-5 above (skip, refuse, claim, start).

The in-flight bound is a part of its own (:class:`~processor.executor.inflight.InFlight`).

Why one module: the loop and the rebalance callbacks interleave under one lock over one
partition table (a revoke waits for the fetch in hand, then for the partition's running calls,
then writes their ends; a take fences, restores and reports while the loop waits), and that
interleaving is read in one place. Splitting it off as one more layer would deepen the stack
issue 39 (item 5) asks to replace with parts of explicit state (loop, claim ledger, runner,
barrier); that is where it is to be split.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from processor.core.errors import ConfigurationError, ExecutionError, KafkaStepError
from processor.executor.claims import Claims
from processor.executor.executor_state import (
    _T,
    DEFAULT_GROUP,
    ExecutorStalled,
    ExecutorStats,
    _Fenced,
    _Owned,
    _TransactionFailed,
)
from processor.executor.ledger import restore_ledger_partition
from processor.executor.records import EntryState
from processor.kafka import hanging
from processor.kafka.clients import committed_reader, discard_producer, stop_consumer
from processor.kafka.topics import partition_counts
from processor.observability import metrics
from processor.observability.logging import fields

__all__ = ["DEFAULT_GROUP", "ExecutorClient", "ExecutorStalled", "ExecutorStats"]

log = logging.getLogger(__name__)


# how often the control partitions of running calls are read for a stop (_tell_stopped)
_STOP_WATCH_SECONDS: Final = 0.2
_RELEASE_SECONDS: Final = 10.0  # a released producer's flush (stop) at most; then discarded


class _Abandoned(ExecutionError):
    """The broker is gone and the executor is exiting: a take or release was cancelled."""


class _TakeFailed(KafkaStepError):
    """A take could not report the claims a previous owner left unfinished."""


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, client: ExecutorClient) -> None:
        self._client = client

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._client._on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self._client._on_assigned(assigned)


class ExecutorClient(Claims):
    """Consumes ``dispatch`` in consumer group ``group`` and runs registered handlers.

    ``verifier`` authenticates operator commands read from ``control`` (a
    :class:`processor.ops.signing.Keyring`; :class:`processor.core.authn.AllowUnsigned` only for
    tests). ``registry`` (optional) resolves tool aliases in operator commands and supplies
    ``requires_confirmation`` and the confirmation TTL of tools whose registration does not say;
    a handler whose registration does not say, for a tool the registry does not declare (or
    without a registry), is refused at construction (``confirmation_rule_unknown``): whether a
    call needs a confirmation is never guessed.
    """

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
        for retake in self._retakes.values():
            retake.cancel()
        self._retakes.clear()
        async with self._lock:
            if not self._abandon:  # the running calls end, up to a bound, and are recorded
                await self._drain(list(self._owned.values()))
            for owned in list(self._owned.values()):
                if self._abandon:
                    await discard_producer(owned.producer)
                else:
                    await self._release(owned)
            self._owned.clear()
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
        self._abandon = self._abandon or abandon
        self._stopping.set()
        if self._abandon:
            for work in self._broker_work:
                work.cancel()

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
                        step=self._step,
                        owned=self.owned_partitions(),
                        setting="PROCESSOR_EXECUTOR_STALL_TIMEOUT_SECONDS",
                    ),
                )
                self.request_stop(abandon=True)
                return ExecutorStalled(stalled, self._step)

    async def _loop(self, consumer: AIOKafkaConsumer) -> None:
        """Fetch, claim, start; write the ends of calls as they finish. Handlers run beside it
        (at most ``max_in_flight``); with no slot free the consumer is paused, not the loop.

        The ends of finished calls are written at most ``executor_flush_interval_ms`` after
        the first of them, with the claims of a fetch of their partition when one comes
        first (one transaction, not two back to back on one transactional id)."""
        stop_wait = asyncio.create_task(self._stopping.wait())
        in_flight = self._in_flight
        flush_seconds = self.settings.executor_flush_interval_ms / 1000
        fetch: asyncio.Task[dict[TopicPartition, list[ConsumerRecord]]] | None = None
        ends_due: float | None = None  # when the ends that finished are to be written
        next_watch = 0.0  # when the running calls' turns are checked again (_tell_stopped)
        try:
            while not self._stopping.is_set():
                if not in_flight.free():
                    in_flight.hold(consumer)
                elif in_flight.holding:
                    in_flight.let_go(consumer, self._stays_paused)
                    if fetch is not None and not fetch.done():
                        # asked while paused: it would wait for its timeout, not the records
                        fetch.cancel()  # (a pending fetch holds no record: none is lost)
                        with contextlib.suppress(asyncio.CancelledError, KafkaError):
                            await fetch
                        fetch = None
                if fetch is None:
                    most = max(1, min(self._batch_size, in_flight.free()))
                    fetch = asyncio.create_task(consumer.getmany(timeout_ms=200, max_records=most))
                ended = asyncio.create_task(in_flight.finished.wait())
                wait = None if ends_due is None else max(0.0, ends_due - time.monotonic())
                try:
                    await asyncio.wait(
                        {fetch, stop_wait, ended}, timeout=wait, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    ended.cancel()
                if stop_wait.done():
                    return
                if in_flight.finished.is_set():
                    in_flight.finished.clear()
                    if ends_due is None:
                        ends_due = time.monotonic() + flush_seconds
                    if in_flight.holding and in_flight.free():
                        continue  # a slot is free: fetch first, the ends go with the claims
                if fetch.done():
                    batches, fetch = fetch.result(), None
                    self._progress("waiting for the lock (a take or release in progress)")
                    async with self._lock:
                        if batches:
                            fetched = await self._claim_fetch(consumer, batches)
                            for owned, resume_at in fetched.fenced:
                                self._lose(owned, resume_at)
                            if fetched.stopping:
                                return
                        await self._flush_many({tp.partition for tp in batches}, ends=False)
                    self._maybe_forget()
                if ends_due is not None and time.monotonic() >= ends_due:
                    ends_due = None
                    self._progress("writing the ends of finished calls")
                    async with self._lock:
                        await self._flush_many(set(), ends=True)
                if in_flight.running and time.monotonic() >= next_watch:
                    next_watch = time.monotonic() + _STOP_WATCH_SECONDS
                    self._progress("reading control for the running calls")
                    await self._tell_stopped()
                self._progress("polling")
        finally:
            stop_wait.cancel()
            if fetch is not None and not fetch.done():
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, KafkaError):
                    await fetch

    def _stays_paused(self, tp: TopicPartition) -> bool:
        """Paused for another reason than the in-flight bound: a take being retried, or an
        in-order call waiting for the one before it."""
        owned = self._owned.get(tp.partition)
        return tp.partition in self._retakes or (owned is not None and owned.ordered_wait)

    async def _flush_many(self, fetched: set[int], *, ends: bool) -> None:
        """One transaction per partition, side by side, for those with something to write:
        with ``ends``, every partition with ends of finished calls; the fetched partitions
        with a pending offset (records skipped) or a sweep due; the others' kept ends of
        claimed calls and sweeps that are due (``_flush_due``)."""
        now = time.monotonic()
        due = {
            owned.partition: owned
            for owned in self._owned.values()
            if not owned.lost
            and (
                (ends and owned.finished)
                or (
                    owned.partition in fetched
                    and (owned.pending_offset is not None or owned.sweeps.due(now))
                )
            )
        }
        for owned in self._flush_due(fetched):
            due.setdefault(owned.partition, owned)
        if due:
            await asyncio.gather(*(self._flush(owned) for owned in due.values()))

    async def _flush(self, owned: _Owned) -> None:
        """Kept ends of claimed calls, finished ends and the pending offset; a fence loses the
        partition."""
        try:
            await self._flush_offsets(owned)
        except _Fenced:
            self._lose(owned, None)
        except _TransactionFailed:
            pass

    async def _drain(self, owned: list[_Owned]) -> None:
        """Wait for the handlers running on these partitions, up to
        ``executor_release_wait_seconds``; cancel the rest (their outcome is ``unknown``,
        ``executor_stopped``: they are never run again). Their ends are then in
        ``_Owned.finished``, for the release to write."""
        tasks = {task for o in owned for task in o.running}
        if not tasks:
            return
        self._progress(f"waiting for {len(tasks)} running calls to end")
        await asyncio.wait(tasks, timeout=self.settings.executor_release_wait_seconds)
        late = [task for task in tasks if not task.done()]
        for task in late:
            task.cancel()
        if late:
            log.warning(
                "running calls cancelled on release: outcome unknown, not run again",
                extra=fields(calls=len(late), partitions=sorted(o.partition for o in owned)),
            )
            await asyncio.wait(late, timeout=_RELEASE_SECONDS)  # one that ignores it: left

    # ------------------------------------------------------------------ rebalance

    async def _on_assigned(self, assigned: list[TopicPartition]) -> None:
        """Take the assigned partitions, side by side (each has its own transactional id and
        ledger partition)."""
        tps = sorted(
            (tp for tp in assigned if tp.topic == self.topics.dispatch), key=lambda t: t.partition
        )
        async with self._lock:
            await asyncio.gather(*(self._take_assigned(tp) for tp in tps))
        self.assigned.set()

    async def _take_assigned(self, tp: TopicPartition) -> None:
        previous = self._owned.pop(tp.partition, None)
        try:
            if previous is not None:
                await self._abortable(self._release(previous))
            self._owned[tp.partition] = await self._abortable(self._take(tp.partition))
        except _Abandoned:
            if previous is not None:
                await discard_producer(previous.producer)
        except Exception as exc:  # aiokafka swallows listener errors: retry here
            self._retry_take(tp, exc)

    async def _abortable(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Run a take or release that waits on the broker, so that abandoning the broker
        (:meth:`request_stop` with ``abandon``) cancels it: :class:`_Abandoned` then."""
        if self._abandon:
            work.close()
            raise _Abandoned
        task = asyncio.ensure_future(work)
        self._broker_work.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if not task.cancelled() or (me is not None and me.cancelling()):
                raise
            raise _Abandoned from None
        finally:
            self._broker_work.discard(task)

    def _retry_take(
        self, tp: TopicPartition, exc: BaseException | None, *, delay: float = 1.0
    ) -> None:
        """Pause a partition whose take failed (``exc``), or that was lost to a fence, and
        take it (again) in the background after ``delay`` seconds, while it stays assigned."""
        if exc is not None:
            log.warning(
                "could not take a dispatch partition; retrying",
                extra=fields(partition=tp.partition, error=type(exc).__name__),
            )
            metrics.EXECUTOR_TAKE_FAILURES.inc()
        consumer = self._consumer
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.pause(tp)
        if tp.partition not in self._retakes:
            self._retakes[tp.partition] = asyncio.create_task(self._retake(tp, delay))

    async def _retake(self, tp: TopicPartition, delay: float) -> None:
        try:
            while not self._stopping.is_set():
                await asyncio.sleep(delay)
                consumer = self._consumer
                if consumer is None or tp not in consumer.assignment():
                    return  # revoked meanwhile: the next owner takes it
                async with self._lock:
                    lost = self._owned.get(tp.partition)
                    if lost is not None and not lost.lost:
                        return
                    try:
                        owned = await self._abortable(self._take(tp.partition))
                    except _Abandoned:
                        return
                    except Exception as exc:
                        delay = min(max(delay, 1.0) * 2, 30.0)
                        if isinstance(exc, hanging.TransactionHeld):
                            continue  # logged once by processor.kafka.hanging
                        log.warning(
                            "retrying the take of a dispatch partition",
                            extra=fields(partition=tp.partition, error=type(exc).__name__),
                        )
                        continue
                    self._owned[tp.partition] = owned
                    if lost is not None:
                        await discard_producer(lost.producer)  # fenced: nothing to flush
                        if lost.resume_at is not None:  # fetch the undecided records again
                            consumer.seek(tp, lost.resume_at)
                    consumer.resume(tp)
                    return
        finally:
            self._retakes.pop(tp.partition, None)

    async def _on_revoked(self, revoked: list[TopicPartition]) -> None:
        for tp in revoked:
            retake = self._retakes.pop(tp.partition, None)
            if retake is not None:
                retake.cancel()
        async with self._lock:  # waits for the fetch in hand; then for its running calls
            await self._drain([o for tp in revoked if (o := self._owned.get(tp.partition))])
            for tp in revoked:
                owned = self._owned.pop(tp.partition, None)
                if owned is not None:
                    try:
                        await self._abortable(self._release(owned))
                    except _Abandoned:
                        await discard_producer(owned.producer)

    async def _take(self, partition: int) -> _Owned:
        """Fence the previous owner, restore the ledger, report its unfinished claims (a take
        that cannot report them fails, and is retried: they would stay claimed otherwise)."""
        producer = await self._new_producer(partition, in_doubt=True)  # the last owner's end
        try:
            entries = await restore_ledger_partition(
                self.settings,
                self.topics.executions,
                partition,
                self.group,
                timeout=self.settings.restore_timeout_seconds,
                offsets=self._admin,
            )
        except BaseException:
            await discard_producer(producer)  # nothing to flush; bounded with the broker gone
            raise
        owned = _Owned(partition=partition, producer=producer, entries=entries)
        dangling = [e for e in entries.values() if e.state is EntryState.CLAIMED]
        log.info(
            "dispatch partition taken",
            extra=fields(partition=partition, entries=len(entries), unfinished=len(dangling)),
        )
        try:
            await self._record_unknown(owned, dangling, "executor_interrupted")
        except (_Fenced, _TransactionFailed) as exc:
            await discard_producer(owned.producer)
            raise _TakeFailed(type(exc).__name__) from None
        return owned

    async def _release(self, owned: _Owned) -> None:
        """Its running calls end (:meth:`_drain`), their ends and the offset are written, and
        its producer stops."""
        await self._drain([owned])
        if not owned.lost:
            with contextlib.suppress(_Fenced, _TransactionFailed):
                await self._flush_offsets(owned)
        try:  # a flush waits for pending batches, which an idempotent producer retries forever
            await asyncio.wait_for(owned.producer.stop(), _RELEASE_SECONDS)
        except Exception:
            await discard_producer(owned.producer)

    def _lose(self, owned: _Owned, resume_at: int | None) -> None:
        """The partition's producer was fenced: stop using it, and take it again after one
        session timeout if it is still ours then.

        A fence means another member took the partition (a rebalance, which then tells this
        member within a session timeout and cancels the retake), or that the coordinator
        aborted a transaction of ours that outlived the transaction timeout (a broker outage,
        a stalled commit) and bumped the epoch: then nothing else owns the partition and no
        rebalance comes, so waiting for one would leave it paused for good, and a claim whose
        end was being written would stay claimed. The take fences whatever else holds the id,
        restores the ledger (reporting such a claim ``unknown``), and the records from
        ``resume_at`` (the record in hand) are fetched again."""
        owned.lost = True
        owned.resume_at = resume_at
        delay = self.settings.session_timeout_ms / 1000
        log.warning(
            "fenced on a dispatch partition; taking it again unless a rebalance moves it",
            extra=fields(partition=owned.partition, retake_in_seconds=delay),
        )
        self._retry_take(TopicPartition(self.topics.dispatch, owned.partition), None, delay=delay)
