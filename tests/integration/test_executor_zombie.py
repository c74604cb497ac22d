"""A member that slept past its partition writes nothing of it (issue 39; chaos seeds 22, 23).

A member stopped (SIGSTOP, a long pause) while its call runs can lose its partition without
knowing it: the group gives the partition to another member, whose take fences the
transactional id and reports the stopped member's claim ``unknown``. When the stopped member
wakes, its transaction fails (its producer is fenced or timed out) and it retries with a new
producer, whose InitProducerId fences the rightful owner in turn. Before this fix it then wrote
its stale end (``succeeded``, a second result for the call) and claimed records the new owner
had already run. Now a retry that needed a new producer reads the ledger again first, and an
entry of another member it does not hold makes it give the partition up without writing.

The other member's take is played by a producer of the group's transactional id that writes what
a take writes (the claim's ``unknown``), so the test does not depend on when a stopped process's
consumer notices the rebalance.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError

from processor.executor.client import ExecutorClient
from processor.executor.handlers import Call, Handlers
from processor.executor.outputs import OutputRecords
from tests.integration.conftest import Runtime, turn_started, wait_until
from tests.integration.executor_harness import (
    Executor,
    group_of,
    ledger,
    make_dispatch,
    results,
    write_dispatch,
)

pytestmark = [pytest.mark.integration, pytest.mark.partitions(1)]


class _OneFailedCommit(ExecutorClient):
    """The first transaction after ``fail_next`` is set fails as a timeout would (the member's
    transaction outlived its sleep): the writer retries with a new producer."""

    fail_next = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        attempt = self.writer.one_transaction

        async def once(owned: Any, producer: Any, outputs: list[Any], offset: int | None) -> None:
            if self.fail_next:
                self.fail_next = False
                raise KafkaTimeoutError("injected: the transaction outlived the member's sleep")
            await attempt(owned, producer, outputs, offset)

        self.writer.one_transaction = once  # type: ignore[method-assign]


async def _take_as_another_member(rt: Runtime, group: str, member: str) -> None:
    """What another member's take writes: the transactional id fenced, the open claim
    reported ``unknown`` by that member (``member``: its executor id)."""
    [claim] = [e for e in await ledger(rt) if e.state == "claimed"]
    outputs = OutputRecords(rt.topics, group, member, time.time)
    _finals, records = outputs.unknowns([claim], "executor_interrupted")
    producer = AIOKafkaProducer(
        **rt.settings.kafka_client_kwargs(), transactional_id=f"{group}.executor.0"
    )
    await producer.start()  # InitProducerId: the sleeping member's producer is fenced
    try:
        await producer.begin_transaction()
        for topic, key, value, headers, partition in records:
            await producer.send_and_wait(
                topic, value, key=key, partition=partition, headers=headers
            )
        await producer.commit_transaction()
    finally:
        await producer.stop()


@pytest.mark.parametrize("same_id", [False, True], ids=["another-id", "the-same-id"])
async def test_a_member_that_slept_past_its_partition_writes_nothing_of_it(
    runtime: Runtime, same_id: bool
) -> None:
    """``the-same-id``: the other member was given the same ``--executor-id`` (a
    misconfiguration); its entry is still told from this member's own."""
    rt = runtime
    group = group_of(rt)
    release = asyncio.Event()
    ran: list[str] = []

    async def slow(call: Call) -> Mapping[str, Any]:
        ran.append(call.dispatch_id)
        await release.wait()
        return {"ok": True}

    handlers = Handlers()
    handlers.register("get_weather", slow, requires_confirmation=False)
    executor = Executor(rt.settings, handlers, group=group, client_cls=_OneFailedCommit)
    client = executor.client
    assert isinstance(client, _OneFailedCommit)
    dispatch = make_dispatch("acme", "asleep", "c1")
    await rt.control(turn_started("acme", "asleep"))
    await executor.start()
    try:
        await write_dispatch(rt, dispatch)

        async def running() -> bool:
            return ran == [dispatch.dispatch_id]

        await wait_until(running, timeout=60, what="the call running")
        member = client.executor_id if same_id else "the-new-owner"
        await _take_as_another_member(rt, group, member)  # while this member "sleeps"
        client.fail_next = True
        release.set()  # it wakes: its handler ends, its end's transaction fails, it retries

        async def settled() -> bool:  # given up, or (the bug) its stale end written
            return client.owned_partitions() == [] or len(await results(rt.settings)) > 1

        await wait_until(settled, timeout=60, what="the partition given up")
        got = [(r.outcome.value, r.reason, r.executor_id) for r in await results(rt.settings)]
        assert got == [("unknown", "executor_interrupted", member)]
    finally:
        await executor.stop()
    assert [(r.outcome.value, r.executor_id) for r in await results(rt.settings)] == [
        ("unknown", member)
    ]


class _FrozenCommit(ExecutorClient):
    """With ``freeze_next`` set, the next transaction attempt sleeps past the session timeout
    with the whole process (a blocking sleep: no tick, no heartbeat, as SIGSTOP), then fails as
    the outlived transaction does on waking (a timeout)."""

    freeze_next: float = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        attempt = self.writer.one_transaction

        async def frozen(
            owned: Any, producer: Any, outputs: list[Any], offset: int | None
        ) -> None:
            if self.freeze_next:
                pause, self.freeze_next = self.freeze_next, 0.0
                time.sleep(pause)  # the point: the event loop is frozen too
                raise KafkaTimeoutError("injected: the transaction outlived the member's pause")
            await attempt(owned, producer, outputs, offset)

        self.writer.one_transaction = frozen  # type: ignore[method-assign]


async def test_a_member_paused_past_its_session_does_not_fence_the_new_owner(
    runtime: Runtime,
) -> None:
    """Chaos seed 27: a member woke from a SIGSTOP longer than its session, its transaction
    timed out, and its retry's new producer fenced the member that had taken the partition, just
    after that one claimed calls: their results were dropped and reported ``unknown``. A member
    paused past its session now gives the partition up without a new producer: the new owner
    goes on writing."""
    rt = runtime
    settings = rt.settings.model_copy(
        update={
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 1000,
            "transaction_timeout_ms": 5000,
            "commit_timeout_seconds": 4.0,
        }
    )
    group = group_of(rt)
    release = asyncio.Event()

    async def slow(call: Call) -> Mapping[str, Any]:
        await release.wait()
        return {"ok": True}

    handlers = Handlers()
    handlers.register("get_weather", slow, requires_confirmation=False)
    executor = Executor(settings, handlers, group=group, client_cls=_FrozenCommit)
    client = executor.client
    assert isinstance(client, _FrozenCommit)
    dispatch = make_dispatch("acme", "paused", "c1")
    await rt.control(turn_started("acme", "paused"))
    await executor.start()
    new_owner = AIOKafkaProducer(
        **rt.settings.kafka_client_kwargs(), transactional_id=f"{group}.executor.0"
    )
    try:
        await write_dispatch(rt, dispatch)

        async def claimed() -> bool:
            return any(e.state == "claimed" for e in await ledger(rt))

        await wait_until(claimed, timeout=60, what="the call claimed and running")
        [claim] = [e for e in await ledger(rt) if e.state == "claimed"]
        await new_owner.start()  # the other member's take: this member's producer is fenced
        _finals, records = OutputRecords(rt.topics, group, "the-new-owner", time.time).unknowns(
            [claim], "executor_interrupted"
        )
        await _commit(new_owner, records)
        client.freeze_next = settings.session_timeout_ms / 1000 + 0.5
        release.set()  # the handler ends; its end's transaction outlives a pause of 6.5 s

        async def given_up() -> bool:
            return client.owned_partitions() == []

        await wait_until(given_up, timeout=60, what="the partition given up")
        # the new owner's producer was not fenced: it goes on writing (its next results)
        await _commit(new_owner, records[1:2])
    finally:
        await new_owner.stop()
        await executor.stop()
    got = [(r.outcome.value, r.executor_id) for r in await results(rt.settings)]
    assert got == [("unknown", "the-new-owner"), ("unknown", "the-new-owner")]


async def _commit(producer: AIOKafkaProducer, records: list[Any]) -> None:
    await producer.begin_transaction()
    for topic, key, value, headers, partition in records:
        await producer.send_and_wait(topic, value, key=key, partition=partition, headers=headers)
    await producer.commit_transaction()
