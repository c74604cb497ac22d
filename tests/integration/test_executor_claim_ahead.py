"""Calls claimed ahead of a free slot, on a real broker (issue 39).

An executor claims up to ``executor_claim_ahead`` calls more than it has free slots, so that a
slot that frees is taken at once. Such a call waits with its claim committed; what must still
hold: it runs only after the fence is read again right before it starts (a cancellation that
came while it waited refuses it), and a stop while it waits ends it truthfully (``refused``,
``executor_stopped``, retry possible), never run by this executor nor by the next owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from processor.executor.handlers import Call, Handlers
from tests.integration.conftest import Runtime, turn_cancelled, turn_started, wait_until
from tests.integration.executor_harness import (
    Executor,
    group_of,
    ledger,
    make_dispatch,
    results,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = [pytest.mark.integration, pytest.mark.partitions(1)]


class Gate:
    """``get_weather`` calls: the turn ``first`` runs until released, the others return."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.release = asyncio.Event()
        self.handlers = Handlers()
        self.handlers.register("get_weather", self.handle, requires_confirmation=False)

    async def handle(self, call: Call) -> Mapping[str, Any]:
        self.ran.append(call.key.turn_id)
        if call.key.turn_id == "first":
            await self.release.wait()
        return {"ok": True}


async def _one_running_one_waiting(rt: Runtime, gate: Gate, executor: Executor) -> str:
    """``first`` runs in the only slot; ``second`` is claimed and waits for it. Returns the
    waiting call's dispatch id."""
    first, second = make_dispatch("acme", "first", "c1"), make_dispatch("acme", "second", "c2")
    await rt.control(turn_started("acme", "first"), turn_started("acme", "second"))
    await write_dispatch(rt, first)

    async def started() -> bool:
        return gate.ran == ["first"]

    await wait_until(started, timeout=60, what="the first call running")
    await write_dispatch(rt, second)

    async def claimed() -> bool:
        entries = {e.dispatch_id: e.state for e in await ledger(rt)}
        return entries.get(second.dispatch_id) == "claimed"

    await wait_until(claimed, timeout=60, what="the second call claimed ahead of a slot")
    assert gate.ran == ["first"]  # claimed, not started: the slot is taken
    assert executor.client.in_flight.waiting == 1
    return second.dispatch_id


async def test_a_call_cancelled_while_it_waits_for_a_slot_is_refused_when_the_slot_frees(
    runtime: Runtime,
) -> None:
    rt = runtime
    gate = Gate()
    executor = Executor(
        rt.settings, gate.handlers, group=group_of(rt), max_in_flight=1, claim_ahead=1
    )
    async with running(executor):
        waiting = await _one_running_one_waiting(rt, gate, executor)
        await rt.control(turn_cancelled("acme", "second"))
        gate.release.set()
        got = {
            r.dispatch_id: (r.outcome.value, r.reason) for r in await wait_results(rt.settings, 2)
        }
    assert got[waiting] == ("refused", "turn_cancelled")
    assert gate.ran == ["first"]  # the cancelled call never ran


async def test_a_stop_while_a_claimed_call_waits_refuses_it_and_no_owner_runs_it(
    runtime: Runtime,
) -> None:
    rt = runtime
    gate = Gate()
    settings = rt.settings.model_copy(update={"executor_release_wait_seconds": 1.0})
    group = group_of(rt)
    executor = Executor(settings, gate.handlers, group=group, max_in_flight=1, claim_ahead=1)
    await executor.start()
    try:
        waiting = await _one_running_one_waiting(rt, gate, executor)
    finally:
        await executor.stop()  # the running call is cancelled after 1 s; the waiting one refused
    got = {
        r.dispatch_id: (r.outcome.value, r.reason, r.retry_possible)
        for r in await results(rt.settings)
    }
    assert got[waiting] == ("refused", "executor_stopped", True)

    # the next owner runs neither: both have an outcome in the ledger
    later = Gate()
    async with running(Executor(rt.settings, later.handlers, group=group)):
        third = make_dispatch("acme", "third", "c3")
        await rt.control(turn_started("acme", "third"))
        await write_dispatch(rt, third)
        await wait_results(rt.settings, 3)
    assert later.ran == ["third"]
    assert gate.ran == ["first"]
