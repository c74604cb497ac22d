"""Rebalances on a real broker: partitions move between two and three workers while fragments
flow, and calls whose fragments straddle a move are completed by their partition's new owner.

Every call's fragments are spread over about two seconds and a new turn starts every 0.1 s until
the last move is over, so open buffers exist at every move. Workers join (w2, w3) and leave gracefully (w1 with SIGTERM: it
finishes its transaction, closes its producers and leaves the group). Checked: every call is
dispatched exactly once with the right arguments, and some partition was restored with open
buffers by a worker that took it over, while a partition that stayed with its worker kept its
state and read no changelog records again.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.conftest import Runtime, call_events, dispatch_keys, turn_started, wait_until

pytestmark = pytest.mark.integration


def _arguments(i: int) -> str:
    return f'{{"city": "Town {i}", "country": "K{i % 7}", "units": "f"}}'


@pytest.mark.partitions(6)
async def test_partitions_move_between_workers_while_fragments_flow(runtime: Runtime) -> None:
    w1 = runtime.start_worker("w1")
    await w1.wait_ready()

    async def one_turn(i: int) -> None:
        turn = f"r-{i}"
        events = call_events("acme", turn, "call_0", _arguments(i), pieces=8)
        await runtime.control(turn_started("acme", turn))
        await runtime.publish(events[:1])
        for event in events[1:]:
            await asyncio.sleep(0.2)
            await runtime.publish([event])

    stop_producing = asyncio.Event()
    started: list[int] = []

    async def produce() -> None:
        turns = []
        while not stop_producing.is_set():
            started.append(len(started))
            turns.append(asyncio.create_task(one_turn(started[-1])))
            await asyncio.sleep(0.1)
        await asyncio.gather(*turns)

    producing = asyncio.create_task(produce())
    await asyncio.sleep(1.0)
    w2 = runtime.start_worker("w2")
    await w2.wait_ready()  # two workers share the partitions
    await asyncio.sleep(1.0)
    w3 = runtime.start_worker("w3")
    await w3.wait_ready()  # three workers
    await asyncio.sleep(1.0)
    w1.terminate()  # graceful leave: its partitions move to w2 and w3
    assert await w1.wait_exit(30) == 0
    await asyncio.sleep(1.0)
    stop_producing.set()
    await producing

    expected = sorted(("acme", f"r-{i}", "call_0") for i in started)

    async def all_dispatched() -> bool:
        return len(await runtime.dispatches()) >= len(expected) and await runtime.caught_up()

    await wait_until(all_dispatched, timeout=120, what="every call dispatched")
    dispatches = await runtime.dispatches()
    assert dispatch_keys(dispatches) == expected  # no loss, no duplicate
    for d in dispatches:
        i = int(d["turn_id"].split("-")[1])
        assert d["arguments"] == {"city": f"Town {i}", "country": f"K{i % 7}", "units": "f"}

    # open buffers continued on their new owner: a takeover restored some
    takeovers = [
        r
        for w in (w2, w3)
        for r in w.log_records()
        if r.get("msg") == "partition ready" and r.get("open_buffers", 0) > 0
    ]
    assert takeovers, "no partition was taken over with open buffers"
    # a partition a worker kept across a rebalance kept its state: only the changelog tail
    # written since its last transaction was read (aiokafka revokes everything every time)
    kept = [
        r
        for w in (w1, w2, w3)
        for r in w.log_records()
        if r.get("msg") == "partition ready" and r.get("restore") == "tail"
    ]
    assert kept, "no partition kept its state across a rebalance"
    fresh = [r for r in kept if r["restored_records"] == 0]
    assert fresh, "a partition that stayed put re-read changelog records"
    ready_sets = [await w.readiness() for w in (w2, w3)]
    owned = sorted(p for r in ready_sets for p in r["ready"])
    assert owned == list(range(runtime.partitions))  # w2 and w3 own every partition once
    text = await w2.metrics()
    assert 'toolcall_rebalances_total{event="assigned"}' in text
    # w2 joined, then saw w3 join and w1 leave: its collector settled after each assignment
    # was prepared (the state it took over leaves full collections), not only at start-up
    settled = [r for r in w2.log_records() if r.get("msg") == "garbage collector settled"]
    assert len(settled) >= 3, settled
