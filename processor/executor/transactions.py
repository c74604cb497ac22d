"""The executor's writer: a dispatch partition's outputs and offset in one transaction.

Owns :class:`PartitionWriter`: the transactional producer of an owned dispatch partition
(``new_producer``: the one owner fence, :class:`~processor.kafka.owner_fence.OwnerFence`, with
the previous owner's transaction ended), and ``transact``: the outputs and the offset past the
records in ONE transaction, retried with a new producer on transient errors, :class:`Fenced`
when another executor owns the partition. ``commit`` writes the ends of claimed calls that
finished (``OwnedPartition.finished``) with whatever else the partition's next transaction holds
(claims, refusals, the offset), keeping them to be written before anything else of the partition
when they cannot be written yet (``write_unended``).

Must not decide what to write, nor consume, nor run handlers. Every method takes the
:class:`~processor.executor.executor_state.OwnedPartition` it writes for."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, KafkaTimeoutError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from processor.core.errors import ExecutionError, KafkaStepError
from processor.executor.executor_state import (
    EndsUnrecorded,
    Fenced,
    OutRecord,
    OwnedPartition,
    TransactionFailed,
)
from processor.executor.records import EntryState, ExecutionEntry, decode_entry
from processor.kafka import hanging
from processor.kafka.batches import send_batched
from processor.kafka.clients import discard_producer, settle_unawaited
from processor.kafka.owner_fence import OwnerFence
from processor.kafka.partitioner import default_partitioner
from processor.observability.logging import fields
from processor.settings import Settings

__all__ = ["PartitionWriter"]

log = logging.getLogger("processor.executor.client")  # one logger for all the client's parts

_TXN_ATTEMPTS: Final = 5
_UNENDED_ROUNDS: Final = 3  # failed rounds of a claimed call's end before the partition is retaken
# a coordinator aborts a timed-out transaction within its cleanup interval (10 s by default)
_COORDINATOR_ABORT_S: Final = 15.0
_UNENDED_RETRY_SECONDS: Final = 2.0  # a claimed call's end unwritten, no record: tried this often


class PartitionWriter:
    """Writes outputs and offsets in one transaction of a partition's producer.

    ``admin`` gives the client the transaction coordinator is asked on (one of its own: on the
    group consumer's, a request waits behind the pending long-polled fetch); ``restore`` reads a
    ledger partition to its end (:func:`~processor.executor.ledger.restore_ledger_partition`),
    to tell, after a retry had to fence the transactional id again, whether another member
    owned the partition meanwhile; ``executor_id`` is this member's; ``paused_since`` the
    longest pause of the whole process since a moment (:class:`~processor.executor.freezes.
    FreezeWatch`)."""

    def __init__(
        self,
        settings: Settings,
        group: str,
        admin: Callable[[], AIOKafkaConsumer | None],
        *,
        executor_id: str,
        restore: Callable[[int], Awaitable[dict[str, ExecutionEntry]]],
        paused_since: Callable[[float], float] = lambda _since: 0.0,
    ) -> None:
        self.settings = settings
        self._paused_since = paused_since  # FreezeWatch.paused_since
        self.group = group
        self.topics = settings.topics
        self.executor_id = executor_id
        self._admin = admin
        self._restore = restore
        # the owner fence of each partition being taken, kept across the tries of one take
        self._owner_fences: dict[int, OwnerFence] = {}

    async def new_producer(self, partition: int, *, in_doubt: bool = False) -> AIOKafkaProducer:
        """A producer that took the partition's transactional id through the one owner fence
        the workers use too (:class:`~processor.kafka.owner_fence.OwnerFence`). ``in_doubt``:
        the last transaction may still commit (it failed after its commit was sent, or a take
        does not know how the last owner ended); the fence waits until the coordinator decides
        it. The coordinator is asked on a client of its own: on the group consumer's, it waits
        behind the pending long-polled fetch (~0.5 s a take)."""
        transactional_id = f"{self.group}.executor.{partition}"
        fence = self._owner_fences.get(partition)
        if fence is None:
            fence = self._owner_fences[partition] = OwnerFence(transactional_id, "executor")
        fence.in_doubt = fence.in_doubt or in_doubt
        admin = self._admin()
        if admin is None:
            raise KafkaTimeoutError(f"no client to fence {transactional_id} with")
        topics = (self.topics.executions, self.topics.results, self.topics.status)
        settings = self.settings

        def make_producer() -> AIOKafkaProducer:
            return AIOKafkaProducer(
                **settings.kafka_client_kwargs(),
                transactional_id=transactional_id,
                enable_idempotence=True,
                acks="all",
                transaction_timeout_ms=settings.transaction_timeout_ms,
                max_request_size=settings.max_message_bytes,
                # a transaction's records for one partition leave in one batch (send_batched)
                max_batch_size=min(settings.producer_batch_bytes, settings.max_message_bytes),
                # results and statuses are keyed by turn: murmur2 cached, as the workers'
                partitioner=default_partitioner,
            )

        async def partitions(client: Any) -> list[TopicPartition]:
            return await hanging.partitions_of(client, topics)

        producer = await fence.take(
            admin._client, settings, make_producer, partitions, what=f"dispatch[{partition}]"
        )
        self._owner_fences.pop(partition, None)  # taken: the next take starts afresh
        return producer

    async def flush_offsets(self, owned: OwnedPartition) -> None:
        """The partition's kept ends, finished ends and pending offset; then its sweep."""
        if owned.lost:
            return
        if owned.unended:
            await self.write_unended(owned)
        if owned.finished or owned.pending_offset is not None:
            await self.commit(owned, [], None)
        await self.sweep_skipped(owned)

    async def sweep_skipped(self, owned: OwnedPartition) -> None:
        """Between transactions: COMMIT what the coordinator committed for this partition's
        producer without a marker on an output partition
        (:func:`processor.kafka.hanging.end_skipped_commits`), when ``owned.sweeps`` says it
        is due (bounded; one that fails is tried again later)."""
        if owned.lost or owned.discarded:
            return
        await hanging.sweep(
            owned.producer,
            owned.sweeps,
            time.monotonic(),
            transactional_id=f"{self.group}.executor.{owned.partition}",
            topics=(self.topics.executions, self.topics.results, self.topics.status),
            owner="executor",
            partition=owned.partition,
        )

    async def transact(
        self, owned: OwnedPartition, outputs: list[OutRecord], next_offset: int | None
    ) -> None:
        """Write ``outputs`` and commit the offset ``next_offset`` (or a pending one) in ONE
        transaction of the partition's producer.

        Each attempt runs under ``commit_timeout_seconds`` (below the transaction timeout), as
        the worker's commit step does: aiokafka waits for a transaction's end without a bound,
        and an idempotent producer retries a batch forever, so an attempt caught by a broker
        outage (or a coordinator that answers CONCURRENT_TRANSACTIONS) would otherwise wait
        until the coordinator times the transaction out and fences the producer.

        Transient errors and timeouts: a new producer with the same transactional id (its
        InitProducerId completes or aborts the failed transaction; one that completed is not
        written again, see below; entries are keyed, results carry a stable ``result_id``), up to
        ``_TXN_ATTEMPTS``; then :class:`TransactionFailed`. Fencing: :class:`Fenced`.

        A new producer fences whoever holds the transactional id now, and that may be the
        partition's rightful owner: this member may have been stopped (SIGSTOP, a long GC, a
        frozen VM) past its session, the group may have given the partition to another member,
        which took it and wrote to the ledger, while this one still believes it owns it (its
        consumer learns of the rebalance only at its next poll). Writing its stale ends and
        claims then would report a call twice and run one twice (chaos seeds 22 and 23). So
        once a retry has its new producer, the ledger partition is read again
        (:meth:`_still_ours`): an entry of another member that this one does not hold as it
        is means the partition was owned by another meanwhile, and this member gives it up
        (:class:`Fenced`: nothing of it is written; the next owner reports its claims
        ``unknown``, never run again).

        The ledger read again also tells whether the failed attempt committed after all (its
        commit timed out on this side but reached the coordinator, whose decision the new
        producer's fence waited for): when every ledger entry the attempt wrote is there as
        written, the attempt is done and is not written again. Before, the retry wrote the same
        ends a second time: a call reported twice by the same member (chaos seed 22, a broker
        down while ends were committed).
        """
        offset = next_offset if next_offset is not None else owned.pending_offset
        for attempt in range(1, _TXN_ATTEMPTS + 1):
            if owned.lost:
                raise Fenced
            if owned.discarded:  # the last attempt failed and no new producer could be made
                try:
                    owned.producer = await self.new_producer(
                        owned.partition, in_doubt=owned.in_doubt
                    )
                except ProducerFenced:
                    owned.lost = True
                    raise Fenced from None
                except (KafkaError, hanging.TransactionHeld, hanging.HangingError) as exc:
                    log.warning(
                        "executor transaction: no new producer yet; retrying",
                        extra=fields(
                            partition=owned.partition, attempt=attempt, error=type(exc).__name__
                        ),
                    )
                    await asyncio.sleep(min(2.0, 0.2 * attempt))
                    continue
                owned.discarded = owned.in_doubt = False
                ledger = await self._still_ours(owned, outputs)
                if ledger is None:
                    owned.lost = True
                    await discard_producer(owned.producer)
                    raise Fenced
                if self._committed_before(ledger, outputs):
                    log.info(
                        "executor transaction: the failed attempt had committed; not written again",
                        extra=fields(partition=owned.partition, attempt=attempt),
                    )
                    self._done(owned, offset)
                    return
            producer = owned.producer
            began = time.monotonic()
            try:
                async with asyncio.timeout(self.settings.commit_timeout_seconds):
                    await self.one_transaction(owned, producer, outputs, offset)
            except (ProducerFenced, AssertionError):
                # aiokafka reports a fenced producer's later calls as a bare AssertionError
                owned.lost = True
                await discard_producer(producer)
                raise Fenced from None
            except (KafkaError, TimeoutError) as exc:
                paused = self._paused_since(began)
                if paused * 1000 >= self.settings.session_timeout_ms:
                    # paused past the session (SIGSTOP, a frozen VM): the group may have given
                    # the partition to another member, whose producer a new one here would
                    # fence (its finished calls then reported unknown: chaos seed 27). Give
                    # it up; a take after the rebalance decides (and reports the ends unknown)
                    log.warning(
                        "this member was paused past its session; giving the partition up",
                        extra=fields(
                            partition=owned.partition,
                            paused_seconds=round(paused, 1),
                            error=type(exc).__name__,
                        ),
                    )
                    owned.lost = True
                    await discard_producer(producer)
                    raise Fenced from None
                log.warning(
                    "executor transaction failed; retrying with a new producer",
                    extra=fields(
                        partition=owned.partition, attempt=attempt, error=type(exc).__name__
                    ),
                )
                await discard_producer(producer)  # never deliver the failed batch later
                owned.discarded = True  # the next attempt starts with a new producer
                await asyncio.sleep(min(2.0, 0.2 * attempt))
                continue
            self._done(owned, offset)
            return
        raise TransactionFailed

    @staticmethod
    def _done(owned: OwnedPartition, offset: int | None) -> None:
        owned.sweeps.committed = True
        if offset is not None and offset >= (owned.pending_offset or 0):
            owned.pending_offset = None

    def _committed_before(
        self, ledger: dict[str, ExecutionEntry], outputs: list[OutRecord]
    ) -> bool:
        """Whether the ledger read after a new producer holds every ledger entry of ``outputs``
        as written (so the failed attempt that wrote them committed). Outputs without a ledger
        entry (an offset, refusals only) tell nothing: False, and they are written again."""
        written = [
            decode_entry(value)
            for topic, _key, value, _headers, _partition in outputs
            if topic == self.topics.executions and value is not None
        ]
        return bool(written) and all(ledger.get(e.dispatch_id) == e for e in written)

    async def _still_ours(
        self, owned: OwnedPartition, outputs: list[OutRecord]
    ) -> dict[str, ExecutionEntry] | None:
        """The partition's ledger read again, or None when another member wrote to it since
        this one's view of it (``owned.entries``): every entry of another member must be one
        this member holds, in the same state; an entry under this member's own id must be one
        it holds (its claim, or the state it holds; ``claimed`` while its end waits to be
        written) or one of ``outputs`` (the attempt in doubt). So two members given the same
        ``--executor-id`` are not taken for one. A ledger that cannot be read now counts as
        written by another (fail closed: the partition is given up and taken again from the
        ledger)."""
        try:
            async with asyncio.timeout(self.settings.commit_timeout_seconds):
                ledger = await self._restore(owned.partition)
        except (KafkaError, TimeoutError, ExecutionError, KafkaStepError) as exc:
            log.warning(
                "executor transaction: the ledger could not be read after a new producer; "
                "the partition is given up and taken again",
                extra=fields(partition=owned.partition, error=type(exc).__name__),
            )
            return None
        attempted = {
            (written.dispatch_id, written.state)
            for written in (
                decode_entry(value)
                for topic, _key, value, _headers, _partition in outputs
                if topic == self.topics.executions and value is not None
            )
        }
        for dispatch_id, entry in ledger.items():
            held = owned.entries.get(dispatch_id)
            if entry.executor_id == self.executor_id and (
                (dispatch_id, entry.state) in attempted  # the attempt in doubt, committed
                or (
                    held is not None
                    and held.executor_id == self.executor_id
                    and entry.state in (held.state, EntryState.CLAIMED)
                )
            ):
                continue  # this member's own
            if held is None or (held.executor_id, held.state) != (entry.executor_id, entry.state):
                log.warning(
                    "another member owned this dispatch partition meanwhile; giving it up",
                    extra=fields(
                        partition=owned.partition,
                        dispatch_id=dispatch_id,
                        by=entry.executor_id,
                        state=entry.state.value,
                    ),
                )
                return None
        return ledger

    async def one_transaction(
        self,
        owned: OwnedPartition,
        producer: AIOKafkaProducer,
        outputs: list[OutRecord],
        offset: int | None,
    ) -> None:
        """One attempt: begin, send ``outputs``, the offset, commit (``transact`` retries it)."""
        await producer.begin_transaction()
        futures: list[asyncio.Future[Any]] = []
        try:
            await send_batched(producer, outputs, futures)
            if offset is not None:
                tp = TopicPartition(self.topics.dispatch, owned.partition)
                await producer.send_offsets_to_transaction(
                    {tp: OffsetAndMetadata(offset, "")}, self.group
                )
            await asyncio.gather(*futures)
        except BaseException:
            settle_unawaited(futures)  # failed with the discarded producer: never awaited
            raise
        owned.in_doubt = True  # until it returns: a failure from here on may still commit
        await producer.commit_transaction()
        owned.in_doubt = False

    async def commit(
        self, owned: OwnedPartition, outputs: list[OutRecord], next_offset: int | None
    ) -> None:
        """One transaction of the partition: the ends of its claimed calls that finished since
        the last one (``owned.finished``; a call's claim had a transaction of its own), then
        ``outputs`` (claims, refusals), and the offset (:meth:`_transact`).

        If it fails, those ends are kept and written before anything else of the partition
        (:meth:`write_unended`): the next record waits for them, and the loop tries again
        meanwhile; the claims stay in the ledger until then, so an owner after this one
        reports the calls ``unknown`` from them (never run again). Without this, a member that
        kept the partition (no rebalance after a whole-cluster restart) left a claim open and
        its call unreported for good (chaos seed 4 on three brokers). Fenced: the ends are
        dropped, and the next owner reports the calls ``unknown`` from their claims."""
        finished, owned.finished = owned.finished, []
        written = [out for end in finished for out in end.outputs]
        try:
            await self.transact(owned, written + outputs, next_offset)
        except TransactionFailed:
            for end in finished:
                owned.unended[end.dispatch_id] = end.outputs
            if finished:
                log.error(
                    "could not record the end of claimed calls yet; they are written before "
                    "anything else of their partition",
                    extra=fields(
                        partition=owned.partition,
                        dispatch_ids=[end.dispatch_id for end in finished][:20],
                    ),
                )
            raise

    def flush_due(
        self, owned_partitions: list[OwnedPartition], fetched: set[int]
    ) -> list[OwnedPartition]:
        """Partitions with no record fetched that are due a flush: their kept ends of claimed
        calls another try (a fetch writes them before its first record; the last try was
        ``_UNENDED_RETRY_SECONDS`` ago or more), or their sweep (:meth:`sweep_skipped`)."""
        now = time.monotonic()
        due = [
            owned
            for owned in owned_partitions
            if owned.unended and not owned.lost and owned.partition not in fetched
            if now >= owned.unended_retry_at
        ]
        for owned in due:
            owned.unended_retry_at = now + _UNENDED_RETRY_SECONDS
        # and, with no record fetched either, those whose sweep is due (sweep_skipped)
        return due + [
            owned
            for owned in owned_partitions
            if owned.partition not in fetched and not owned.unended
            if not (owned.lost or owned.discarded) and owned.sweeps.due(now)
        ]

    async def write_unended(self, owned: OwnedPartition) -> None:
        """Write the kept ends of claimed calls, oldest first. Raises as :meth:`_transact`; a
        round that fails for the ``_UNENDED_ROUNDS``-th time in a row raises
        :class:`EndsUnrecorded` instead (a fence's handling: the partition is taken again, and
        the take reports those calls ``unknown`` from their claims), so that an end that can
        never be written holds its partition for a bounded time only."""
        for dispatch_id, outputs in list(owned.unended.items()):
            try:
                await self.transact(owned, outputs, None)
            except TransactionFailed:
                owned.unended_failures += 1
                if owned.unended_failures >= _UNENDED_ROUNDS:
                    raise EndsUnrecorded from None
                raise
            del owned.unended[dispatch_id]
            owned.unended_failures = 0
            log.info(
                "end of a claimed call recorded",
                extra=fields(partition=owned.partition, dispatch_id=dispatch_id),
            )
