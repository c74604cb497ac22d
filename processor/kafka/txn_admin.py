"""The transaction admin calls aiokafka lacks (KIP-664), on aiokafka's protocol layer.

What ``kafka-transactions.sh find-hanging`` and ``abort`` send, and how a coordinator left a
transactional id: the wire structs of three requests, the calls that send them to the right
broker (retrying a leader not there yet, or stale, with a backoff and fresh metadata), and their
results. No policy: which transactions are hanging and what a task does about them is
:mod:`processor.kafka.hanging`.

- ``DescribeProducers`` (api 61, v0), sent to each partition's leader: the producers with state
  on the partition, and for each its epoch, coordinator epoch and the first offset of its open
  transaction (``-1``: none). Needs READ on the topic.
- ``WriteTxnMarkers`` (api 27, v1), sent to the partition's leader too (as Kafka's Admin
  ``abortTransaction`` does): an ABORT marker with the producer id, epoch and coordinator epoch
  that ``DescribeProducers`` reported. Needs CLUSTER_ACTION on the cluster.
- ``DescribeTransactions`` (api 65, v0), sent to the transactional id's coordinator before
  ``InitProducerId``: how the coordinator left the id's last transaction (``PrepareCommit``,
  ``CompleteCommit``: committed), its producer id and epoch, its timeout, start time and
  partitions. Needs DESCRIBE on the transactional id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeAlias

from aiokafka.errors import for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)
from aiokafka.structs import TopicPartition

from processor.core.errors import KafkaStepError

__all__ = [
    "HangingError",
    "OpenTransaction",
    "Previous",
    "abort_transactions",
    "describe_open_transactions",
    "may_write_markers",
    "partitions_of",
    "previous_transaction",
]

_NONE: Final = 0
_NOT_LEADER: Final = frozenset({3, 6, 5})  # UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER, LEADER_N/A
_TOPIC_AUTHORIZATION_FAILED: Final = 29
_CLUSTER_AUTHORIZATION_FAILED: Final = 31
_TXN_ID_AUTHORIZATION_FAILED: Final = 53
# a refusal → the permission the request needs (the broker's ACL operation and resource)
_PERMISSION: Final = {
    _TOPIC_AUTHORIZATION_FAILED: "READ on the topic (DescribeProducers)",
    _CLUSTER_AUTHORIZATION_FAILED: "ClusterAction on the cluster (WriteTxnMarkers)",
    _TXN_ID_AUTHORIZATION_FAILED: "DESCRIBE on the transactional ids (DescribeTransactions)",
}
_DENIED: Final = frozenset(_PERMISSION)
_ATTEMPTS: Final = 8
_BACKOFF_SECONDS: Final = 0.1  # doubled per attempt, at most 2 s: about 7 s in all
_TRANSACTIONAL_ID_NOT_FOUND: Final = 105
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: ask again
_COORDINATOR_MOVED: Final = frozenset({14, 15, 16})
_TRANSACTION_COORDINATOR: Final = 1  # FindCoordinator key type
# coordinator states whose transaction ends, or ended, committed (TransactionState.java)
_COMMITTED: Final = frozenset({"PrepareCommit", "CompleteCommit"})


# ---------------------------------------------------------------------- protocol structs


class DescribeProducersResponse_v0(Response):  # type: ignore[misc]  # noqa: N801  # aiokafka's naming
    API_KEY = 61
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("error_message", CompactString("utf-8")),
                        (
                            "active_producers",
                            CompactArray(
                                ("producer_id", Int64),
                                ("producer_epoch", Int32),
                                ("last_sequence", Int32),
                                ("last_timestamp", Int64),
                                ("coordinator_epoch", Int32),
                                ("current_txn_start_offset", Int64),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeProducersRequest_v0(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 61
    API_VERSION = 0
    RESPONSE_TYPE = DescribeProducersResponse_v0
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeProducersRequest(Request[DescribeProducersRequest_v0]):  # type: ignore[misc]
    API_KEY: ClassVar[int] = 61

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        self._topics: list[tuple[str, list[int], dict[int, bytes]]] = [
            (t, sorted(ps), {}) for t, ps in sorted(by_topic.items())
        ]

    def build(
        self, request_struct_class: type[DescribeProducersRequest_v0]
    ) -> DescribeProducersRequest_v0:
        return request_struct_class(self._topics, {})


class WriteTxnMarkersResponse_v1(Response):  # type: ignore[misc]  # noqa: N801
    API_KEY = 27
    API_VERSION = 1
    SCHEMA = Schema(
        (
            "markers",
            CompactArray(
                ("producer_id", Int64),
                (
                    "topics",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        (
                            "partitions",
                            CompactArray(
                                ("partition_index", Int32),
                                ("error_code", Int16),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class WriteTxnMarkersRequest_v1(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 27
    API_VERSION = 1
    RESPONSE_TYPE = WriteTxnMarkersResponse_v1
    SCHEMA = Schema(
        (
            "markers",
            CompactArray(
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                ("transaction_result", Boolean),
                (
                    "topics",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        ("partition_indexes", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("coordinator_epoch", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class WriteTxnMarkersRequest(Request[WriteTxnMarkersRequest_v1]):  # type: ignore[misc]
    """ABORT (or, with ``commit``, COMMIT) markers for open transactions on one leader."""

    API_KEY: ClassVar[int] = 27

    def __init__(self, transactions: Iterable[OpenTransaction], *, commit: bool = False) -> None:
        markers: dict[tuple[int, int, int], dict[str, list[int]]] = {}
        for t in transactions:
            key = (t.producer_id, t.producer_epoch, t.coordinator_epoch)
            markers.setdefault(key, {}).setdefault(t.topic, []).append(t.partition)
        self._markers: list[tuple[Any, ...]] = [
            (pid, epoch, commit, [(n, sorted(ps), {}) for n, ps in sorted(tps.items())], ce, {})
            for (pid, epoch, ce), tps in markers.items()
        ]

    def build(
        self, request_struct_class: type[WriteTxnMarkersRequest_v1]
    ) -> WriteTxnMarkersRequest_v1:
        return request_struct_class(self._markers, {})


class DescribeTransactionsResponse_v0(Response):  # type: ignore[misc]  # noqa: N801
    API_KEY = 65
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "transaction_states",
            CompactArray(
                ("error_code", Int16),
                ("transactional_id", CompactString("utf-8")),
                ("transaction_state", CompactString("utf-8")),
                ("transaction_timeout_ms", Int32),
                ("transaction_start_time_ms", Int64),
                ("producer_id", Int64),
                ("producer_epoch", Int16),  # int16 on the wire (Kafka 4.4)
                (
                    "topic_partitions",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        ("partition_indexes", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest_v0(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 65
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTransactionsResponse_v0
    SCHEMA = Schema(
        ("transactional_ids", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest(Request[DescribeTransactionsRequest_v0]):  # type: ignore[misc]
    API_KEY: ClassVar[int] = 65

    def __init__(self, transactional_ids: Sequence[str]) -> None:
        self._ids = list(transactional_ids)

    def build(
        self, request_struct_class: type[DescribeTransactionsRequest_v0]
    ) -> DescribeTransactionsRequest_v0:
        return request_struct_class(self._ids, {})


# ---------------------------------------------------------------------- results and errors


@dataclass(frozen=True)
class OpenTransaction:
    """A producer's open transaction on one partition, as DescribeProducers reports it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int  # the first offset of the open transaction
    last_timestamp: int  # ms, the producer's last write to the partition (-1: unknown)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def age_seconds(self, now: float) -> float | None:
        """Seconds since the producer last wrote to the partition (None: not known)."""
        return None if self.last_timestamp < 0 else max(0.0, now - self.last_timestamp / 1000)


@dataclass(frozen=True)
class Previous:
    """How the coordinator left a transactional id's last transaction (DescribeTransactions,
    read before ``InitProducerId``, which forgets it)."""

    producer_id: int
    state: str  # Empty, Ongoing, PrepareCommit, CompleteAbort, …
    producer_epoch: int = -1
    timeout_ms: int = -1  # the transaction timeout the producer asked for
    start_ms: int = -1  # when its last transaction began (-1: none since InitProducerId)
    partitions: frozenset[tuple[str, int]] = frozenset()  # what that transaction added

    @property
    def committed(self) -> bool:
        return self.state in _COMMITTED


class HangingError(KafkaStepError):
    """A DescribeProducers or WriteTxnMarkers request failed. ``code``: Kafka's error code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code

    @property
    def denied(self) -> bool:
        return self.code in _DENIED

    @property
    def permission(self) -> str | None:
        """The permission a refused request needs (None: not a refusal)."""
        return _PERMISSION.get(self.code)


# ---------------------------------------------------------------------- requests

# aiokafka's AIOKafkaClient (a producer's ``client``, an admin client's ``_client``): untyped
_Client: TypeAlias = Any


async def _leaders(
    client: _Client, partitions: Iterable[TopicPartition], *, final: bool
) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
    """The partitions by leader, and those without one yet (a new topic, a leader moving),
    which raise :class:`HangingError` on the ``final`` attempt."""
    by_leader: dict[int, list[TopicPartition]] = {}
    leaderless: list[TopicPartition] = []
    for tp in partitions:
        await client._wait_on_metadata(tp.topic)
        leader = client.cluster.leader_for_partition(tp)
        if leader is None or leader < 0:
            if final:
                raise HangingError(f"no leader for {tp.topic}-{tp.partition}", 5)
            leaderless.append(tp)
            continue
        by_leader.setdefault(leader, []).append(tp)
    return by_leader, leaderless


async def _refresh(client: _Client, attempt: int) -> None:
    """Fresh metadata after a stale or missing leader, after a backoff (a leader just elected
    takes a moment to reach every broker's metadata)."""
    await asyncio.sleep(min(_BACKOFF_SECONDS * 2**attempt, 2.0))
    await client.force_metadata_update()


async def partitions_of(client: _Client, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of ``topics`` (from the client's metadata, fetched if missing)."""
    out: list[TopicPartition] = []
    for topic in topics:
        out += [TopicPartition(topic, p) for p in sorted(await client._wait_on_metadata(topic))]
    return out


async def describe_open_transactions(
    client: _Client, partitions: Iterable[TopicPartition]
) -> list[OpenTransaction]:
    """Every open transaction on ``partitions`` (DescribeProducers to each partition's leader).

    Retries a stale leader a few times with fresh metadata; raises :class:`HangingError` on any
    other partition error (``denied`` for TOPIC_AUTHORIZATION_FAILED)."""
    wanted = list(dict.fromkeys(partitions))
    found: list[OpenTransaction] = []
    for attempt in range(_ATTEMPTS):
        by_leader, retry = await _leaders(client, wanted, final=attempt + 1 == _ATTEMPTS)
        for leader, tps in by_leader.items():
            response = await client.send(leader, DescribeProducersRequest(tps))
            for topic, parts, _ in response.topics:
                for index, code, message, producers, _ in parts:
                    tp = TopicPartition(topic, index)
                    if code in _NOT_LEADER and attempt + 1 < _ATTEMPTS:
                        retry.append(tp)
                        continue
                    if code != _NONE:
                        name = for_code(code).__name__
                        raise HangingError(
                            f"DescribeProducers {topic}-{index}: {name} {message or ''}".strip(),
                            code,
                        )
                    found += [
                        OpenTransaction(topic, index, pid, epoch, ce, start, last)
                        for pid, epoch, _, last, ce, start, _ in producers
                        if start >= 0
                    ]
        if not retry:
            return found
        wanted = retry
        await _refresh(client, attempt)
    return found  # never: the last attempt raises on a partition error


async def abort_transactions(
    client: _Client, open_txns: Iterable[OpenTransaction], *, commit: bool = False
) -> None:
    """Write an ABORT marker (``commit``: a COMMIT marker) for each open transaction
    (WriteTxnMarkers to its leader).

    Raises :class:`HangingError` (``denied`` for CLUSTER_AUTHORIZATION_FAILED) on a failed
    partition, after retrying a stale leader a few times."""
    pending = list(open_txns)
    for attempt in range(_ATTEMPTS):
        by_tp = {t.tp: t for t in pending}
        by_leader, leaderless = await _leaders(client, by_tp, final=attempt + 1 == _ATTEMPTS)
        retry: list[OpenTransaction] = [by_tp[tp] for tp in leaderless]
        for leader, tps in by_leader.items():
            txns = [by_tp[tp] for tp in tps]
            response = await client.send(leader, WriteTxnMarkersRequest(txns, commit=commit))
            for pid, topics, _ in response.markers:
                for topic, parts, _ in topics:
                    for index, code, _ in parts:
                        if code in _NOT_LEADER and attempt + 1 < _ATTEMPTS:
                            retry += [t for t in txns if t.tp == (topic, index)]
                            continue
                        if code != _NONE:
                            name = for_code(code).__name__
                            raise HangingError(
                                f"WriteTxnMarkers {topic}-{index} (producer {pid}): {name}", code
                            )
        if not retry:
            return
        pending = retry
        await _refresh(client, attempt)


async def may_write_markers(client: _Client) -> bool:
    """Whether this principal may write transaction markers (ClusterAction), asked without
    writing any: a WriteTxnMarkers request for partition 0 of the topic named ``""``, which
    cannot exist. The broker checks the permission for the whole request first
    (CLUSTER_AUTHORIZATION_FAILED), then answers UNKNOWN_TOPIC_OR_PARTITION for the partition.
    Raises :class:`HangingError` on any other answer."""
    probe = OpenTransaction("", 0, -1, -1, -1, 0, -1)
    await client.force_metadata_update()
    node = client.get_random_node()
    response = await client.send(node, WriteTxnMarkersRequest([probe]))
    codes = {code for _, topics, _ in response.markers for _, ps, _ in topics for _, code, _ in ps}
    if codes == {_CLUSTER_AUTHORIZATION_FAILED}:
        return False
    if codes <= {_NONE} | _NOT_LEADER:
        return True
    raise HangingError(f"WriteTxnMarkers probe: {sorted(codes)}", max(codes))


async def previous_transaction(client: _Client, transactional_id: str) -> Previous | None:
    """The coordinator's state of ``transactional_id`` (None: it has none). Ask before
    ``InitProducerId``: a transaction it committed without writing every marker (the same skip,
    after PrepareCommit) must be committed on the partitions it skipped, not aborted. Needs
    DESCRIBE on the transactional id.

    A coordinator that moved, is loading or is not there yet (brokers restarting) is looked up
    again a few times with a backoff; then :class:`HangingError`."""
    for attempt in range(_ATTEMPTS):
        node = await client.coordinator_lookup(_TRANSACTION_COORDINATOR, transactional_id)
        response = await client.send(node, DescribeTransactionsRequest([transactional_id]))
        [(code, _, state, timeout, start, producer_id, epoch, topics, _)] = (
            response.transaction_states
        )
        if code == _TRANSACTIONAL_ID_NOT_FOUND:
            return None
        if code == _NONE:
            added = frozenset((name, p) for name, parts, _ in topics for p in parts)
            return Previous(producer_id, state, epoch, timeout, start, added)
        if code not in _COORDINATOR_MOVED or attempt + 1 == _ATTEMPTS:
            raise HangingError(
                f"DescribeTransactions {transactional_id}: {for_code(code).__name__}", code
            )
        await _refresh(client, attempt)
    return None  # never: the last attempt returns or raises
