"""The examples on the real broker: the FastAPI gateway streams the model's text to its client
while the tool call goes through Kafka, and the SQLite executor runs it exactly once per
``dispatch_id`` however many executor groups see it.

The provider call is replaced by the anthropic SDK's real ``AsyncStream`` over a recorded body;
Kafka, the worker (a subprocess) and the executors are real.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

import processor
from examples.fastapi_gateway import Principal, create_app, token_table
from examples.sqlite_executor import make_handlers
from tests.integration import sdk_streams as sdk
from tests.integration.conftest import Runtime, turn_started, wait_until
from tests.integration.executor_harness import Executor, group_of

pytestmark = pytest.mark.integration

RECORDING = "anthropic/text-then-tool-use.sse"


async def _results(runtime: Runtime) -> list[dict[str, Any]]:
    return await runtime.read("results")


ALICE = Principal(tenant="acme", actor="user-42")
MALLORY = Principal(tenant="acme", actor="mallory")
TOKENS = {"tok-alice": ALICE, "tok-mallory": MALLORY}


def _headers(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


async def test_gateway_streams_text_and_the_executor_runs_the_call_once(
    runtime: Runtime, tmp_path: Path
) -> None:
    worker = runtime.start_worker()
    await worker.wait_ready()
    asked: list[str] = []
    offered: list[list[Any]] = []

    async def call_model(message: str, tools: list[Any]) -> Any:
        asked.append(message)
        offered.append(tools)
        return sdk.anthropic_messages(RECORDING)

    app = create_app(runtime.settings, call_model, authenticate=token_table(TOKENS))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            async with client.stream(
                "POST",
                "/chat",
                json={"message": "What is the weather in Paris?"},
                # headers naming another tenant or user are not identity: ignored
                headers=_headers("tok-alice", **{"X-Tenant": "other", "X-User": "mallory"}),
            ) as response:
                assert response.status_code == 200
                turn_id = response.headers["X-Turn-Id"]
                pieces = [piece async for piece in response.aiter_text()]
            unauthenticated = await client.post("/chat", json={"message": "hi"})
            forged = await client.post("/chat", json={"message": "hi"}, headers=_headers("nope"))
            chosen_turn = await client.post(
                "/chat", json={"turn_id": "t-x", "message": "hi"}, headers=_headers("tok-alice")
            )
    text = "".join(pieces)
    assert text.startswith("I'll check the current weather in Paris for you.")
    assert text.endswith("\n[get_weather: dispatched]"), text
    assert asked == ["What is the weather in Paris?"]
    # the model was offered the worker's registry, rendered for the caller: no hand-written list
    registry = processor.load_registry(runtime.settings.tools_file)
    assert offered == [
        processor.tool_definitions(registry, "anthropic", tenant=ALICE.tenant, actor=ALICE.actor)
    ]
    assert [tool["name"] for tool in offered[0]] == ["get_weather"]
    assert (unauthenticated.status_code, forged.status_code) == (401, 401)
    assert chosen_turn.status_code == 422  # a client never names a turn: nothing published
    assert turn_id.startswith("turn-") and len(turn_id) == len("turn-") + 32

    async def dispatched() -> list[dict[str, Any]]:
        return await runtime.dispatches()

    (dispatch,) = await wait_until(dispatched, timeout=60, what="the gateway's dispatch")
    assert (dispatch["tenant"], dispatch["turn_id"], dispatch["actor"]) == (
        "acme",
        turn_id,
        "user-42",
    )
    assert (dispatch["tool"], dispatch["arguments"]) == ("get_weather", {"location": "Paris"})

    # two executor groups both run the dispatch; the side effect happens once
    db = tmp_path / "lookups.sqlite"
    for name in ("weather-a", "weather-b"):
        executor = Executor(runtime.settings, make_handlers(db), group=group_of(runtime, name))
        await executor.start()
        try:

            async def ran(group: str = group_of(runtime, name)) -> bool:
                return any(r["executor_group"] == group for r in await _results(runtime))

            await wait_until(ran, timeout=60, what=f"{name} result")
        finally:
            await executor.stop()

    results = sorted(await _results(runtime), key=lambda r: r["executor_group"])
    assert [r["outcome"] for r in results] == ["succeeded", "succeeded"]
    assert [r["output"] for r in results] == [
        {"lookup_ref": "LK-1", "repeated": False},
        {"lookup_ref": "LK-1", "repeated": True},
    ]
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT dispatch_id, tenant, turn_id, location, requested_by FROM lookups"
        ).fetchall()
    assert rows == [(dispatch["dispatch_id"], "acme", turn_id, "Paris", "user-42")]


async def test_a_refused_binding_is_told_to_the_caller_not_hidden_behind_a_200(
    runtime: Runtime,
) -> None:
    """Issue 30, item 7: were a turn id known beforehand (here the minting is forced to repeat
    one, as a client-chosen id once allowed), mallory binds it first; alice's request then says
    that her turn was refused and that its call failed, instead of a silent success."""
    worker = runtime.start_worker()
    await worker.wait_ready()
    await runtime.control(turn_started("acme", "turn-known", actor=MALLORY.actor))

    async def call_model(message: str, tools: list[Any]) -> Any:
        return sdk.anthropic_messages(RECORDING)

    app = create_app(
        runtime.settings,
        call_model,
        authenticate=token_table(TOKENS),
        mint_turn_id=lambda: "turn-known",
        verdict_wait=60.0,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            response = await client.post(
                "/chat", json={"message": "Weather in Paris?"}, headers=_headers("tok-alice")
            )
    assert response.status_code == 200
    assert "[turn refused: actor_rebind; none of its tool calls will run]" in response.text
    last = response.text.splitlines()[-1]
    assert last == "[get_weather: will not run]" or last.startswith("[get_weather: failed"), last
    assert await runtime.dispatches() == []
