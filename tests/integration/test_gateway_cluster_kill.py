"""A gateway's producers come through a whole-cluster crash by themselves (issue 42).

A three-node KRaft cluster of the test's own (``scripts/kafka-local --nodes 3``, replication 3,
``min.insync.replicas=2``; ports from ``KAFKA_CHAOS_CLUSTER_PORT``, else the first six free
from 29300, as the short chaos run picks them). A gateway built as docs/library.md shows opens
one :class:`~processor.kafka.publish.Publisher` and one
:class:`~processor.ops.ctl.ControlWriter` at start and keeps using them: one loop starts a turn
and publishes its fragment events, another writes control commands, each one call at a time.
Every node is killed with ``kill -9``, restarted together on its data dir, and the test never
recreates the two producers: both must write again within :data:`BOUND` seconds of the cluster
answering, every call after that must go through, and every turn whose publish returned must be
on its partition whole, each event's first copy in publish order.

Before the renewal, the batches that expired while the partitions had no leader burnt their
sequence numbers and both producers failed every later call with ``OutOfOrderSequenceNumber``.
The figures (how long calls blocked, what they raised, when they resumed) are printed (``-s``)
and are the ones docs/operations.md quotes.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka.structs import TopicPartition

from processor.adapters.base import TurnContext
from processor.core.events import FragmentEvent, encode
from processor.kafka.publish import Publisher
from processor.ops.ctl import ControlWriter
from tests.chaos.faults import QUICK_START_JVM, Broker, free_port_base
from tests.integration.conftest import Runtime, call_events, turn_cancelled
from tests.kafka_broker import read_partition

pytestmark = pytest.mark.integration

BOUND = 60.0  # seconds from the cluster answering until each producer has written again
REQUEST_TIMEOUT_MS = 10_000
LOOPS = 3  # concurrent users of each producer
GUARD = 240.0  # the test's own limit on one call (a gateway sets its own, or none)


@dataclass
class Outcome:
    started: float
    ended: float
    error: str | None  # the exception's class name, None when the call went through


@dataclass
class Loop:
    """One gateway activity: the same call again and again, one at a time."""

    name: str
    call: Callable[[int], Awaitable[None]]
    outcomes: list[Outcome] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            started = time.monotonic()
            try:
                await asyncio.wait_for(self.call(i), GUARD)
                error = None
            except Exception as exc:
                error = type(exc).__name__
            self.outcomes.append(Outcome(started, time.monotonic(), error))
            await asyncio.sleep(0.25)

    def resumed(self, back: float) -> float | None:
        """Seconds from ``back`` to the end of the first call that went through after it."""
        ok = [o.ended - back for o in self.outcomes if o.error is None and o.ended >= back]
        return min(ok) if ok else None

    def ok_since(self, back: float) -> int:
        return sum(1 for o in self.outcomes if o.error is None and o.started >= back)

    def report(self, killed: float, back: float) -> str:
        during = [o for o in self.outcomes if o.ended >= killed and o.started <= back]
        errors = sorted({o.error for o in self.outcomes if o.error})
        longest = max((o.ended - o.started for o in during), default=0.0)
        return (
            f"{self.name}: calls={len(self.outcomes)} failed="
            f"{sum(1 for o in self.outcomes if o.error)} errors={errors} "
            f"longest_block_across_outage={longest:.1f}s resumed_after_back={self.resumed(back)}"
        )


@pytest.mark.timeout(600)
async def test_a_gateways_producers_write_again_after_a_whole_cluster_kill(tmp_path: Path) -> None:
    port = int(os.environ.get("KAFKA_CHAOS_CLUSTER_PORT") or free_port_base())
    broker = Broker(tmp_path / "cluster", port, port + 3, nodes=3, jvm_flags=QUICK_START_JVM)
    await broker.start()
    runtime = Runtime(broker.bootstrap, f"gw{uuid.uuid4().hex[:6]}.", tmp_path, partitions=3)
    try:
        await runtime.create_topics()
        published: dict[str, list[FragmentEvent]] = {}
        # a batch waiting longer than the request timeout for a partition without a leader
        # fails: shorter than the outage, so the cluster's restart meets such batches
        settings = runtime.settings.model_copy(update={"request_timeout_ms": REQUEST_TIMEOUT_MS})
        async with (
            Publisher(settings) as publisher,
            ControlWriter(settings) as ctl,
        ):

            def turns(n: int) -> Callable[[int], Awaitable[None]]:
                async def turn(i: int) -> None:
                    turn_id = f"t-{n}-{i}"
                    context = TurnContext(tenant="acme", turn_id=turn_id, actor="u")
                    await publisher.start_turn(context)
                    events = call_events("acme", turn_id, "c1", '{"city": "Oslo"}', actor="u")
                    await publisher.publish(events)
                    published[turn_id] = events

                return turn

            def commands(n: int) -> Callable[[int], Awaitable[None]]:
                async def command(i: int) -> None:
                    await ctl.write(turn_cancelled("acme", f"old-{n}-{i}"))

                return command

            # concurrent turns and commands, as a gateway serves several users at once: batches
            # wait on every partition when the cluster goes
            loops = [Loop(f"publisher {n}", turns(n)) for n in range(LOOPS)]
            loops += [Loop(f"control writer {n}", commands(n)) for n in range(LOOPS)]
            tasks = [asyncio.create_task(loop.run()) for loop in loops]
            await asyncio.sleep(3)
            assert all(loop.ok_since(0) > 0 for loop in loops), [lp.outcomes for lp in loops]

            killed = time.monotonic()
            await broker.kill()  # every node, kill -9
            await asyncio.sleep(2)
            await broker.start()  # returns once the cluster answers
            back = time.monotonic()

            deadline = back + BOUND + 30
            while time.monotonic() < deadline and not all(lp.ok_since(back) >= 3 for lp in loops):
                await asyncio.sleep(0.5)
            for loop in loops:
                loop.stop.set()
            await asyncio.gather(*tasks)
            print(f"\noutage: cluster answered {back - killed:.1f}s after the kill")
            for loop in loops:
                print(loop.report(killed, back))
            generations = publisher.producers.generation, ctl.producers.generation
            print(f"producers started (publisher, control writer): {generations}")

        for loop in loops:
            resumed = loop.resumed(back)
            assert resumed is not None and resumed <= BOUND, loop.report(killed, back)
            # once it wrote again, every later call went through
            first_ok = min(o.started for o in loop.outcomes if o.error is None and o.ended >= back)
            later = [o.error for o in loop.outcomes if o.started >= first_ok]
            assert later == [None] * len(later), loop.report(killed, back)

        # every turn whose publish returned is whole on its partition, first copies in order
        written: list[bytes] = []
        for p in range(runtime.partitions):
            tp = TopicPartition(runtime.topics.fragments, p)
            written += [
                r.value for r in await read_partition(tp, **runtime.settings.kafka_client_kwargs())
            ]
        for events in published.values():
            first = [written.index(encode(e)) for e in events]
            assert first == sorted(first)
    finally:
        try:
            await runtime.close()
        finally:
            await broker.kill()  # thrown away with tmp_path: no clean stop to wait for
