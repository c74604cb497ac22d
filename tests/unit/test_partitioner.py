"""The worker's cached partitioner puts every key where aiokafka's (and Java's) default does.

Turn-scoped outputs and the misrouting check depend on it: a different partition would split a
turn between workers or executors.
"""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner, murmur2
from hypothesis import given
from hypothesis import strategies as st

from processor.kafka import partitioner
from processor.kafka.partitioner import default_partitioner, misrouted, partition_for


@given(st.binary(max_size=300), st.integers(1, 64))
def test_the_cached_partitioner_agrees_with_aiokafkas(key: bytes, count: int) -> None:
    partitions = list(range(count))
    expected = DefaultPartitioner()(key, partitions, partitions)
    assert default_partitioner(key, partitions, partitions) == expected
    assert default_partitioner(key, partitions, partitions) == expected  # cached the same
    assert partition_for(key, count) == (murmur2(key) & 0x7FFFFFFF) % count


@given(st.binary(max_size=1000))
def test_our_murmur2_is_aiokafkas(key: bytes) -> None:
    assert partitioner.murmur2(key) == murmur2(key)


def test_murmur2_on_keys_of_every_length_up_to_64() -> None:
    """Every tail length (0-3 bytes after the last whole word), on fixed bytes."""
    data = bytes(range(7, 7 + 64 * 3, 3))
    for n in range(65):
        assert partitioner.murmur2(data[:n]) == murmur2(data[:n])


def test_a_record_without_a_key_goes_to_an_available_partition() -> None:
    for _ in range(50):
        assert default_partitioner(None, [0, 1, 2, 3], [2]) == 2


def test_long_keys_are_hashed_but_never_kept() -> None:
    """The routing check hashes ids before they are validated: a hostile megabyte-long key
    must not stay in the cache."""
    from processor.kafka import partitioner

    before = partitioner._cached_hash.cache_info().currsize
    key = b"t/" + b"x" * 1_000_000
    assert partition_for(key, 6) == (murmur2(key) & 0x7FFFFFFF) % 6
    assert partitioner._cached_hash.cache_info().currsize == before


@given(st.text(max_size=200), st.text(max_size=200), st.integers(1, 64))
def test_the_routing_check_names_the_turn_keys_partition(
    tenant: str, turn: str, count: int
) -> None:
    """``misrouted`` (cached per short turn, computed for long ones) accepts a record exactly
    on the partition its turn key ``tenant/turn_id`` hashes to, whatever the ids hold."""
    key = f"{tenant}/{turn}".encode("utf-8", "surrogatepass")
    home = (murmur2(key) & 0x7FFFFFFF) % count
    record = {"type": "call.delta", "tenant": tenant, "turn_id": turn}
    for _ in range(2):  # the second time from the cache
        for partition in range(count):
            found = misrouted(record, partition, count)
            assert (found is None) == (partition == home)
            if found is not None:
                assert f"hashes to partition {home} " in found


def test_long_turns_are_checked_but_never_kept() -> None:
    from processor.kafka import partitioner

    before = partitioner._cached_home.cache_info().currsize
    record = {"type": "call.delta", "tenant": "acme", "turn_id": "x" * 1_000_000}
    key = b"acme/" + b"x" * 1_000_000
    home = (murmur2(key) & 0x7FFFFFFF) % 6
    assert misrouted(record, home, 6) is None and misrouted(record, (home + 1) % 6, 6)
    assert partitioner._cached_home.cache_info().currsize == before
