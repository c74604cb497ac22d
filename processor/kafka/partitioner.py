"""Where Kafka's default partitioner puts a keyed record, and whether a record is where its turn is.

Turn-scoped records (all fragments; ``turn.started``, ``turn.cancelled``, ``call.confirmed``,
``call.denied``, ``response.quarantined`` on control) must sit on the partition their turn key
``tenant/turn_id`` hashes to with murmur2 — the Java client's and aiokafka's default — or the
worker that owns the turn, and the executor's barrier, never see them. A producer with another
partitioner (librdkafka's default is CRC32: set ``partitioner=murmur2_random``) would silently
split a turn; :func:`misrouted` makes that visible instead.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Final

from aiokafka.partitioner import DefaultPartitioner

from processor.core.events import turn_key

# Control events that are copied to every partition, so any partition is theirs.
FANNED_OUT: Final = frozenset({"tool.disabled", "tool.enabled", "tenant.stopped", "tenant.resumed"})


_CACHED_KEY_BYTES: Final = 256  # longer keys (hostile ids, before validation) are not kept
_CACHED_KEY_CHARS: Final = 128  # the same for (tenant, turn) pairs, in characters


_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF
_WORDS: Final = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), as an unsigned 32-bit
    value, as aiokafka's. aiokafka's byte-by-byte loop takes 2.7 times as long on a turn key:
    here the 4-byte words are read with ``struct``, and each product is masked once."""
    length = len(data)
    h = 0x9747B28C ^ length
    whole = length & ~3
    for (word,) in _WORDS.iter_unpack(data[:whole]):
        k = (word * _M) & _MASK
        h = ((h * _M) & _MASK) ^ (((k ^ (k >> 24)) * _M) & _MASK)
    extra = length & 3
    if extra:
        if extra == 3:
            h ^= data[whole + 2] << 16
        if extra >= 2:
            h ^= data[whole + 1] << 8
        h = ((h ^ data[whole]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def _positive_hash(key: bytes) -> int:
    """murmur2 (pure Python, ~2 us a key), cached for short keys: a turn's records
    share its key. The cache holds at most 16,384 keys of at most 256 bytes."""
    if len(key) > _CACHED_KEY_BYTES:
        return int(murmur2(key) & 0x7FFFFFFF)
    return _cached_hash(key)


@functools.lru_cache(maxsize=16_384)
def _cached_hash(key: bytes) -> int:
    return int(murmur2(key) & 0x7FFFFFFF)


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a keyed record (``toPositive`` + modulo)."""
    return _positive_hash(key) % partitions


def default_partitioner(
    key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]
) -> int:
    """aiokafka's ``DefaultPartitioner`` with the cached hash, for the worker's producers (a
    call's outputs share its turn key): the same partition for every key."""
    if key is None:
        return int(DefaultPartitioner()(key, all_partitions, available))
    return all_partitions[_positive_hash(key) % len(all_partitions)]


def misrouted(record: dict[str, object], partition: int, partitions: int) -> str | None:
    """Why a decoded turn-scoped record is on the wrong partition, or None."""
    kind, tenant, turn = record.get("type"), record.get("tenant"), record.get("turn_id")
    if not isinstance(kind, str) or kind in FANNED_OUT:  # any JSON value may sit in "type"
        return None
    if not isinstance(tenant, str) or not isinstance(turn, str):
        return None
    if len(tenant) + len(turn) <= _CACHED_KEY_CHARS:
        home = _cached_home(tenant, turn, partitions)
    else:
        home = _home(tenant, turn, partitions)
    if home == partition:
        return None
    return (
        f"a {kind} record on partition {partition}, but its turn key hashes to partition {home} "
        "(murmur2): its producer must use Kafka's default partitioner"
    )


def _home(tenant: str, turn: str, partitions: int) -> int:
    return partition_for(turn_key(tenant, turn).encode("utf-8", "surrogatepass"), partitions)


@functools.lru_cache(maxsize=16_384)
def _cached_home(tenant: str, turn: str, partitions: int) -> int:
    """:func:`_home` of a short turn key, cached: every record of a turn asks (a call is about
    seven records), and this is on the worker's per-record path."""
    return _home(tenant, turn, partitions)
