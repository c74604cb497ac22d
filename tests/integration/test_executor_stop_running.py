"""A running call is told when its turn is stopped, on a real broker (issue 39, item 3).

A ``turn.cancelled`` (or a quarantine, a tool disable, a tenant stop) committed while a call's
handler runs reaches that handler through ``call.stop``; a handler that stops cleanly says so
(``failed``, ``cancelled_while_running``), one that goes on is cancelled after the grace period
and its outcome is ``unknown`` (it may have acted). Either way the result names the command, and
a call of another turn running beside it is left alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from processor.executor.handlers import Call, ExecutionFailed, Handlers
from tests.integration.conftest import (
    Runtime,
    tenant_stopped,
    turn_cancelled,
    turn_started,
    wait_until,
)
from tests.integration.executor_harness import (
    Executor,
    group_of,
    make_dispatch,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = pytest.mark.integration


class Held:
    """``get_weather`` calls that run until released; ``polite``: they stop when told."""

    def __init__(self, *, polite: bool) -> None:
        self.polite = polite
        self.started: dict[str, asyncio.Event] = {}
        self.told: dict[str, str] = {}
        self.release = asyncio.Event()
        self.handlers = Handlers()
        self.handlers.register("get_weather", self.handle, requires_confirmation=False)

    async def handle(self, call: Call) -> Mapping[str, Any]:
        self.started.setdefault(call.key.turn_id, asyncio.Event()).set()
        if self.polite:
            stop = asyncio.create_task(call.stop.wait())
            release = asyncio.create_task(self.release.wait())
            await asyncio.wait({stop, release}, return_when=asyncio.FIRST_COMPLETED)
            release.cancel()
            if stop.done():
                self.told[call.key.turn_id] = stop.result()
                raise ExecutionFailed("cancelled_while_running")
            stop.cancel()
        else:
            await self.release.wait()  # goes on whatever it is told
        return {"ok": True}

    async def running(self, turn: str) -> None:
        async def started() -> bool:
            return turn in self.started

        await wait_until(started, timeout=60, what=f"the handler of {turn} running")


@pytest.mark.partitions(2)
async def test_a_cancellation_reaches_a_running_handler_that_stops_cleanly(
    runtime: Runtime,
) -> None:
    rt = runtime
    held = Held(polite=True)
    stopped, other = make_dispatch("acme", "stop-me", "call_0"), make_dispatch("acme", "go", "c")
    await rt.control(turn_started("acme", "stop-me"), turn_started("acme", "go"))
    await write_dispatch(rt, stopped, other)
    async with running(Executor(rt.settings, held.handlers, group=group_of(rt))):
        await held.running("stop-me")
        await held.running("go")
        cancel = turn_cancelled("acme", "stop-me")
        await rt.control(cancel)
        [result] = await wait_results(rt.settings, 1, timeout=30)
        assert "go" not in held.told  # the other turn's call still runs, untold
        held.release.set()
        got = {r.turn_id: r for r in await wait_results(rt.settings, 2)}
    assert held.told == {"stop-me": "turn_cancelled"}
    assert result.turn_id == "stop-me"
    assert (result.outcome.value, result.reason) == ("failed", "cancelled_while_running")
    assert result.blocked_by == cancel.command_id
    assert got["go"].outcome.value == "succeeded"


@pytest.mark.partitions(2)
async def test_a_running_handler_that_goes_on_is_cancelled_after_the_grace_and_unknown(
    runtime: Runtime,
) -> None:
    rt = runtime
    settings = rt.settings.model_copy(update={"executor_stop_grace_seconds": 0.5})
    held = Held(polite=False)
    stopped = make_dispatch("globex", "stubborn", "call_0")
    other = make_dispatch("acme", "go", "call_0")
    await rt.control(turn_started("globex", "stubborn"), turn_started("acme", "go"))
    await write_dispatch(rt, stopped, other)
    async with running(Executor(settings, held.handlers, group=group_of(rt))):
        await held.running("stubborn")
        await held.running("go")
        stop = tenant_stopped("globex")
        await rt.broadcast(stop)
        [result] = await wait_results(rt.settings, 1, timeout=30)
        held.release.set()
        got = {r.turn_id: r for r in await wait_results(rt.settings, 2)}
    assert result.turn_id == "stubborn"
    assert (result.outcome.value, result.reason) == ("unknown", "cancelled_while_running")
    assert result.blocked_by == stop.command_id
    assert got["go"].outcome.value == "succeeded"
    status = [s for s in await rt.read("status") if s["turn_id"] == "stubborn"]
    assert [(s["state"], s["retry_possible"]) for s in status] == [("failed", False)]
