"""The executor harness the integration tests share: handlers that record what they ran, an
executor client started and stopped around a test, dispatch records written as the worker
writes them, and the results read back. Fixture code, not tests (issue 41: no test imports
another test module's helpers)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from processor.core.authn import AllowUnsigned, CommandVerifier
from processor.core.events import Dispatch, encode, stable_id, turn_key
from processor.core.registry import Registry
from processor.executor.client import ExecutorClient
from processor.executor.handlers import Call, Handlers
from processor.executor.records import ExecutionEntry, ExecutionResult
from processor.kafka.tail import read_records
from processor.settings import Settings
from tests.integration.conftest import (
    TRACEPARENT,
    Runtime,
    wait_until,
)


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


async def ledger(runtime: Runtime) -> list[ExecutionEntry]:
    topic = runtime.topics.executions
    return [
        ExecutionEntry.model_validate_json(r.value)
        async for r in read_records(runtime.settings, topic)
    ]
