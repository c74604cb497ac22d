"""Crash recovery on a real broker: ``kill -9`` of a worker mid-stream, then a restart.

Invariant 4 end to end: every valid completed call is dispatched exactly once (none lost, none
twice) across the crash, and a call of a cancelled turn never is. The worker commits small
batches (10 records) while fragments keep flowing, so the kill lands while transactions are
being written; the replacement fences the dead worker's transactional ids (aborting whatever
it left open), restores the partitions' state from the changelog and resumes from the committed
offsets.
"""

from __future__ import annotations

import asyncio

import pytest

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

    async def produce() -> None:
        for i in range(TURNS):
            turn = f"k-{i}"
            await runtime.control(turn_started("acme", turn))
            args = f'{{"city": "City number {i}", "country": "C{i % 10}", "units": "c"}}'
            await runtime.publish(call_events("acme", turn, "call_0", args, pieces=8))
            await asyncio.sleep(0.05)

    producing = asyncio.create_task(produce())

    async def some_dispatched() -> bool:
        return len(await runtime.dispatches()) >= 8

    await wait_until(some_dispatched, timeout=60, interval=0.2, what="first dispatches")
    w1.kill()  # SIGKILL: no revocation, no abort, open transactions stay open
    assert await w1.wait_exit(10) == -9
    await producing

    w2 = runtime.start_worker("w2", **small_batches)
    await w2.wait_ready(timeout=90)
    expected = sorted(("acme", f"k-{i}", "call_0") for i in range(TURNS) if f"k-{i}" not in CANCELLED)

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

    written = len(await runtime.read_uncommitted("dispatch"))
    restores = [r for r in w2.log_records() if r.get("msg") == "partition ready"]
    print(
        f"dispatch records written incl. aborted ones: {written}, committed: {len(dispatches)}; "
        f"restore after crash: "
        + ", ".join(f"p{r['partition']}={r['restored_records']} rec/{r['restore_seconds']}s" for r in restores)
    )
