"""A group's committed offsets read as *stable* offsets (KIP-447), which aiokafka cannot ask for.

aiokafka's ``consumer.committed`` sends OffsetFetch v3 at most. While a transaction that sent the
group's offsets for a partition (``send_offsets_to_transaction``) is open, or committed but its
marker not yet applied by the group coordinator, that request answers the *previous* offset.
OffsetFetch v7 with ``require_stable`` makes the coordinator answer UNSTABLE_OFFSET_COMMIT (88,
retriable) for such a partition instead; :func:`stable_committed` asks again, with a short
backoff, until every partition is stable or its bound passes.

Owns: the OffsetFetch v7 wire structs, reading its answer (:func:`read_offsets`, pure), and
:func:`stable_committed`, which sends it to the group's coordinator (FindCoordinator, on
aiokafka's coordination connection, as aiokafka's own group coordinator does) and retries a
coordinator that moved, is loading or is not there yet. Fails closed with
:class:`StableOffsetsError`: past its bound, on any other error of the request or of a
partition, on a partition missing from the answer, and on a broker whose OffsetFetch stops
below v7 (Kafka before 2.5: the repo already needs Kafka 3.0's DescribeProducers and
DescribeTransactions, :mod:`processor.kafka.txn_admin`). Never an unstable read instead.

Used after a fence: the worker's preparation of a partition (:func:`processor.runtime.recovery.
seek`) and an executor's take of a dispatch partition
(:meth:`processor.executor.ownership.Ownership.take`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeAlias

from aiokafka.client import ConnectionGroup
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError, for_code
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
from processor.observability import metrics
from processor.observability.logging import fields

__all__ = ["StableOffsetsError", "read_offsets", "stable_committed"]

log = logging.getLogger(__name__)

_NONE: Final = 0
_UNSUPPORTED_VERSION: Final = 35
UNSTABLE_OFFSET_COMMIT: Final = 88
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: ask again (the
# last two after looking the coordinator up again)
_LOADING: Final = 14
_COORDINATOR_MOVED: Final = frozenset({15, 16})
_RETRIABLE: Final = frozenset({UNSTABLE_OFFSET_COMMIT, _LOADING}) | _COORDINATOR_MOVED
_GROUP_COORDINATOR: Final = 0  # FindCoordinator key type
_BACKOFF_SECONDS: Final = 0.05  # doubled per attempt, at most _BACKOFF_MAX_SECONDS
_BACKOFF_MAX_SECONDS: Final = 0.5
_NO_OFFSET: Final = -1

# aiokafka's AIOKafkaClient (a consumer's ``_client``): untyped
_Client: TypeAlias = Any


# ---------------------------------------------------------------------- protocol structs


class OffsetFetchResponse_v7(Response):  # type: ignore[misc]  # noqa: N801  # aiokafka's naming
    API_KEY = 9
    API_VERSION = 7
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
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("metadata", CompactString("utf-8")),  # nullable
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class OffsetFetchRequest_v7(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 9
    API_VERSION = 7
    RESPONSE_TYPE = OffsetFetchResponse_v7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


class StableOffsetFetchRequest(Request[OffsetFetchRequest_v7]):  # type: ignore[misc]
    """OffsetFetch v7 with ``require_stable``, and no other version: a broker whose OffsetFetch
    stops below v7 makes aiokafka raise before anything is sent (``NotImplementedError``, or
    ``IncompatibleBrokerVersion`` without the api at all)."""

    API_KEY: ClassVar[int] = 9

    def __init__(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        self._group_id = group_id
        self._topics: list[tuple[str, list[int], dict[int, bytes]]] = [
            (t, sorted(ps), {}) for t, ps in sorted(by_topic.items())
        ]

    def build(self, request_struct_class: type[OffsetFetchRequest_v7]) -> OffsetFetchRequest_v7:
        return request_struct_class(self._group_id, self._topics, True, {})


# ---------------------------------------------------------------------- answers


class StableOffsetsError(KafkaStepError):
    """The group's committed offsets could not be read as stable offsets: not within the bound
    (``code`` 88 while a transaction's offsets stayed pending), refused, missing, or the broker
    too old. ``code``: Kafka's error code of the last answer (-1: none)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Retry:
    """An answer to ask again: ``cause`` names it (an error and, for a partition's, where);
    ``lookup``: look the coordinator up again first."""

    cause: str
    code: int
    lookup: bool = False


# the codes asked again, by Kafka's names (aiokafka knows no 88)
_NAMES: Final = {
    UNSTABLE_OFFSET_COMMIT: "UNSTABLE_OFFSET_COMMIT",
    _LOADING: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
}


def _name(code: int) -> str:
    return _NAMES.get(code) or str(for_code(code).__name__)


def read_offsets(
    response: Any, wanted: Sequence[TopicPartition]
) -> dict[TopicPartition, int | None] | Retry:
    """The stable committed offset of each of ``wanted`` (None: none committed, ``-1`` on the
    wire) from an OffsetFetch v7 answer, or :class:`Retry` when it must be asked again (a
    partition UNSTABLE_OFFSET_COMMIT, a coordinator loading or moved). Raises
    :class:`StableOffsetsError` on any other error, and on a partition of ``wanted`` the answer
    lacks: never a partial or unstable answer."""
    top = int(response.error_code)
    if top in _RETRIABLE:
        return Retry(_name(top), top, lookup=top in _COORDINATOR_MOVED)
    if top != _NONE:
        raise StableOffsetsError(f"OffsetFetch: {_name(top)}", top)
    found: dict[TopicPartition, int | None] = {}
    retry: Retry | None = None
    for topic, partitions, _ in response.topics:
        for index, offset, _, _, code, _ in partitions:
            tp = TopicPartition(topic, index)
            if code in _RETRIABLE:
                if retry is None or code in _COORDINATOR_MOVED:
                    where = f"{_name(code)} on {topic}-{index}"
                    retry = Retry(where, code, lookup=code in _COORDINATOR_MOVED)
                continue
            if code != _NONE:
                raise StableOffsetsError(f"OffsetFetch {topic}-{index}: {_name(code)}", code)
            found[tp] = None if offset == _NO_OFFSET else int(offset)
    if retry is not None:
        return retry
    missing = [tp for tp in wanted if tp not in found]
    if missing:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
        raise StableOffsetsError(f"OffsetFetch: no answer for {names}", -1)
    return {tp: found[tp] for tp in wanted}


# ---------------------------------------------------------------------- the request


async def stable_committed(
    client: _Client, group_id: str, tps: Iterable[TopicPartition], *, timeout: float
) -> dict[TopicPartition, int | None]:
    """The committed offsets of ``group_id`` for ``tps`` as stable offsets (None: none
    committed), in one OffsetFetch v7 request with ``require_stable`` to the group's
    coordinator, asked again with a short backoff while a partition is unstable or the
    coordinator is loading, moved or not there yet. ``client``: aiokafka's client (a
    consumer's ``_client``). Raises :class:`StableOffsetsError` past ``timeout`` seconds or on
    anything else (see the module docstring)."""
    wanted = list(dict.fromkeys(tps))
    if not wanted:
        return {}
    request = StableOffsetFetchRequest(group_id, wanted)
    node: int | None = None
    last = Retry("no answer", -1)
    backoff = _BACKOFF_SECONDS
    try:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    if node is None:
                        node = await client.coordinator_lookup(_GROUP_COORDINATOR, group_id)
                    response = await client.send(node, request, group=ConnectionGroup.COORDINATION)
                except (NotImplementedError, IncompatibleBrokerVersion):
                    raise StableOffsetsError(
                        "the broker's OffsetFetch stops below v7: committed offsets cannot "
                        "be read as stable offsets (KIP-447, Kafka 2.5 or later)",
                        _UNSUPPORTED_VERSION,
                    ) from None
                except KafkaError as exc:
                    code = int(getattr(exc, "errno", -1) or -1)
                    if not exc.retriable:
                        raise StableOffsetsError(
                            f"OffsetFetch: {type(exc).__name__}", code
                        ) from None
                    node, last = None, Retry(type(exc).__name__, code, lookup=True)
                else:
                    outcome = read_offsets(response, wanted)
                    if not isinstance(outcome, Retry):
                        return outcome
                    last = outcome
                    if outcome.code == UNSTABLE_OFFSET_COMMIT:
                        metrics.UNSTABLE_OFFSET_ANSWERS.inc()
                    if outcome.lookup:
                        node = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_SECONDS)
    except TimeoutError:
        log.warning(
            "committed offsets not stable in time",
            extra=fields(group=group_id, partitions=len(wanted), cause=last.cause),
        )
        raise StableOffsetsError(
            f"committed offsets of group {group_id} not stable within {timeout:g} s "
            f"(last: {last.cause})",
            last.code,
        ) from None
