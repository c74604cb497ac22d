"""The executor's rounds: partitions side by side, a rebalance alone, the oldest round watched.

``processor.executor.rounds`` alone (no Kafka): a round holds its partitions until it ends; a
rebalance waits for every round in flight and no round starts while it waits; a round's
failure reaches the loop; the stall watchdog sees the oldest round. And the backlog hands the
loop one partition's records at a time, the partitions taking turns.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from processor.executor.backlog import Backlog
from processor.executor.freezes import FreezeWatch
from processor.executor.inflight import InFlight
from processor.executor.rounds import RoundGate, Rounds


async def _held(event: asyncio.Event, result: bool = False) -> bool:
    await event.wait()
    return result


async def test_a_rebalance_waits_for_the_rounds_and_no_round_starts_while_it_waits() -> None:
    gate = RoundGate()
    rounds = Rounds(gate)
    first, second = asyncio.Event(), asyncio.Event()
    rounds.start({0}, _held(first), "p0")
    rounds.start({1}, _held(second), "p1")  # side by side: other partitions
    assert rounds.busy == {0, 1} and gate.rounds == 2

    order: list[str] = []

    async def rebalance() -> None:
        async with gate.alone():
            order.append(f"rebalance with {gate.rounds} rounds")

    waiting = asyncio.create_task(rebalance())
    await asyncio.sleep(0)
    assert not gate.open()  # a rebalance waits: no new round
    with pytest.raises(RuntimeError):
        rounds.start({2}, _held(asyncio.Event()), "p2")
    first.set()
    await asyncio.sleep(0.01)
    assert order == []  # one round still in flight
    second.set()
    await asyncio.wait_for(waiting, 1)
    assert order == ["rebalance with 0 rounds"]
    assert gate.open() and rounds.busy == set()
    assert rounds.reap() is False and len(rounds) == 0


async def test_a_partition_is_in_one_round_at_a_time() -> None:
    rounds = Rounds(RoundGate())
    release = asyncio.Event()
    rounds.start({3, 4}, _held(release), "p3 p4")
    with pytest.raises(RuntimeError, match="in a round"):
        rounds.start({4}, _held(asyncio.Event()), "p4 again")
    release.set()
    await asyncio.wait(rounds.tasks)
    rounds.start({4}, _held(asyncio.Event()), "p4 after")  # free again
    assert rounds.busy == {4}
    for task in rounds.tasks:
        task.cancel()
    await asyncio.wait(rounds.tasks)


async def test_a_round_that_says_stop_or_fails_reaches_the_loop() -> None:
    rounds = Rounds(RoundGate())
    go = asyncio.Event()
    go.set()
    rounds.start({0}, _held(go, True), "stopping")
    await asyncio.wait(rounds.tasks)
    assert rounds.reap() is True

    async def broken() -> bool:
        raise ValueError("boom")

    rounds.start({1}, broken(), "broken")
    await asyncio.wait(rounds.tasks)
    with pytest.raises(ValueError, match="boom"):
        rounds.reap()
    assert rounds.busy == set()


async def test_the_oldest_round_is_what_the_watchdog_sees() -> None:
    rounds = Rounds(RoundGate())
    assert rounds.oldest() is None
    hung = asyncio.Event()
    rounds.start({0}, _held(hung), "claiming on dispatch partition [0]")
    await asyncio.sleep(0.05)
    rounds.start({1}, _held(hung), "claiming on dispatch partition [1]")
    oldest = rounds.oldest()
    assert oldest is not None and oldest[1] == "claiming on dispatch partition [0]"
    assert oldest[0] >= 0.05
    hung.set()
    await rounds.settle()
    assert rounds.oldest() is None and len(rounds) == 0


async def test_settle_cancelled_cancels_the_rounds() -> None:
    rounds = Rounds(RoundGate())
    never = asyncio.Event()
    rounds.start({0}, _held(never), "hung")
    tasks = rounds.tasks
    settling = asyncio.create_task(rounds.settle())
    await asyncio.sleep(0.01)
    settling.cancel()
    with pytest.raises(asyncio.CancelledError):
        await settling
    assert all(t.cancelled() for t in tasks)
    assert rounds.gate.open() and rounds.busy == set()


def _records(tp: TopicPartition, offsets: range) -> list[ConsumerRecord]:  # type: ignore[type-arg]
    return [
        ConsumerRecord(tp.topic, tp.partition, o, 0, 0, None, b"v", None, 0, 1, [])
        for o in offsets
    ]


def test_the_backlog_hands_out_one_partition_at_a_time_in_turn() -> None:
    backlog = Backlog(100)
    a, b, c = (TopicPartition("dispatch", p) for p in range(3))
    backlog.add({a: _records(a, range(3)), b: _records(b, range(2)), c: _records(c, range(1))})
    taken = [backlog.take_one(lambda tp: True) for _ in range(3)]
    assert [list(t) for t in taken] == [[a], [b], [c]]
    assert [len(r) for t in taken for r in t.values()] == [3, 2, 1]
    assert backlog.take_one(lambda tp: True) == {}
    # what is put back comes first again, and a partition that was taken waits its turn
    backlog.put_back({a: taken[0][a][1:]})
    backlog.add({c: _records(c, range(1, 3))})
    assert list(backlog.take_one(lambda tp: tp != a)) == [c]
    assert [r.offset for r in backlog.take_one(lambda tp: True)[a]] == [1, 2]


def test_a_claim_round_waits_for_a_batch_only_while_claimed_calls_wait() -> None:
    """While claimed calls wait for slots, a claim round starts only when a quarter of the
    claim-ahead can be claimed at once; with none waiting, as soon as one call can be; held
    slots (rounds in flight) count as taken."""
    in_flight = InFlight(limit=4, ahead=8)  # a batch: 2
    assert in_flight.claimable() == 12 and in_flight.worth_claiming()
    in_flight.waiting = 11
    assert in_flight.claimable() == 1 and not in_flight.worth_claiming()  # one: wait
    in_flight.waiting = 10
    assert in_flight.worth_claiming()  # two at once
    in_flight.reserved = 1
    assert not in_flight.worth_claiming()  # a round in flight holds one of them
    in_flight.waiting, in_flight.reserved = 0, 11
    assert in_flight.claimable() == 1 and in_flight.worth_claiming()  # none waits: claim one
    in_flight.reserved = 12
    assert not in_flight.worth_claiming()
    no_ahead = InFlight(limit=1, ahead=0)
    assert no_ahead.worth_claiming()


def test_the_freeze_watch_sees_a_pause_of_the_whole_process() -> None:
    """A gap between ticks is a pause (SIGSTOP, a frozen VM); one going on now counts before
    the first tick after the wake-up; pauses that ended before a moment do not count for it."""
    watch = FreezeWatch(clock=lambda: 100.0)
    for t in (100.1, 100.2, 100.3):
        watch.tick(t)
    assert watch.longest_since(100.0, 100.35) == pytest.approx(0.05)
    assert watch.longest_since(100.0, 112.3) == pytest.approx(12.0)  # woken, not ticked yet
    watch.tick(112.3)
    watch.tick(112.4)
    assert watch.longest_since(100.2, 112.45) == pytest.approx(12.0)
    assert watch.longest_since(112.35, 112.45) == pytest.approx(0.05)  # that one ended before
    assert watch.longest_since(112.35, 112.45) < 0.5
