"""The control barrier under a trickle of control records, on a real broker (issue 39).

The barrier's reader is assigned every ``control`` partition and reads one on demand. While any
other partition's records waited unread in it, aiokafka sent the broker no new fetch for up to
100 ms (its prefetch back-off), so each read of a partition with something new waited about
that long whenever another partition had records too: ~90 ms a fence under a steady trickle of
turns, which held one executor below 100 calls/s. The reader now applies whatever it holds, of
every partition, around each read.
"""

from __future__ import annotations

import statistics
import time

import pytest

from processor.core.authn import AllowUnsigned
from processor.core.events import encode, turn_key
from processor.executor.barrier import ControlBarrier
from processor.executor.fence import FenceState
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
