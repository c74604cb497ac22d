"""Crash recovery on a real broker: ``kill -9`` of a worker mid-batch, then a restart.

Invariant 4 end to end: every valid completed call is dispatched exactly once (none lost, none
twice) across the crash, and a call of a cancelled turn never is. The worker commits small
batches (10 records) while fragments keep flowing. To kill it *inside* a transaction, the test
freezes it (SIGSTOP) until it catches it with a transaction open (some output or changelog
partition's last stable offset is behind its high watermark), then SIGKILLs it. The replacement
fences the dead worker's transactional ids (aborting what it left open: the aborted records stay
in the log, invisible to read_committed), restores the partitions' state from the changelog and
resumes from the committed offsets.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from tests.integration.conftest import (
    Runtime,
    call_events,
    dispatch_keys,
    turn_cancelled,
    turn_started,
    wait_until,
)

pytestmark = pytest.mark.integration

TURNS = 60
CANCELLED = {f"k-{i}" for i in range(0, TURNS, 7)}


async def _ends(runtime: Runtime, isolation: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(
        group_id=None, isolation_level=isolation, **runtime.settings.kafka_client_kwargs()
    )
    await consumer.start()
    try:
        topics = [runtime.topics.output(r) for r in ("dispatch", "status", "ledger")]
        topics.append(runtime.topics.changelog)
        tps = [TopicPartition(t, p) for t in topics for p in range(runtime.partitions)]
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


async def transaction_open(runtime: Runtime) -> bool:
    """Some partition's last stable offset is behind its high watermark."""
    committed = await _ends(runtime, "read_committed")
    written = await _ends(runtime, "read_uncommitted")
    return any(committed[tp] < written[tp] for tp in written)


async def kill_inside_a_transaction(runtime: Runtime, pid: int, attempts: int = 100) -> bool:
    """Freeze the worker until it is caught with a transaction open, then SIGKILL it."""
    for _ in range(attempts):
        os.kill(pid, signal.SIGSTOP)
        if await transaction_open(runtime):
            os.kill(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGCONT)
            return True
        os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(0.03)
    os.kill(pid, signal.SIGKILL)
    return False


@pytest.mark.partitions(3)
async def test_kill_9_mid_batch_then_restart_dispatches_each_call_once(runtime: Runtime) -> None:
    small_batches = {"PROCESSOR_BATCH_MAX_RECORDS": "10"}
    w1 = runtime.start_worker("w1", **small_batches)
    await w1.wait_ready()

    # cancellations first (and applied), so those calls must never dispatch
    cancels = [turn_cancelled("acme", turn) for turn in sorted(CANCELLED)]
    await runtime.control(*cancels)

    async def cancels_applied() -> bool:
        audit = await runtime.read("audit")
        return {c.command_id for c in cancels} <= {a["command_id"] for a in audit}

    await wait_until(cancels_applied, timeout=60, what="cancellations applied")

    killed = asyncio.Event()
    produced: list[int] = []

    async def produce() -> None:
        # at least TURNS turns, and keep the worker busy until it is killed, then 10 more
        after_kill = 0
        while len(produced) < TURNS or not killed.is_set() or after_kill < 10:
            after_kill += killed.is_set()
            i = len(produced)
            turn = f"k-{i}"
            await runtime.control(turn_started("acme", turn))
            args = f'{{"city": "City number {i}", "country": "C{i % 10}", "units": "c"}}'
            await runtime.publish(call_events("acme", turn, "call_0", args, pieces=8))
            produced.append(i)
            await asyncio.sleep(0.02)

    producing = asyncio.create_task(produce())

    async def some_dispatched() -> bool:
        return len(await runtime.dispatches()) >= 8

    await wait_until(some_dispatched, timeout=60, interval=0.2, what="first dispatches")
    # SIGKILL inside a transaction: no revocation, no abort, the transaction stays open
    assert await kill_inside_a_transaction(runtime, w1.proc.pid)
    killed.set()
    assert await w1.wait_exit(10) == -9
    await producing

    w2 = runtime.start_worker("w2", **small_batches)
    await w2.wait_ready(timeout=90)
    expected = sorted(("acme", f"k-{i}", "call_0") for i in produced if f"k-{i}" not in CANCELLED)

    async def all_dispatched() -> bool:
        return len(await runtime.dispatches()) >= len(expected) and await runtime.caught_up()

    await wait_until(all_dispatched, timeout=120, what="every call dispatched")
    dispatches = await runtime.dispatches()
    assert dispatch_keys(dispatches) == expected  # none lost, none twice, none cancelled
    assert len({d["dispatch_id"] for d in dispatches}) == len(expected)
    for d in dispatches:
        i = int(d["turn_id"].split("-")[1])
        assert d["arguments"] == {"city": f"City number {i}", "country": f"C{i % 10}", "units": "c"}

    ledger = await runtime.read("ledger")
    cancelled_calls = {(r["turn_id"], r["state"]) for r in ledger if r["turn_id"] in CANCELLED}
    assert cancelled_calls == {(t, "cancelled") for t in CANCELLED}
    assert [r for r in ledger if r["state"] == "dispatched"].__len__() == len(expected)

    # the transaction the dead worker left open was settled by the fence (InitProducerId)
    assert not await transaction_open(runtime)
    aborted = await runtime.read_uncommitted("status")  # aborted records stay in the log
    status = await runtime.read("status")
    restores = [r for r in w2.log_records() if r.get("msg") == "partition ready"]
    print(
        f"status records written incl. aborted: {len(aborted)}, committed: {len(status)}; "
        f"restore after crash: "
        + ", ".join(
            f"p{r['partition']}={r['restored_records']} rec/{r['restore_seconds']}s"
            for r in restores
        )
    )
