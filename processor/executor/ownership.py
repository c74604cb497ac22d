"""The executor's partition table: which dispatch partitions it owns, taken and released.

Owns :class:`Ownership`: the owned partitions
(:class:`~processor.executor.executor_state.OwnedPartition`), the gate that lets rounds (claims,
flushes) of different partitions run side by side and a rebalance run alone
(:class:`~processor.executor.rounds.RoundGate`), and the rebalances themselves: taking the
partitions of an assignment side by side (each a new transactional producer through the owner
fence, its ledger restored, the claims a previous owner left unfinished reported ``unknown``, the
consumer sought to the group's committed offset read then as a stable offset),
releasing one (its running calls end up to a bound, their ends and its offset written, its
producer stopped), retrying a failed take, and taking one back after a fence that no rebalance
follows (``lose``). Also which partitions have ends or offsets to write (``due``) and their
flush (``flush``), since it walks the table and loses a partition on a fence.

Must not decide about a record, nor run handlers: :mod:`processor.executor.claims` and
:mod:`processor.executor.running` do."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition

from processor.core.errors import ExecutionError, KafkaStepError
from processor.executor.claims import Claimer
from processor.executor.executor_state import (
    Fenced,
    OwnedPartition,
    Progress,
    TransactionFailed,
)
from processor.executor.ledger import restore_ledger_partition
from processor.executor.records import EntryState, ExecutionEntry
from processor.executor.rounds import RoundGate
from processor.executor.running import Runner
from processor.executor.transactions import PartitionWriter
from processor.kafka import hanging
from processor.kafka.clients import discard_producer
from processor.kafka.stable_offsets import stable_committed
from processor.observability import metrics
from processor.observability.logging import fields
from processor.settings import Settings

__all__ = ["Ownership"]

log = logging.getLogger("processor.executor.client")  # one logger for all the client's parts

_T = TypeVar("_T")
_RELEASE_SECONDS: Final = 10.0  # a released producer's flush (stop) at most; then discarded


class _Abandoned(ExecutionError):
    """The broker is gone and the executor is exiting: a take or release was cancelled."""


class _TakeFailed(KafkaStepError):
    """A take could not report the claims a previous owner left unfinished."""


class Ownership:
    """The dispatch partitions one executor owns, and their takes and releases.

    ``consumer()`` is the group consumer (None before start and after stop); ``admin()`` the
    client the ledger's committed offsets are read on."""

    def __init__(
        self,
        *,
        settings: Settings,
        group: str,
        writer: PartitionWriter,
        claimer: Claimer,
        runner: Runner,
        progress: Progress,
        stopping: asyncio.Event,
        consumer: Callable[[], AIOKafkaConsumer | None],
        admin: Callable[[], AIOKafkaConsumer | None],
        forget: Callable[[TopicPartition], object],
        give_back: Callable[[TopicPartition], None],
    ) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.group = group
        self._writer = writer
        self._claimer = claimer
        self._runner = runner
        self._progress = progress
        self._stopping = stopping
        self._consumer = consumer
        self._admin = admin
        # what was fetched of a partition and not decided: dropped (a rebalance: the next
        # position is the committed offset), or given back (the consumer sought back to it)
        self._forget = forget
        self._give_back = give_back
        self.owned: dict[int, OwnedPartition] = {}
        self.retakes: dict[int, asyncio.Task[None]] = {}  # partitions whose take failed
        self.gate = RoundGate()  # rounds side by side; a take or release alone
        self.abandoned = False
        # takes and releases in progress (they wait on the broker): abandon cancels them
        self._broker_work: set[asyncio.Task[Any]] = set()

    def owned_partitions(self) -> list[int]:
        return sorted(p for p, o in self.owned.items() if not o.lost)

    def abandon(self) -> None:
        """The broker is gone: cancel the takes and releases waiting on it; nothing more is
        flushed."""
        self.abandoned = True
        for work in self._broker_work:
            work.cancel()

    def stays_paused(self, tp: TopicPartition) -> bool:
        """Paused for another reason than the in-flight bound: a take being retried, or an
        in-order call waiting for the one before it."""
        owned = self.owned.get(tp.partition)
        return tp.partition in self.retakes or (owned is not None and owned.ordered_wait)

    async def release_all(self) -> None:
        """On stop: the running calls end, up to a bound, and are recorded, and every partition
        is released; after :meth:`abandon`, each producer is discarded instead (its open
        transaction is aborted by the next owner's InitProducerId or the transaction timeout,
        so its calls run again under the fence and the ledger)."""
        for retake in self.retakes.values():
            retake.cancel()
        self.retakes.clear()
        async with self.gate.alone():
            if not self.abandoned:
                await self.drain(list(self.owned.values()))
            for owned in list(self.owned.values()):
                if self.abandoned:
                    await discard_producer(owned.producer)
                else:
                    await self.release(owned)
            self.owned.clear()

    # ------------------------------------------------------------------ flushes

    def due(
        self, fetched: set[int], *, ends: bool, among: set[int] | None = None, busy: set[int]
    ) -> list[OwnedPartition]:
        """The partitions with something to write now, of ``among`` (None: all) and not
        ``busy`` (in a round): with ``ends``, every one with ends of finished calls; the
        ``fetched`` ones with a pending offset (records skipped) or a sweep due; the others'
        kept ends of claimed calls and sweeps that are due (:meth:`PartitionWriter.flush_due`)."""
        now = time.monotonic()
        table = [
            owned
            for owned in self.owned.values()
            if owned.partition not in busy and (among is None or owned.partition in among)
        ]
        due = {
            owned.partition: owned
            for owned in table
            if not owned.lost
            and (
                (ends and owned.finished)
                or (
                    owned.partition in fetched
                    and (owned.pending_offset is not None or owned.sweeps.due(now))
                )
            )
        }
        for owned in self._writer.flush_due(table, fetched):
            due.setdefault(owned.partition, owned)
        return list(due.values())

    async def flush(self, due: list[OwnedPartition]) -> None:
        """One transaction per partition of ``due``, side by side."""
        if due:
            await asyncio.gather(*(self._flush(owned) for owned in due))

    async def _flush(self, owned: OwnedPartition) -> None:
        """Kept ends of claimed calls, finished ends and the pending offset; a fence loses the
        partition."""
        try:
            await self._writer.flush_offsets(owned)
        except Fenced:
            self.lose(owned, None)
        except TransactionFailed:
            pass

    async def drain(self, owned: list[OwnedPartition]) -> None:
        """Wait for the handlers running on these partitions, up to
        ``executor_release_wait_seconds``; cancel the rest (their outcome is ``unknown``,
        ``executor_stopped``: they are never run again). Their ends are then in
        ``OwnedPartition.finished``, for the release to write. Their claimed calls still
        waiting for a slot never start (:meth:`Runner.withdraw`)."""
        self._runner.withdraw({o.partition for o in owned})
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

    async def on_assigned(self, assigned: list[TopicPartition]) -> None:
        """Take the assigned partitions, side by side (each has its own transactional id and
        ledger partition)."""
        tps = sorted(
            (tp for tp in assigned if tp.topic == self.topics.dispatch), key=lambda t: t.partition
        )
        for tp in tps:  # read from the committed offset on: nothing fetched before counts
            self._forget(tp)
        async with self.gate.alone():
            await asyncio.gather(*(self._take_assigned(tp) for tp in tps))

    async def _take_assigned(self, tp: TopicPartition) -> None:
        previous = self.owned.pop(tp.partition, None)
        try:
            if previous is not None:
                await self._abortable(self.release(previous))
            self.owned[tp.partition] = await self._abortable(self.take(tp.partition))
        except _Abandoned:
            if previous is not None:
                await discard_producer(previous.producer)
        except Exception as exc:  # aiokafka swallows listener errors: retry here
            self._retry_take(tp, exc)

    async def _abortable(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Run a take or release that waits on the broker, so that abandoning the broker
        (:meth:`abandon`) cancels it: :class:`_Abandoned` then."""
        if self.abandoned:
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
        consumer = self._consumer()
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.pause(tp)
        if tp.partition not in self.retakes:
            self.retakes[tp.partition] = asyncio.create_task(self._retake(tp, delay))

    async def _retake(self, tp: TopicPartition, delay: float) -> None:
        try:
            while not self._stopping.is_set():
                await asyncio.sleep(delay)
                consumer = self._consumer()
                if consumer is None or tp not in consumer.assignment():
                    return  # revoked meanwhile: the next owner takes it
                async with self.gate.alone():
                    lost = self.owned.get(tp.partition)
                    if lost is not None and not lost.lost:
                        return
                    try:
                        owned = await self._abortable(self.take(tp.partition))
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
                    self.owned[tp.partition] = owned
                    if lost is not None:
                        await discard_producer(lost.producer)  # fenced: nothing to flush
                        if lost.resume_at is not None:  # fetch the undecided records again
                            self._forget(tp)
                            consumer.seek(tp, lost.resume_at)
                    consumer.resume(tp)
                    return
        finally:
            self.retakes.pop(tp.partition, None)

    async def on_revoked(self, revoked: list[TopicPartition]) -> None:
        for tp in revoked:
            self._forget(tp)
            retake = self.retakes.pop(tp.partition, None)
            if retake is not None:
                retake.cancel()
        async with self.gate.alone():  # waits for the fetch in hand; then for its running calls
            await self.drain([o for tp in revoked if (o := self.owned.get(tp.partition))])
            for tp in revoked:
                owned = self.owned.pop(tp.partition, None)
                if owned is not None:
                    try:
                        await self._abortable(self.release(owned))
                    except _Abandoned:
                        await discard_producer(owned.producer)

    async def take(self, partition: int) -> OwnedPartition:
        """Fence the previous owner, restore the ledger, read the group's committed offset as a
        stable offset (:meth:`stable_offset`), report its unfinished claims (a take that cannot
        report them fails, and is retried: they would stay claimed otherwise), and seek the
        consumer to that offset."""
        producer = await self._writer.new_producer(partition, in_doubt=True)  # the last end
        tp = TopicPartition(self.topics.dispatch, partition)
        try:
            entries = await self.restore_ledger(partition)
            resume_at = await self.stable_offset(tp)
        except BaseException:
            await discard_producer(producer)  # nothing to flush; bounded with the broker gone
            raise
        owned = OwnedPartition(partition=partition, producer=producer, entries=entries)
        dangling = [e for e in entries.values() if e.state is EntryState.CLAIMED]
        log.info(
            "dispatch partition taken",
            extra=fields(partition=partition, entries=len(entries), unfinished=len(dangling)),
        )
        try:
            await self._claimer.record_unknown(owned, dangling, "executor_interrupted")
        except (Fenced, TransactionFailed) as exc:
            await discard_producer(owned.producer)
            raise _TakeFailed(type(exc).__name__) from None
        self._seek(tp, resume_at)
        return owned

    async def stable_offset(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp``, read after the fence as a stable offset
        (:func:`~processor.kafka.stable_offsets.stable_committed`, under the fence's bound; None:
        none committed). aiokafka's group coordinator fetched one at the assignment, before the
        fence, with an OffsetFetch that answers the offset before a transaction still pending:
        the ledger makes such a stale offset safe (its calls are found taken), so this saves
        reading them again; it is not what keeps a call from running twice."""
        admin = self._admin()
        holder = admin if admin is not None else self._consumer()
        if holder is None:
            return None  # stopped: nothing to seek
        timeout = 2 * self.settings.request_timeout_ms / 1000
        offsets = await stable_committed(holder._client, self.group, [tp], timeout=timeout)
        return offsets[tp]

    def _seek(self, tp: TopicPartition, offset: int | None) -> None:
        """Read the partition from ``offset`` on (what was fetched of it before is dropped);
        None (none committed): from where the consumer's reset (earliest) puts it."""
        consumer = self._consumer()
        if consumer is None or offset is None:
            return
        self._forget(tp)
        with contextlib.suppress(Exception):  # revoked meanwhile: the next owner's
            consumer.seek(tp, offset)

    async def restore_ledger(self, partition: int) -> dict[str, ExecutionEntry]:
        """The group's ledger partition, read to its end now."""
        return await restore_ledger_partition(
            self.settings,
            self.topics.executions,
            partition,
            self.group,
            timeout=self.settings.restore_timeout_seconds,
            offsets=self._admin(),
        )

    async def release(self, owned: OwnedPartition) -> None:
        """Its running calls end (:meth:`drain`), their ends and the offset are written, and
        its producer stops."""
        await self.drain([owned])
        if not owned.lost:
            with contextlib.suppress(Fenced, TransactionFailed):
                await self._writer.flush_offsets(owned)
        try:  # a flush waits for pending batches, which an idempotent producer retries forever
            await asyncio.wait_for(owned.producer.stop(), _RELEASE_SECONDS)
        except Exception:
            await discard_producer(owned.producer)

    def lose(self, owned: OwnedPartition, resume_at: int | None) -> None:
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
        tp = TopicPartition(self.topics.dispatch, owned.partition)
        self._give_back(tp)  # records in hand and undecided: fetched again once taken back
        delay = self.settings.session_timeout_ms / 1000
        log.warning(
            "fenced on a dispatch partition; taking it again unless a rebalance moves it",
            extra=fields(partition=owned.partition, retake_in_seconds=delay),
        )
        self._retry_take(tp, None, delay=delay)
