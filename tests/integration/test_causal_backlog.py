"""Issue 8's regression, no faults needed: a worker that catches up on a backlog must apply a
cancellation committed before a call's terminal, even when it reads the terminal first.

Written in this order, each acknowledged: turn.started(T); T's call.started + deltas;
turn.cancelled(T); T's call.ended and response.ended; then hundreds of records of other turns
on the same partition. One worker then starts on the backlog with small batches, so fragments
and control arrive in different fetches. Before the causal barrier, T's call was dispatched and
the cancel audited "applied" with no affected calls.
"""

from __future__ import annotations

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

OTHERS = 120  # 6 fragment records each, plus their turn.started on control


@pytest.mark.partitions(1)
async def test_a_cancel_committed_before_the_terminal_wins_on_a_backlog(runtime: Runtime) -> None:
    target = call_events("acme", "turn-T", "call_0", '{"city": "Oslo"}')
    await runtime.control(turn_started("acme", "turn-T"))
    await runtime.publish(target[:-2])  # started and deltas
    cancel = turn_cancelled("acme", "turn-T")
    await runtime.control(cancel)
    await runtime.publish(target[-2:])  # call.ended, response.ended: after the cancel
    others = [f"o-{i}" for i in range(OTHERS)]
    for turn in others:
        await runtime.control(turn_started("acme", turn))
    batch = []
    for turn in others:
        batch += call_events("acme", turn, "call_0", '{"city": "Rome"}')
    await runtime.publish(batch)

    worker = runtime.start_worker("w1", PROCESSOR_BATCH_MAX_RECORDS="40")
    await worker.wait_ready()

    async def settled() -> bool:
        return len(await runtime.dispatches()) >= OTHERS and await runtime.caught_up()

    await wait_until(settled, timeout=120, what="the backlog processed")
    keys = dispatch_keys(await runtime.dispatches())
    assert ("acme", "turn-T", "call_0") not in keys
    assert sorted(keys) == sorted(("acme", t, "call_0") for t in others)
    ledger = [r for r in await runtime.read("ledger") if r["turn_id"] == "turn-T"]
    assert [(r["state"], r["terminal_reason"]) for r in ledger] == [("cancelled", "user_stop")]
    audit = [a for a in await runtime.read("audit") if a["command_id"] == cancel.command_id]
    assert [a["outcome"] for a in audit] == ["applied"]
    # the call was open when the cancel applied (affected), or not yet read at all (the worker
    # read control ahead of fragments; the call then starts on a cancelled turn): never acted
    assert [k["call_id"] for k in audit[0]["affected"]] in (["call_0"], [])
