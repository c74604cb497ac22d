"""Hanging transactions: find open transactions on partitions and abort them (KIP-664).

A transaction coordinator that cannot reach a partition's leader may complete an abort without
writing its marker there (Kafka then takes the partition for deleted; docs/reliability.md, "Seed
19"). The partition keeps an open transaction that nothing ends: it holds the last stable offset
of ``read_committed`` readers, and the same producer id's next commit marker on that partition
makes the aborted records visible.

aiokafka has no admin call for this; :mod:`processor.kafka.txn_admin` speaks the requests
``kafka-transactions.sh find-hanging`` and ``abort`` use (DescribeProducers, WriteTxnMarkers)
and DescribeTransactions, on aiokafka's protocol layer. This module is the policy over them:
which open transactions are a task's own and hanging, whether each gets an ABORT or (its
coordinator had committed) a COMMIT marker, and holding the task when it may not write them.
Its public names include the admin calls' (re-exported), so callers import one module.

:func:`hold_before_fence` runs just before a task's ``InitProducerId``: a commit the coordinator
made without a marker here, which the task may not write, holds the task there, before
``InitProducerId`` makes the coordinator forget it.
:func:`end_own_hanging` is what a task's transactional producer runs after ``InitProducerId``
and before it writes anything (:mod:`processor.runtime.partition`,
:mod:`processor.executor.client`). ``InitProducerId`` returns only once the coordinator has
completed the previous transaction of the id, so any transaction of the producer id still open on
a partition then is hanging. Without the permissions it raises :class:`TransactionHeld`: the task
is held (never commits over the open transaction), with one error log line (the partitions, the
marker the coordinator's decision calls for on each, and ``processor doctor transactions``) and
the ``toolcall_hanging_transaction_held`` gauge naming the partition.

``processor doctor transactions`` (:mod:`processor.cli.doctor`, its policy in
:mod:`processor.kafka.txn_remedies`) lists them for an operator, and ends those whose
coordinator's decision it can still read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiokafka.structs import TopicPartition

from processor.core.errors import KafkaStepError
from processor.kafka.txn_admin import (
    HangingError,
    OpenTransaction,
    Previous,
    _Client,
    abort_transactions,
    describe_open_transactions,
    may_write_markers,
    partitions_of,
    previous_transaction,
)
from processor.observability import metrics
from processor.observability.logging import fields

log = logging.getLogger(__name__)

__all__ = [
    "HangingError",
    "OpenTransaction",
    "Previous",
    "SweepSchedule",
    "TransactionHeld",
    "abort_transactions",
    "across_retries",
    "decided_previous",
    "describe_open_transactions",
    "doctor_command",
    "end_own_hanging",
    "end_skipped_commits",
    "hold_before_fence",
    "partitions_of",
    "previous_transaction",
    "sweep",
]

_DONE: Final = {"abort": "aborted", "commit": "committed"}


class TransactionHeld(KafkaStepError):
    """Open transactions of a task's own producer id that it may not end: the task is held."""

    def __init__(self, transactional_id: str, open_txns: Sequence[OpenTransaction], why: str):
        names = ", ".join(f"{t.topic}-{t.partition}" for t in open_txns) or "its output partitions"
        super().__init__(f"{transactional_id}: open transactions on {names} ({why})")
        self.transactional_id = transactional_id
        self.open = tuple(open_txns)
        self.why = why


def doctor_command(bootstrap: str) -> str:
    """The command that shows an operator what ends a held task's open transactions: ``processor
    doctor transactions``, whose remedy follows the coordinator (never a bare abort: the held
    transaction may be one the coordinator committed)."""
    return shlex.join(["processor", "doctor", "transactions", "--bootstrap-servers", bootstrap])


# ---------------------------------------------------------------------- a task's own

_UNDECIDED: Final = "Ongoing"  # the only state a stray EndTxn of the old epoch can still move
_POLL_SECONDS: Final = 0.25
_REQUEST_TIMED_OUT: Final = 7


async def decided_previous(
    client: _Client, transactional_id: str, *, in_doubt: bool, bound: float
) -> Previous | None:
    """:func:`previous_transaction`, once the coordinator has decided that transaction's end.

    ``in_doubt``: our own last transaction of this id failed after its EndTxn(commit) was sent
    (the commit step timed out waiting for the answer), or we do not know how the last owner of
    the id ended (a partition just assigned or taken: it may have died with its EndTxn sent; a
    crashed owner's transaction is usually decided by its timeout by then). That request may
    still sit unread at a slow coordinator; read ``Ongoing`` now, the transaction can still
    commit after this read and before our ``InitProducerId``, and a marker the coordinator then
    skipped would get an ABORT from :func:`end_own_hanging`: its dispatch records gone, its
    changelog and offsets committed (a call dispatched in the state, never on the topic). So an
    in-doubt ``Ongoing`` is read again until the coordinator decides: the EndTxn commits it, or
    the coordinator aborts it at its timeout (bumping the epoch, which fences the stray
    request). Past ``bound`` (the transaction timeout and the coordinator's abort interval),
    HangingError: the preparation fails and is tried again, still in doubt; it never guesses.
    """
    started = time.monotonic()
    undecided = False  # seen Ongoing at least once: the decision is logged
    while True:
        previous = await previous_transaction(client, transactional_id)
        waited = time.monotonic() - started
        if not in_doubt or previous is None or previous.state != _UNDECIDED:
            if undecided:
                log.info(
                    "transaction in doubt decided",
                    extra=fields(
                        transactional_id=transactional_id,
                        coordinator_state=previous.state if previous is not None else None,
                        waited_seconds=round(waited, 2),
                    ),
                )
            return previous
        if waited >= bound:
            raise HangingError(
                f"{transactional_id}: our last transaction is still Ongoing {waited:.0f} s after "
                "its commit was sent; the coordinator has neither committed nor aborted it",
                _REQUEST_TIMED_OUT,
            )
        undecided = True
        await asyncio.sleep(_POLL_SECONDS)


def across_retries(fresh: Previous | None, before: Previous | None) -> Previous | None:
    """What a retried fence should take for the last transaction's end.

    ``before``: what the failed try read, before an ``InitProducerId`` that may have gone
    through although its answer was lost (the try failed after it). ``fresh``: what the retry
    reads now. ``InitProducerId`` leaves the id ``Empty``, which forgets how the transaction
    before it ended. So a fresh ``Empty`` of the same producer id, after a try that read
    something else, means no transaction began since that try's read, and the open ones of that
    producer id are still the ones ``before`` describes: ``before`` is kept, if the epoch moved
    by what that one ``InitProducerId`` bumps (one, or two when it aborted an open transaction).
    Anything else (a new transaction since, another producer id, more fences since, nothing
    kept) is read as it is now."""
    if before is None or fresh is None:
        return fresh
    bumped = fresh.producer_epoch - before.producer_epoch
    if fresh.state == "Empty" and fresh.producer_id == before.producer_id and bumped in (1, 2):
        return before
    return fresh


async def hold_before_fence(
    client: _Client,
    *,
    previous: Previous | None,
    transactional_id: str,
    partitions: Iterable[TopicPartition],
    owner: str,
    bootstrap: str,
) -> None:
    """Before ``InitProducerId``: hold the task, rather than make the coordinator forget a
    commit it cannot write.

    When ``previous`` (:func:`decided_previous`, read just before) says the id's last
    transaction was committed, the transactions of that producer id and epoch still open on
    ``partitions`` are committed ones whose marker was skipped (seed 19, committed), and
    :func:`end_own_hanging` gives them the COMMIT marker after ``InitProducerId`` (which fences
    any older owner first). But ``InitProducerId`` leaves the id ``Empty``: a task that then
    may not write the marker (no ClusterAction), once retried or restarted, could no longer
    tell that commit from an abort, nor could ``processor doctor transactions``, and the
    committed dispatch would end up aborted. So when there are such transactions, the
    permission is asked first (:func:`~processor.kafka.txn_admin.may_write_markers`, which
    writes nothing) and, without it, :class:`TransactionHeld` is raised before
    ``InitProducerId``: the coordinator keeps its decision for the next try and the doctor."""
    if previous is None or not previous.committed:
        return
    try:
        committed = [
            t
            for t in await describe_open_transactions(client, partitions)
            if (t.producer_id, t.producer_epoch) == (previous.producer_id, previous.producer_epoch)
        ]
    except HangingError as exc:
        if not exc.denied:
            raise
        _hold(owner, transactional_id, [], str(exc), bootstrap, markers=[])
        raise TransactionHeld(transactional_id, [], str(exc)) from exc
    if not committed or await may_write_markers(client):
        return
    why = "ClusterAuthorizationFailedError: may not write the COMMIT marker (WriteTxnMarkers)"
    _hold(owner, transactional_id, committed, why, bootstrap, markers=["commit"] * len(committed))
    raise TransactionHeld(transactional_id, committed, why)


async def end_own_hanging(
    client: _Client,
    *,
    producer_id: int,
    transactional_id: str,
    partitions: Iterable[TopicPartition],
    owner: str,
    bootstrap: str,
    previous: Previous | None = None,
) -> list[OpenTransaction]:
    """End the open transactions of ``producer_id`` on ``partitions``; return them.

    Call after ``InitProducerId`` and before the producer writes anything: every transaction of
    the producer id still open then is hanging. It is aborted, unless ``previous`` (read by
    :func:`previous_transaction` before ``InitProducerId``) says the coordinator committed the
    last transaction of that producer id: then its skipped partitions get the COMMIT marker the
    coordinator meant to write. ``previous``'s producer id is looked for too (InitProducerId
    gives a new one when the epoch runs out). ``owner`` (``worker``/``executor``) labels the
    metric. Without permission (TOPIC_AUTHORIZATION_FAILED on DescribeProducers,
    CLUSTER_AUTHORIZATION_FAILED on WriteTxnMarkers) raises :class:`TransactionHeld`, after one
    error log line per transactional id and hold (not one per retry); the held gauge is set
    for the open partitions and cleared once this succeeds."""
    wanted = list(partitions)
    try:
        open_txns = [
            t
            for t in await describe_open_transactions(client, wanted)
            if t.producer_id == producer_id
            or (previous is not None and t.producer_id == previous.producer_id)
        ]
    except HangingError as exc:
        if not exc.denied:
            raise
        _hold(owner, transactional_id, [], str(exc), bootstrap, markers=[])
        raise TransactionHeld(transactional_id, [], str(exc)) from exc
    committed_id = previous.producer_id if previous is not None and previous.committed else None
    to_commit = [t for t in open_txns if t.producer_id == committed_id]
    to_abort = [t for t in open_txns if t not in to_commit]
    for marker, txns in (("abort", to_abort), ("commit", to_commit)):
        if not txns:
            continue
        try:
            await abort_transactions(client, txns, commit=marker == "commit")
        except HangingError as exc:
            if not exc.denied:
                raise
            markers = ["commit" if t in to_commit else "abort" for t in open_txns]
            _hold(owner, transactional_id, open_txns, str(exc), bootstrap, markers=markers)
            raise TransactionHeld(transactional_id, open_txns, str(exc)) from exc
        metrics.HANGING_TRANSACTIONS_ENDED.labels(owner, marker).inc(len(txns))
        log.warning(
            f"hanging transactions of our producer id {_DONE[marker]}",
            extra=fields(
                transactional_id=transactional_id,
                producer_id=txns[0].producer_id,
                partitions=[f"{t.topic}-{t.partition}" for t in txns],
                start_offsets=[t.start_offset for t in txns],
                coordinator_state=previous.state if previous is not None else None,
            ),
        )
    _release(transactional_id)
    return open_txns


async def end_skipped_commits(
    client: _Client,
    *,
    producer_id: int,
    producer_epoch: int,
    transactional_id: str,
    partitions: Iterable[TopicPartition],
    owner: str,
) -> list[OpenTransaction]:
    """COMMIT what the coordinator committed without a marker while our producer lives on.

    A commit that succeeded for us can still leave one partition without its marker (the
    coordinator gives up on a partition it takes for deleted, as in seed 19). Nothing ends that
    transaction there but the same producer id's next transaction on the partition: until one
    comes, the records are invisible to ``read_committed`` readers, and so is everything after
    them (a dispatch an executor never sees, in a quiet partition for good). Call between two
    transactions of the producer (none of ours in flight): when the coordinator says our last
    transaction is ``CompleteCommit`` (its markers written or given up), every transaction of
    our producer id and current epoch still open on ``partitions`` is a committed one whose
    marker was skipped, and gets the COMMIT marker. Anything else (another state, another
    epoch) is left to the next fence, which knows how it ended. Returns what it committed."""
    previous = await previous_transaction(client, transactional_id)
    if previous is None or previous.state != "CompleteCommit":
        return []
    if (previous.producer_id, previous.producer_epoch) != (producer_id, producer_epoch):
        return []  # another owner's epoch: its fence ends what is open
    skipped = [
        t
        for t in await describe_open_transactions(client, partitions)
        if t.producer_id == producer_id and t.producer_epoch == producer_epoch
    ]
    if not skipped:
        return []
    await abort_transactions(client, skipped, commit=True)
    metrics.HANGING_TRANSACTIONS_ENDED.labels(owner, "commit").inc(len(skipped))
    log.warning(
        "committed transactions of our producer id left open by the coordinator: committed",
        extra=fields(
            transactional_id=transactional_id,
            producer_id=producer_id,
            partitions=[f"{t.topic}-{t.partition}" for t in skipped],
            start_offsets=[t.start_offset for t in skipped],
        ),
    )
    return skipped


SWEEP_INTERVAL_S: Final = 30.0  # how often a producer's partitions are swept, after a commit
SWEEP_TIMEOUT_S: Final = 5.0  # how long one sweep may take (a broker away: the next one asks)


@dataclass
class SweepSchedule:
    """When a producer's output partitions are next swept (:func:`sweep`): at most every
    ``SWEEP_INTERVAL_S``, and only after a commit since the last sweep that succeeded."""

    committed: bool = False  # a commit since the last sweep that succeeded
    swept_at: float = 0.0  # monotonic time of the last sweep

    def due(self, now: float) -> bool:
        return self.committed and now - self.swept_at >= SWEEP_INTERVAL_S


async def sweep(
    producer: Any,
    schedule: SweepSchedule,
    now: float,
    *,
    transactional_id: str,
    topics: Iterable[str],
    also: Iterable[TopicPartition] = (),
    owner: str,
    partition: int,
) -> None:
    """:func:`end_skipped_commits` for ``producer`` (an AIOKafkaProducer between two of its
    transactions) over every partition of ``topics`` and ``also``, when ``schedule`` says it is
    due, within ``SWEEP_TIMEOUT_S``. One that could not ask (a broker away) is logged and
    leaves the schedule due at the next interval."""
    if not schedule.due(now):
        return
    schedule.swept_at = now
    try:
        async with asyncio.timeout(SWEEP_TIMEOUT_S):
            partitions = await partitions_of(producer.client, topics) + list(also)
            await end_skipped_commits(
                producer.client,
                producer_id=producer._txn_manager.producer_id,
                producer_epoch=producer._txn_manager.producer_epoch,
                transactional_id=transactional_id,
                partitions=partitions,
                owner=owner,
            )
    except Exception as exc:
        log.info(
            "sweep for skipped commit markers failed; tried again later",
            extra=fields(partition=partition, owner=owner, error=type(exc).__name__),
        )
        return  # still due: the next interval asks again
    schedule.committed = False


# transactional id → the labels of its held gauge (one error line per hold)
_held: dict[str, list[tuple[str, str, str]]] = {}


def _hold(
    owner: str,
    transactional_id: str,
    open_txns: Sequence[OpenTransaction],
    why: str,
    bootstrap: str,
    *,
    markers: Sequence[str],
) -> None:
    """``markers``: the marker the task would write on each of ``open_txns`` (``commit`` where
    the coordinator had committed that transaction)."""
    if transactional_id in _held:
        return
    labels = [(owner, t.topic, str(t.partition)) for t in open_txns] or [(owner, "unknown", "")]
    for label in labels:
        metrics.HANGING_TRANSACTION_HELD.labels(*label).set(1)
    _held[transactional_id] = labels
    log.error(
        "partition held: our producer id has an open transaction we may not end; grant "
        "ClusterAction (and READ on the output topics) and the task ends it as its coordinator "
        "decided (markers); the command shows what is open and how it ended",
        extra=fields(
            transactional_id=transactional_id,
            partitions=[f"{t.topic}-{t.partition}" for t in open_txns],
            markers=list(markers),
            error=why,
            command=doctor_command(bootstrap),
        ),
    )


def _release(transactional_id: str) -> None:
    for label in _held.pop(transactional_id, []):
        with contextlib.suppress(KeyError):
            metrics.HANGING_TRANSACTION_HELD.remove(*label)
