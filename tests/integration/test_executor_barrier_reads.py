"""The control barrier under a trickle of control records, on a real broker (issue 39).

The barrier's reader is assigned every ``control`` partition and reads one on demand. While any
other partition's records waited unread in it, aiokafka sent the broker no new fetch for up to
100 ms (its prefetch back-off), so each read of a partition with something new waited about
that long whenever another partition had records too: ~90 ms a fence under a steady trickle of
turns, which held one executor below 100 calls/s. The reader now applies whatever it holds, of
every partition, around each read.

Syncs asked while a read is in flight share the next read (claim rounds side by side, the
starts and the stop watch ask at once), and the end offsets are asked with one ListOffsets
request straight on the client (``processor.kafka.clients.end_offsets``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from processor.core.authn import AllowUnsigned
from processor.core.events import encode, turn_key
from processor.executor import barrier as barrier_module
from processor.executor.barrier import ControlBarrier
from processor.executor.fence import FenceState
from processor.kafka.clients import committed_reader, end_offsets
from tests.integration.conftest import Runtime, turn_started

pytestmark = pytest.mark.integration


@pytest.mark.partitions(2)
async def test_a_read_on_demand_does_not_wait_for_the_other_partitions_records(
    runtime: Runtime,
) -> None:
    rt = runtime
    barrier = ControlBarrier(rt.settings, lambda: FenceState(verifier=AllowUnsigned()))
    await barrier.start()
    producer = await rt.producer()
    seconds: list[float] = []
    try:
        for n in range(20):
            # one new record on each partition, then a read of partition 0 only
            for partition in (0, 1):
                turn = f"p{partition}-{n}"
                await producer.send_and_wait(
                    rt.topics.control,
                    encode(turn_started("acme", turn)),
                    key=turn_key("acme", turn).encode(),
                    partition=partition,
                )
            started = time.monotonic()
            state = await barrier.sync(0, 30)
            seconds.append(time.monotonic() - started)
            assert ("acme", f"p0-{n}") in state.turns
        # partition 1's records were applied by the reads of partition 0: none waits unread
        assert {("acme", f"p1-{n}") for n in range(19)} <= set(barrier.state(1).turns)
    finally:
        await barrier.stop()
    # ~0.1 s each before (the back-off); a few milliseconds now
    assert statistics.median(seconds) < 0.05, seconds


# ---------------------------------------------------------------- syncs that share a read


class _HeldEnds:
    """Wraps the barrier's end-offset read: the real ListOffsets, then wait for ``release``
    before the read goes on (so a test can act while a read is in flight, after its end
    offsets were taken). Counts the reads."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.release = asyncio.Event()
        self.release.set()
        self.taken = asyncio.Event()  # a read took its end offsets and waits for release
        self.reads = 0

    async def __call__(self, consumer: Any, tps: Any) -> Any:
        ends = await self.real(consumer, tps)
        self.reads += 1
        self.taken.set()
        await self.release.wait()
        return ends


@pytest.fixture
async def held_barrier(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[ControlBarrier, _HeldEnds, Any]]:
    """A started barrier whose end-offset reads are held and counted, and a producer."""
    held = _HeldEnds(barrier_module.end_offsets)
    monkeypatch.setattr(barrier_module, "end_offsets", held)
    barrier = ControlBarrier(runtime.settings, lambda: FenceState(verifier=AllowUnsigned()))
    await barrier.start()
    try:
        yield barrier, held, await runtime.producer()
    finally:
        await barrier.stop()


async def _started(rt: Runtime, producer: Any, partition: int, turn: str) -> None:
    await producer.send_and_wait(
        rt.topics.control,
        encode(turn_started("acme", turn)),
        key=turn_key("acme", turn).encode(),
        partition=partition,
    )


@pytest.mark.partitions(3)
async def test_syncs_asked_at_once_share_one_read(
    runtime: Runtime, held_barrier: tuple[ControlBarrier, _HeldEnds, Any]
) -> None:
    """Eight syncs asked at once: the first makes a read, the seven asked while it was in
    flight share the next one (two ListOffsets, not eight), and each sees the records
    committed before it was asked, of its own partition."""
    rt = runtime
    barrier, held, producer = held_barrier
    for partition in range(3):
        await _started(rt, producer, partition, f"t{partition}")
    held.reads = 0
    states = await asyncio.gather(*(barrier.sync(n % 3, 30) for n in range(8)))
    assert held.reads == 2
    for n, state in enumerate(states):
        assert ("acme", f"t{n % 3}") in state.turns


@pytest.mark.partitions(1)
async def test_a_sync_asked_while_a_read_is_in_flight_waits_for_a_read_of_its_own(
    runtime: Runtime, held_barrier: tuple[ControlBarrier, _HeldEnds, Any]
) -> None:
    """A read took its end offsets; a record is committed; a sync asked now must not take
    that read's answer (it would miss the record): it joins the next read."""
    rt = runtime
    barrier, held, producer = held_barrier
    await barrier.sync(0, 30)
    held.release.clear()
    held.taken.clear()
    first = asyncio.create_task(barrier.sync(0, 30))
    await asyncio.wait_for(held.taken.wait(), 30)  # its end offsets are taken
    await _started(rt, producer, 0, "late")  # committed after them
    second = asyncio.create_task(barrier.sync(0, 30))
    await asyncio.sleep(0)  # asked while the first read is in flight
    held.release.set()
    assert ("acme", "late") in (await second).turns
    await first


@pytest.mark.partitions(1)
async def test_a_sync_whose_shared_read_was_cancelled_under_another_reads_again(
    runtime: Runtime, held_barrier: tuple[ControlBarrier, _HeldEnds, Any]
) -> None:
    """Two syncs join one read; the one making it is cancelled (a round cancelled): the other
    is not cancelled with it, it reads again and answers."""
    rt = runtime
    barrier, held, producer = held_barrier
    await barrier.sync(0, 30)
    held.release.clear()
    held.taken.clear()
    held.reads = 0
    blocker = asyncio.create_task(barrier.sync(0, 30))  # read 1, held
    await asyncio.wait_for(held.taken.wait(), 30)
    await _started(rt, producer, 0, "before")
    maker = asyncio.create_task(barrier.sync(0, 30))  # both join read 2
    joiner = asyncio.create_task(barrier.sync(0, 30))
    await asyncio.sleep(0)
    held.taken.clear()
    held.release.set()
    await blocker
    held.release.clear()
    await asyncio.wait_for(held.taken.wait(), 30)  # read 2 (the maker's) is held
    maker.cancel()
    held.release.set()
    with pytest.raises(asyncio.CancelledError):
        await maker
    # not cancelled with the maker: it read again, and saw what was there when it asked
    assert ("acme", "before") in (await asyncio.wait_for(joiner, 30)).turns
    assert held.reads == 3


@pytest.mark.partitions(2)
async def test_end_offsets_are_the_last_stable_offsets_as_the_library_gives_them(
    runtime: Runtime,
) -> None:
    """The direct ListOffsets answers what ``consumer.end_offsets`` answers: under
    read_committed, an open transaction's records are not counted (the last stable offset);
    a consumer that does not know the topic's leaders yet is answered too (the library's
    path)."""
    rt = runtime
    producer = await rt.producer()
    txn = AIOKafkaProducer(
        **rt.settings.kafka_client_kwargs(), transactional_id=f"{rt.prefix}eo-open"
    )
    reader = committed_reader(rt.settings)
    await txn.start()
    await reader.start()
    try:
        tps = [TopicPartition(rt.topics.control, p) for p in range(2)]
        for n in range(3):
            await _started(rt, producer, 0, f"done-{n}")
        await txn.begin_transaction()
        await txn.send_and_wait(rt.topics.control, b"{}", partition=1)
        await _started(rt, producer, 1, "behind-the-open-one")
        fresh = await end_offsets(reader, tps)  # no metadata yet: the library's path
        direct = await end_offsets(reader, tps)  # the direct request
        assert direct == fresh == await reader.end_offsets(tps)
        assert direct[tps[0]] == 3
        assert direct[tps[1]] == 0  # the open transaction holds the last stable offset
        await txn.commit_transaction()
        deadline = time.monotonic() + 30  # the markers are written after the commit returns
        while (await end_offsets(reader, tps))[tps[1]] == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert (await end_offsets(reader, tps))[tps[1]] == 3  # two records and the marker
    finally:
        await reader.stop()
        await txn.stop()
