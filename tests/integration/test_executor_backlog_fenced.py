"""Records in hand when a partition is lost to a fence are fetched again, none skipped (issue 39).

The executor's backlog holds records a poll returned that could not be claimed yet (every slot
taken): the consumer's position is already past them. When the partition's producer is fenced
and no rebalance follows (the coordinator aborted a transaction that outlived its timeout, or
another process took the transactional id), the executor takes the partition back after a
session timeout; the records it held must be fetched again from the first of them, or they
would never be decided (unreported calls). Found reading the backlog's code, not by a run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from processor.executor.handlers import Call, Handlers
from tests.integration.conftest import Runtime, turn_started, wait_until
from tests.integration.executor_harness import (
    Executor,
    group_of,
    make_dispatch,
    results,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = [pytest.mark.integration, pytest.mark.partitions(1)]


async def test_records_in_hand_when_the_partition_is_fenced_are_decided_after_the_retake(
    runtime: Runtime,
) -> None:
    rt = runtime
    group = group_of(rt)
    release = asyncio.Event()
    ran: list[str] = []

    async def handle(call: Call) -> Mapping[str, Any]:
        ran.append(call.key.turn_id)
        if call.key.turn_id == "first":
            await release.wait()
        return {"ok": True}

    handlers = Handlers()
    handlers.register("get_weather", handle, requires_confirmation=False)
    turns = ["first", "second", "third", "fourth"]
    dispatches = [make_dispatch("acme", turn, "c") for turn in turns]
    await rt.control(*(turn_started("acme", turn) for turn in turns))
    executor = Executor(
        rt.settings, handlers, group=group, max_in_flight=1, claim_ahead=0, batch_size=1
    )
    async with running(executor) as ex:
        await write_dispatch(rt, dispatches[0])

        async def first_running() -> bool:
            return ran == ["first"]

        await wait_until(first_running, timeout=60, what="the first call running")
        await write_dispatch(rt, *dispatches[1:])

        async def held() -> bool:  # polled, not claimable: in hand, past the position
            return ex.client.records_in_hand() == 3

        await wait_until(held, timeout=60, what="three records in hand")
        fencer = AIOKafkaProducer(
            **rt.settings.kafka_client_kwargs(), transactional_id=f"{group}.executor.0"
        )
        await fencer.start()  # InitProducerId: the executor's producer is fenced
        await fencer.stop()
        # what a flush that meets the fence does (no claim round can run: no slot is free, so
        # no round's offset says where to fetch again): the partition is lost, taken back after
        # a session timeout
        [owned] = ex.client.ownership.owned.values()
        ex.client.ownership.lose(owned, None)
        release.set()  # the first call's end cannot be written: the retake reports it
        got = await wait_results(rt.settings, 4, timeout=90)
    by_turn = {r.turn_id: (r.outcome.value, r.reason) for r in got}
    assert by_turn == {
        "first": ("unknown", "executor_interrupted"),  # its end was never written
        "second": ("succeeded", None),
        "third": ("succeeded", None),
        "fourth": ("succeeded", None),
    }
    assert sorted(ran) == sorted(turns)  # each ran once
    assert len(await results(rt.settings)) == 4
