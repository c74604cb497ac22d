"""Claim rounds of different dispatch partitions run side by side, on a real broker (issue 39).

One partition's claim transaction waiting on the broker must not hold up the calls of the
others (each partition has its own transactional producer): while partition A's claim
transaction is held open, a call on partition B is claimed, run and reported. The in-flight
bound and the claim-ahead hold across rounds in flight at once: a round decides its calls
(and holds their slots) before the next one starts, so rounds side by side never claim more
than ``max_in_flight + claim_ahead`` calls between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from processor.core.events import turn_key
from processor.executor.handlers import Call, Handlers
from processor.kafka.partitioner import partition_for
from tests.integration.conftest import Runtime, turn_started, wait_until
from tests.integration.executor_harness import (
    Executor,
    group_of,
    ledger,
    make_dispatch,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = [pytest.mark.integration, pytest.mark.partitions(4)]


def _turns_on(partition: int, partitions: int, n: int, prefix: str) -> list[str]:
    turns = [
        f"{prefix}{i}"
        for i in range(2000)
        if partition_for(turn_key("acme", f"{prefix}{i}").encode(), partitions) == partition
    ]
    return turns[:n]


async def test_a_partition_whose_claim_waits_on_the_broker_holds_up_no_other(
    runtime: Runtime,
) -> None:
    rt = runtime
    [on_a] = _turns_on(0, rt.partitions, 1, "a")
    [on_b] = _turns_on(1, rt.partitions, 1, "b")
    ran: list[str] = []

    async def handle(call: Call) -> Mapping[str, Any]:
        ran.append(call.key.turn_id)
        return {"ok": True}

    handlers = Handlers()
    handlers.register("get_weather", handle, requires_confirmation=False)
    executor = Executor(rt.settings, handlers, group=group_of(rt))
    writer = executor.client.writer
    real = writer.one_transaction
    held = asyncio.Event()  # partition 0's claim transaction has begun and waits
    release = asyncio.Event()
    first_hold_over = asyncio.Event()

    async def one_transaction(owned: Any, producer: Any, outputs: Any, offset: Any) -> None:
        claims_on_a = owned.partition == 0 and any(
            out.topic == rt.topics.executions for out in outputs
        )
        if claims_on_a and not release.is_set():
            held.set()
            try:
                await release.wait()  # as a coordinator slow to answer
            finally:
                first_hold_over.set()  # released, or the attempt timed out (commit timeout)
        await real(owned, producer, outputs, offset)

    writer.one_transaction = one_transaction  # type: ignore[method-assign]
    await rt.control(turn_started("acme", on_a), turn_started("acme", on_b))
    async with running(executor):
        await write_dispatch(rt, make_dispatch("acme", on_a, "ca"))
        async def is_held() -> bool:
            return held.is_set()

        await wait_until(is_held, timeout=60, what="partition 0's claim transaction held")
        await write_dispatch(rt, make_dispatch("acme", on_b, "cb"))
        [got_b] = await wait_results(rt.settings, 1, where=lambda r: r.turn_id == on_b)
        assert got_b.outcome.value == "succeeded"
        # while partition 0's first claim attempt still waits: not after it timed out and a
        # retry gave the loop back (a loop that waits for every partition's round did)
        assert not first_hold_over.is_set()
        assert ran == [on_b]  # partition 0's call not run yet: its claim is not committed
        release.set()
        got = await wait_results(rt.settings, 2)
    assert sorted(r.turn_id for r in got) == sorted([on_a, on_b])
    assert all(r.outcome.value == "succeeded" for r in got)
    assert sorted(ran) == sorted([on_a, on_b])  # each once


async def test_rounds_side_by_side_claim_no_more_than_the_bound_and_the_claim_ahead(
    runtime: Runtime,
) -> None:
    rt = runtime
    limit, ahead = 3, 2
    turns = [t for p in range(rt.partitions) for t in _turns_on(p, rt.partitions, 3, f"p{p}-")]
    release = asyncio.Event()
    ran: list[str] = []

    async def handle(call: Call) -> Mapping[str, Any]:
        ran.append(call.key.turn_id)
        await release.wait()
        return {"ok": True}

    handlers = Handlers()
    handlers.register("get_weather", handle, requires_confirmation=False)
    executor = Executor(
        rt.settings, handlers, group=group_of(rt), max_in_flight=limit, claim_ahead=ahead
    )
    await rt.control(*(turn_started("acme", t) for t in turns))
    async with running(executor):
        await write_dispatch(rt, *(make_dispatch("acme", t, f"c-{t}") for t in turns))
        client = executor.client

        async def full() -> bool:
            return len(ran) == limit and client.in_flight.waiting == ahead

        await wait_until(full, timeout=60, what="the slots and the claim-ahead taken")
        # the rounds of every partition with records had their turn meanwhile; none claimed
        # beyond the bound: what is claimed runs or waits, the rest is not in the ledger
        for _ in range(5):
            claimed = [e for e in await ledger(rt) if e.state == "claimed"]
            assert len(claimed) == limit + ahead, claimed
            assert client.in_flight.reserved == 0
            await asyncio.sleep(0.1)
        release.set()
        got = await wait_results(rt.settings, len(turns), timeout=120)
    assert sorted(r.turn_id for r in got) == sorted(turns)
    assert all(r.outcome.value == "succeeded" for r in got)
    assert sorted(ran) == sorted(turns) and client.in_flight.peak == limit
