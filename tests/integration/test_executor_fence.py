"""The executor client on a real broker, fed by hand: dispatch and control records written directly.

No assembler worker here: these tests pin the executor's own guarantees (the execution-time
fence with its control barrier, results and status, trace context). The harness defined here is
shared with the other ``test_executor_*`` / ``test_ctl_*`` modules; the ``runtime`` fixture
creates every topic, the executor's ``results`` and ``executions`` included.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import orjson
import pytest

from processor.core.authn import AllowUnsigned, CommandVerifier
from processor.core.events import Dispatch, ToolDisabled, encode, stable_id, turn_key
from processor.core.registry import Registry
from processor.executor.client import ExecutorClient
from processor.executor.handlers import Call, Handlers
from processor.executor.records import ExecutionResult
from processor.runtime.tail import read_records
from processor.settings import Settings
from tests.integration.conftest import (
    TRACEPARENT,
    Runtime,
    quarantine,
    tenant_stopped,
    turn_cancelled,
    turn_started,
    wait_until,
)

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------------------- harness


class Recorder:
    """Handlers that record every call they run (dispatch ids and keys only)."""

    def __init__(
        self,
        *tools: str,
        gate: asyncio.Event | None = None,
        requires_confirmation: bool | None = False,
    ) -> None:
        self.calls: list[Call] = []
        self.gate = gate
        self.handlers = Handlers()
        for tool in tools or ("get_weather", "book_slot"):
            # a stand-in says itself whether it needs a confirmation (the tests' registry does
            # not declare book_slot, and an executor never guesses); None: the registry says
            self.handlers.register(tool, self.handle, requires_confirmation=requires_confirmation)

    async def handle(self, call: Call) -> Mapping[str, Any]:
        self.calls.append(call)
        if self.gate is not None:
            await self.gate.wait()
        return {"ok": True, "ref": call.dispatch_id[:8]}

    @property
    def dispatch_ids(self) -> list[str]:
        return [c.dispatch_id for c in self.calls]


class Executor:
    """An in-process :class:`ExecutorClient` running as a task."""

    def __init__(
        self,
        settings: Settings,
        handlers: Handlers,
        *,
        group: str,
        verifier: CommandVerifier | None = None,
        registry: Registry | None = None,
        client_cls: type[ExecutorClient] = ExecutorClient,
        **kwargs: Any,
    ) -> None:
        self.client = client_cls(
            settings,
            handlers,
            verifier=verifier or AllowUnsigned(),
            group=group,
            registry=registry,
            executor_id=f"test-{uuid.uuid4().hex[:6]}",
            **kwargs,
        )
        self.task: asyncio.Task[None] | None = None

    async def start(self, timeout: float = 60.0) -> None:
        await self.client.start()
        self.task = asyncio.create_task(self.client.run())

        async def assigned() -> bool:
            if self.task is not None and self.task.done():
                self.task.result()  # raise what went wrong
            return bool(self.client.owned_partitions())

        await wait_until(assigned, timeout=timeout, what="executor partitions assigned")

    async def stop(self) -> None:
        self.client.request_stop()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self.task, 60)
        await self.client.stop()


@contextlib.asynccontextmanager
async def running(executor: Executor) -> AsyncIterator[Executor]:
    await executor.start()
    try:
        yield executor
    finally:
        await executor.stop()


async def results(settings: Settings) -> list[ExecutionResult]:
    topic = settings.topics.results
    return [
        ExecutionResult.model_validate_json(r.value) async for r in read_records(settings, topic)
    ]


async def wait_results(
    settings: Settings, n: int, *, timeout: float = 60.0, where: Callable[[Any], bool] = bool
) -> list[ExecutionResult]:
    async def check() -> list[ExecutionResult] | None:
        got = [r for r in await results(settings) if where(r)]
        return got if len(got) >= n else None

    found: list[ExecutionResult] = await wait_until(check, timeout=timeout, what=f"{n} results")
    return found


async def statuses(runtime: Runtime, call_id: str) -> list[dict[str, Any]]:
    return [s for s in await runtime.read("status") if s["call_id"] == call_id]


# ---------------------------------------------------------------------------- records


def make_dispatch(
    tenant: str,
    turn: str,
    call_id: str,
    *,
    tool: str = "get_weather",
    actor: str = "user-1",
    confirmation_ref: str | None = None,
    arguments: dict[str, Any] | None = None,
    ts: float | None = None,
) -> Dispatch:
    return Dispatch(
        tenant=tenant,
        turn_id=turn,
        response_id="resp-1",
        item_id=call_id,
        call_id=call_id,
        dispatch_id=stable_id("dispatch", tenant, turn, call_id),
        tool=tool,
        tool_version="2" if tool == "get_weather" else "1",
        arguments=arguments or {"city": "Oslo"},
        args_digest=stable_id("digest", tenant, turn, call_id),
        actor=actor,
        provider="test",
        terminal_event_id=f"{call_id}.t",
        confirmation_ref=confirmation_ref,
        ts=ts if ts is not None else time.time(),
    )


async def write_dispatch(
    runtime: Runtime, *dispatches: Dispatch, traceparent: str | None = TRACEPARENT
) -> None:
    """As the worker writes them: keyed by turn key, with a traceparent header."""
    producer = await runtime.producer()
    headers = [("traceparent", traceparent.encode())] if traceparent else []
    for d in dispatches:
        await producer.send_and_wait(
            runtime.topics.dispatch,
            encode(d),
            key=turn_key(d.tenant, d.turn_id).encode(),
            headers=headers,
        )


def group_of(runtime: Runtime, name: str = "exec") -> str:
    return f"{runtime.prefix}{name}"


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
    second fence check (just before the handler) exists for."""

    runtime: Runtime

    async def _transact(self, owned: Any, outputs: list[Any], next_offset: int | None) -> None:
        await super()._transact(owned, outputs, next_offset)
        for _topic, _key, value, _p, _h in outputs:
            entry = orjson.loads(value)
            if entry.get("state") == "claimed" and entry["turn_id"].startswith("race"):
                await self.runtime.control(turn_cancelled(entry["tenant"], entry["turn_id"]))


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
