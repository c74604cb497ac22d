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

from examples.fastapi_gateway import create_app
from examples.sqlite_executor import make_handlers
from tests.integration import sdk_streams as sdk
from tests.integration.conftest import Runtime, wait_until
from tests.integration.test_executor_fence import Executor, group_of

pytestmark = pytest.mark.integration

RECORDING = "anthropic/text-then-tool-use.sse"


async def _results(runtime: Runtime) -> list[dict[str, Any]]:
    return await runtime.read("results")


async def test_gateway_streams_text_and_the_executor_runs_the_call_once(
    runtime: Runtime, tmp_path: Path
) -> None:
    worker = runtime.start_worker()
    await worker.wait_ready()
    asked: list[str] = []

    async def call_model(message: str) -> Any:
        asked.append(message)
        return sdk.anthropic_messages(RECORDING)

    app = create_app(runtime.settings, call_model)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            async with client.stream(
                "POST",
                "/chat",
                json={"turn_id": "t-paris", "message": "What is the weather in Paris?"},
                headers={"X-Tenant": "acme", "X-User": "user-42"},
            ) as response:
                assert response.status_code == 200
                pieces = [piece async for piece in response.aiter_text()]
            refused = await client.post("/chat", json={"turn_id": "t-x", "message": "hi"})
    assert "".join(pieces) == "I'll check the current weather in Paris for you."
    assert asked == ["What is the weather in Paris?"]
    assert refused.status_code == 422  # no tenant or user: no turn, nothing published

    async def dispatched() -> list[dict[str, Any]]:
        return await runtime.dispatches()

    (dispatch,) = await wait_until(dispatched, timeout=60, what="the gateway's dispatch")
    assert (dispatch["tenant"], dispatch["turn_id"], dispatch["actor"]) == (
        "acme",
        "t-paris",
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
    assert rows == [(dispatch["dispatch_id"], "acme", "t-paris", "Paris", "user-42")]
