"""The executor client on a real broker, fed by hand: dispatch and control records written directly.

No assembler worker here: these tests pin the executor's own guarantees (the execution-time
fence with its control barrier, results and status, trace context). The harness is
``tests/integration/executor_harness.py``, shared with the other executor tests; the
``runtime`` fixture creates every topic, the executor's ``results`` and ``executions``
included.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import orjson
import pytest

from processor.core.events import ToolDisabled, encode, stable_id
from processor.executor.client import ExecutorClient
from processor.executor.handlers import Call, Handlers
from tests.integration.conftest import (
    TRACEPARENT,
    Runtime,
    quarantine,
    tenant_stopped,
    turn_cancelled,
    turn_started,
    wait_until,
)
from tests.integration.executor_harness import (
    Executor,
    Recorder,
    group_of,
    make_dispatch,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------------------- tests


@pytest.mark.partitions(3)
async def test_valid_call_runs_once_with_its_dispatch_id_and_trace(runtime: Runtime) -> None:
    rt = runtime
    recorder = Recorder()
    d = make_dispatch("acme", "turn-1", "call_0")
    await rt.control(turn_started("acme", "turn-1"))
    await write_dispatch(rt, d)
    async with running(Executor(rt.settings, recorder.handlers, group=group_of(rt))):
        [result] = await wait_results(rt.settings, 1)
    assert recorder.dispatch_ids == [d.dispatch_id]
    call = recorder.calls[0]
    assert call.idempotency_key == d.dispatch_id
    assert call.traceparent == TRACEPARENT
    assert call.key == d.key and call.actor == "user-1"
    assert dict(call.arguments) == {"city": "Oslo"}
    assert "Oslo" not in repr(call)  # arguments never appear in a call's repr (logs)
    assert result.outcome == "succeeded"
    assert result.dispatch_id == d.dispatch_id
    assert result.output == {"ok": True, "ref": d.dispatch_id[:8]}
    assert b"Oslo" not in encode(result)


@pytest.mark.partitions(3)
async def test_control_written_before_execution_refuses_the_call(runtime: Runtime) -> None:
    """A cancellation, a quarantine, a tool disable and a tenant stop written after the dispatch
    record but before the executor ran it are all seen by the fence (the control barrier)."""
    rt = runtime
    recorder = Recorder()
    ok = make_dispatch("acme", "ok", "call_0")
    cancel_me = make_dispatch("acme", "cancel-me", "call_0")
    quarantine_me = make_dispatch("acme", "quarantine-me", "call_0")
    disabled = make_dispatch("acme", "disabled", "call_0", tool="book_slot")
    stopped = make_dispatch("globex", "stopped", "call_0")
    unbound = make_dispatch("acme", "never-started", "call_0")
    for d in (ok, cancel_me, quarantine_me, disabled):
        await rt.control(turn_started("acme", d.turn_id))
    await rt.control(turn_started("globex", "stopped"))
    await write_dispatch(rt, ok, cancel_me, quarantine_me, disabled, stopped, unbound)
    # control written after the dispatch records (AllowUnsigned here; signing: test_ctl_*)
    await rt.control(
        turn_cancelled("acme", "cancel-me"), quarantine("acme", "quarantine-me", "resp-1")
    )
    await rt.broadcast(
        ToolDisabled(
            command_id="td-1",
            issued_by="ops",
            issued_at=time.time(),
            reason="bug",
            tool="book_slot",
            tenant="acme",
            expires_at=time.time() + 60,
        )
    )
    await rt.broadcast(tenant_stopped("globex"))
    async with running(Executor(rt.settings, recorder.handlers, group=group_of(rt))):
        got = await wait_results(rt.settings, 6)
    assert recorder.dispatch_ids == [ok.dispatch_id]
    by_turn = {r.turn_id: r for r in got}
    assert by_turn["ok"].outcome == "succeeded"
    assert {t: (r.outcome.value, r.reason) for t, r in by_turn.items() if t != "ok"} == {
        "cancel-me": ("refused", "turn_cancelled"),
        "quarantine-me": ("refused", "quarantined"),
        "disabled": ("refused", "tool_disabled"),
        "stopped": ("refused", "tenant_stopped"),
        "never-started": ("refused", "turn_not_bound"),
    }
    assert by_turn["disabled"].blocked_by == "td-1"
    # the user is told the truth: cancelled for a stop, with a hand-off message and no retry
    status = [s for s in await rt.read("status") if s["turn_id"] == "stopped"]
    assert [(s["state"], s["retry_possible"]) for s in status] == [("cancelled", False)]
    assert "person will follow up" in status[0]["message"]


class _CancelAfterClaim(ExecutorClient):
    """Writes a cancellation of the call's turn right after the claim commits: the race the
    second fence check (just before the handler) exists for (the writer's ``transact``,
    wrapped)."""

    runtime: Runtime

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        transact = self.writer.transact

        async def then_cancel(owned: Any, outputs: list[Any], next_offset: int | None) -> None:
            await transact(owned, outputs, next_offset)
            for _topic, _key, value, _h, _p in outputs:
                entry = orjson.loads(value)
                if entry.get("state") == "claimed" and entry["turn_id"].startswith("race"):
                    await self.runtime.control(turn_cancelled(entry["tenant"], entry["turn_id"]))

        self.writer.transact = then_cancel  # type: ignore[method-assign]


@pytest.mark.partitions(2)
async def test_cancellation_racing_the_claim_is_refused_before_the_handler(
    runtime: Runtime,
) -> None:
    rt = runtime
    recorder = Recorder()
    race = make_dispatch("acme", "race-1", "call_0")
    calm = make_dispatch("acme", "calm-1", "call_0")
    await rt.control(turn_started("acme", "race-1"), turn_started("acme", "calm-1"))
    await write_dispatch(rt, race, calm)
    executor = Executor(
        rt.settings, recorder.handlers, group=group_of(rt), client_cls=_CancelAfterClaim
    )
    executor.client.runtime = rt  # type: ignore[attr-defined]
    async with running(executor):
        got = await wait_results(rt.settings, 2)
    assert recorder.dispatch_ids == [calm.dispatch_id]
    by_turn = {r.turn_id: (r.outcome.value, r.reason) for r in got}
    assert by_turn == {"race-1": ("refused", "turn_cancelled"), "calm-1": ("succeeded", None)}


@pytest.mark.partitions(2)
async def test_cancellation_while_an_earlier_call_runs_is_seen(runtime: Runtime) -> None:
    """A's handler runs (held); A's turn is cancelled; B of the same turn is fetched then: the
    fence refuses B while A still runs (a running handler holds nothing up: calls run side by
    side, and each is fenced when it is claimed and again right before it starts)."""
    rt = runtime
    gate = asyncio.Event()
    recorder = Recorder(gate=gate)
    first = make_dispatch("acme", "slow", "call_0")
    second = make_dispatch("acme", "slow", "call_1")  # same turn → same partition, after A
    await rt.control(turn_started("acme", "slow"))
    await write_dispatch(rt, first)
    async with running(Executor(rt.settings, recorder.handlers, group=group_of(rt))):
        await wait_until(
            lambda: _true_if(recorder.dispatch_ids == [first.dispatch_id]),
            timeout=60,
            what="first handler running",
        )
        await rt.control(turn_cancelled("acme", "slow"))
        await write_dispatch(rt, second)
        [refused] = await wait_results(rt.settings, 1)
        assert not gate.is_set()  # refused while A's handler still runs
        assert (refused.call_id, refused.outcome.value) == ("call_1", "refused")
        gate.set()
        got = await wait_results(rt.settings, 2)
    assert recorder.dispatch_ids == [first.dispatch_id]
    outcomes = {r.call_id: (r.outcome.value, r.reason) for r in got}
    assert outcomes == {"call_0": ("succeeded", None), "call_1": ("refused", "turn_cancelled")}


@pytest.mark.partitions(2)
async def test_other_tools_are_left_to_other_groups_and_confirmation_is_required(
    runtime: Runtime,
) -> None:
    rt = runtime
    weather = Recorder("get_weather")
    booking = Handlers()
    booked: list[str] = []

    async def book(call: Call) -> None:
        booked.append(call.dispatch_id)

    booking.register("book_slot", book, requires_confirmation=True)
    await rt.control(turn_started("acme", "mix"))
    w = make_dispatch("acme", "mix", "call_0")
    b = make_dispatch("acme", "mix", "call_1", tool="book_slot")  # names no confirmation
    await write_dispatch(rt, w, b)
    async with (
        running(Executor(rt.settings, weather.handlers, group=group_of(rt, "weather"))),
        running(Executor(rt.settings, booking, group=group_of(rt, "booking"))),
    ):
        got = await wait_results(rt.settings, 2)
    assert weather.dispatch_ids == [w.dispatch_id]
    assert booked == []
    by_group = {(r.executor_group.rsplit(".", 1)[-1], r.call_id): r for r in got}
    assert by_group[("weather", "call_0")].outcome == "succeeded"
    refused = by_group[("booking", "call_1")]
    assert (refused.outcome, refused.reason) == ("refused", "confirmation_missing")


@pytest.mark.partitions(2)
async def test_example_book_slot_executor(runtime: Runtime) -> None:
    """examples/book_slot_executor.py, loaded as ``processor executor run`` loads it."""
    from processor.core.events import CallConfirmed
    from processor.executor.handlers import load_handlers

    rt = runtime
    handlers = load_handlers("examples.book_slot_executor:handlers")
    assert handlers.tools() == ["book_slot"]
    booking = {"date": "2031-05-04", "time": "19:30", "party_size": 4}
    await rt.control(turn_started("acme", "book"))
    confirmations = []
    for call_id in ("call_0", "call_1"):
        confirmation = CallConfirmed(
            command_id=f"conf-{call_id}",
            issued_by="gateway",
            issued_at=time.time(),
            tenant="acme",
            turn_id="book",
            response_id="resp-1",
            item_id=call_id,
            call_id=call_id,
            actor="user-1",
            args_digest=stable_id("digest", "acme", "book", call_id),
        )
        confirmations.append(confirmation)
    await rt.control(*confirmations)
    confirmed = make_dispatch(
        "acme",
        "book",
        "call_0",
        tool="book_slot",
        arguments=booking,
        confirmation_ref="conf-call_0",
    )
    too_big = make_dispatch(
        "acme",
        "book",
        "call_1",
        tool="book_slot",
        arguments={**booking, "party_size": 9},
        confirmation_ref="conf-call_1",
    )
    unconfirmed = make_dispatch("acme", "book", "call_2", tool="book_slot", arguments=booking)
    await write_dispatch(rt, confirmed, too_big, unconfirmed)
    async with running(Executor(rt.settings, handlers, group=group_of(rt))):
        got = await wait_results(rt.settings, 3)
    by_call = {r.call_id: r for r in got}
    assert by_call["call_0"].outcome == "succeeded"
    assert str((by_call["call_0"].output or {})["booking_ref"]).startswith("BK-")
    assert (by_call["call_1"].outcome, by_call["call_1"].reason) == ("failed", "slot_full")
    assert by_call["call_1"].retry_possible is True
    assert (by_call["call_2"].outcome, by_call["call_2"].reason) == (
        "refused",
        "confirmation_missing",
    )
    status = [s for s in await rt.read("status") if s["call_id"] == "call_1"]
    assert [(s["state"], s["retry_possible"]) for s in status] == [("failed", True)]


async def _true_if(value: bool) -> bool:
    return value


Awaitable_ = Awaitable  # re-exported for type checkers of importing modules
