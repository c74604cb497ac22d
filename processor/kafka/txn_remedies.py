"""What ``processor doctor transactions`` does about each open transaction: the remedy that
follows its coordinator's decision.

Owns the operator's side of hanging transactions: which open transactions are this
deployment's own (its transactional ids, from the settings), how each one's coordinator left it
(DescribeTransactions, :func:`processor.kafka.txn_admin.previous_transaction`, the read the
tasks' own fence uses) and so which marker, if any, may end it; and writing those markers after
checking that the coordinator still says the same. The wire calls are
:mod:`processor.kafka.txn_admin`'s; a task's own fence is :mod:`processor.kafka.hanging`.

The verdicts (:class:`Verdict`), for a transaction open on a partition (DescribeProducers):

- ``foreign``: its producer id is none of this deployment's transactional ids' (the worker's
  ``{application_id}-{partition}``, the executors' ``{group}.executor.{partition}``). Another
  application's, or one the coordinator forgot: never touched.
- ``open``: its coordinator has it ``Ongoing`` with the same producer epoch: a live
  transaction, which its coordinator ends (commit, or abort past the transaction's own timeout).
- ``ending``: the coordinator decided it (``Prepare*``/``Complete*``, same epoch) less than the
  transaction's own timeout plus ``grace`` after it began: its markers, or the task's sweep, may
  still come, and its producer may be starting the next transaction. Asked again later.
- ``commit``: the coordinator committed it (``PrepareCommit``/``CompleteCommit``, same epoch)
  and this partition has no marker past that time: the COMMIT marker the coordinator skipped.
  Every transaction of one producer id and epoch still open when its coordinator reads
  ``CompleteCommit`` is a committed one (a task's aborted transaction ends its producer: the
  next one bumps the epoch), as :func:`processor.kafka.hanging.end_skipped_commits` relies on.
- ``abort``: the coordinator aborted it (``PrepareAbort``/``CompleteAbort``, same epoch): the
  ABORT marker it skipped.
- ``undecided``: ours, but the coordinator has moved on (another epoch: a fence's
  ``InitProducerId`` or a timeout's abort since; ``Empty``, ``Dead``): how this transaction
  ended is no longer known to it, so no marker is guessed. The task that owns the id ends it
  at its fence (it read the coordinator before its ``InitProducerId``; a held one says which
  marker in its ``partition held`` line) once it has READ and ClusterAction.

Record timestamps never decide anything: a producer idle for minutes may be inside a long
transaction (another application's 15-minute one).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiokafka.structs import TopicPartition

from processor.kafka.txn_admin import (
    OpenTransaction,
    Previous,
    _Client,
    abort_transactions,
    describe_open_transactions,
    partitions_of,
    previous_transaction,
)

__all__ = [
    "Finding",
    "Verdict",
    "carry_out",
    "examine",
    "judge",
    "own_transactional_ids",
]

_COMMITTED: Final = frozenset({"PrepareCommit", "CompleteCommit"})
_ABORTED: Final = frozenset({"PrepareAbort", "CompleteAbort"})


class Verdict(enum.StrEnum):
    FOREIGN = "foreign"
    OPEN = "open"
    ENDING = "ending"
    COMMIT = "commit"
    ABORT = "abort"
    UNDECIDED = "undecided"


_ACTS: Final = frozenset({Verdict.COMMIT, Verdict.ABORT})
_HANGING: Final = frozenset({Verdict.COMMIT, Verdict.ABORT, Verdict.UNDECIDED})


@dataclass(frozen=True)
class Finding:
    """One open transaction, whose it is, how its coordinator left it, and the verdict."""

    txn: OpenTransaction
    verdict: Verdict
    why: str
    transactional_id: str | None = None
    coordinator: Previous | None = None

    @property
    def acts(self) -> bool:
        """Whether the doctor writes a marker for it (``commit`` or ``abort``)."""
        return self.verdict in _ACTS

    @property
    def hanging(self) -> bool:
        """Nothing but a marker from outside ends it (``commit``, ``abort``, ``undecided``)."""
        return self.verdict in _HANGING


def own_transactional_ids(
    settings: Any, input_partitions: int, dispatch_partitions: int, executor_groups: Iterable[str]
) -> list[str]:
    """This deployment's transactional ids: the worker's per input partition
    (:meth:`~processor.settings.Settings.transactional_id`) and each executor group's per
    dispatch partition (:mod:`processor.executor.transactions`)."""
    ids = [settings.transactional_id(p) for p in range(input_partitions)]
    for group in dict.fromkeys(executor_groups):
        ids += [f"{group}.executor.{p}" for p in range(dispatch_partitions)]
    return ids


def judge(
    txn: OpenTransaction,
    owners: Mapping[int, tuple[str, Previous]],
    now_ms: int,
    grace_ms: int,
) -> Finding:
    """The verdict on ``txn`` (see the module docstring). ``owners``: producer id → (our
    transactional id, its coordinator's state). Pure."""
    owner = owners.get(txn.producer_id)
    if owner is None:
        return Finding(txn, Verdict.FOREIGN, "not a transactional id of this deployment")
    tid, coordinator = owner
    state = coordinator.state
    if coordinator.producer_epoch != txn.producer_epoch:
        why = (
            f"the coordinator has moved on ({state}, epoch {coordinator.producer_epoch}): "
            "how it ended is no longer known to it; its task ends it at its fence"
        )
        return Finding(txn, Verdict.UNDECIDED, why, tid, coordinator)
    if state == "Ongoing":
        why = f"ongoing at its coordinator (timeout {coordinator.timeout_ms / 1000:g} s)"
        return Finding(txn, Verdict.OPEN, why, tid, coordinator)
    if state not in _COMMITTED | _ABORTED:
        why = f"the coordinator reads {state}: how it ended is not known to it"
        return Finding(txn, Verdict.UNDECIDED, why, tid, coordinator)
    decided = "committed" if state in _COMMITTED else "aborted"
    due_ms = coordinator.start_ms + coordinator.timeout_ms + grace_ms
    if coordinator.start_ms < 0 or now_ms < due_ms:
        why = (
            f"{decided} by its coordinator ({state}) within its timeout and the grace: its "
            "markers may still come"
        )
        return Finding(txn, Verdict.ENDING, why, tid, coordinator)
    verdict = Verdict.COMMIT if state in _COMMITTED else Verdict.ABORT
    why = f"{decided} by its coordinator ({state}), the marker here skipped"
    return Finding(txn, verdict, why, tid, coordinator)


@dataclass(frozen=True)
class Examination:
    findings: list[Finding]
    partitions: int  # how many partitions were asked


async def examine(
    client: _Client,
    settings: Any,
    executor_groups: Sequence[str],
    *,
    now_ms: int,
    grace_ms: int,
) -> Examination:
    """Every open transaction on the deployment's topics, judged. Raises
    :class:`~processor.kafka.txn_admin.HangingError` (``denied``, ``permission``) or the
    client's authorisation errors when the principal may not ask."""
    topics = settings.topics
    partitions = await partitions_of(client, topics.all().values())
    found = await describe_open_transactions(client, partitions)
    owners: dict[int, tuple[str, Previous]] = {}
    if found:
        inputs = len(await client._wait_on_metadata(topics.fragments))
        dispatch = len(await client._wait_on_metadata(topics.dispatch))
        wanted = {t.producer_id for t in found}
        for tid in own_transactional_ids(settings, inputs, dispatch, executor_groups):
            coordinator = await previous_transaction(client, tid)
            if coordinator is not None and coordinator.producer_id in wanted:
                owners[coordinator.producer_id] = (tid, coordinator)
    findings = [judge(t, owners, now_ms, grace_ms) for t in found]
    return Examination(findings, len(partitions))


async def carry_out(client: _Client, finding: Finding) -> bool:
    """Write ``finding``'s marker, if its coordinator still reads what it was judged on (the
    same state, producer id, epoch and start). False: it moved on, nothing written (examine
    again). Raises :class:`~processor.kafka.txn_admin.HangingError` (``denied``: no
    ClusterAction)."""
    if not finding.acts or finding.transactional_id is None or finding.coordinator is None:
        return False
    now = await previous_transaction(client, finding.transactional_id)
    if now != finding.coordinator:
        return False
    txn = finding.txn
    still = await describe_open_transactions(client, [TopicPartition(txn.topic, txn.partition)])
    if txn not in still:
        return False  # ended meanwhile (the coordinator's markers, or the task's sweep)
    await abort_transactions(client, [txn], commit=finding.verdict is Verdict.COMMIT)
    return True
