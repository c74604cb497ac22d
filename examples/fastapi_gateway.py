"""An LLM gateway on FastAPI: text streams to the client, tool calls go through Kafka.

Run it (a worker and an executor running against the same topics)::

    pip install 'toolcall-processor[anthropic,examples]' uvicorn
    PROCESSOR_BOOTSTRAP_SERVERS=127.0.0.1:9092 uvicorn examples.fastapi_gateway:app

    curl -N localhost:8000/chat -H 'X-Tenant: acme' -H 'X-User: user-42' \\
         -d '{"turn_id": "t-1", "message": "What is the weather in Paris?"}'

Per request the gateway (1) writes ``turn.started``, which binds the turn to the authenticated
actor (``X-User`` stands in for your authentication), (2) calls the model with streaming on, and
(3) passes the SDK's stream through :func:`processor.tee_stream`: the text deltas go to the
client as they arrive, and the tool-call fragments go to the ``fragments`` topic on the side.
The worker assembles and validates each call and dispatches it once the response completed;
an executor runs it (see ``examples/sqlite_executor.py``). The gateway never executes a tool.

If the client disconnects, Starlette cancels the response: ``aclosing`` ends the tee at once
and the response's open calls end inert, so nothing the user abandoned is ever dispatched.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Header
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

import processor

CallModel = Callable[[str], Any]
"""``message -> the SDK's async stream`` (anthropic ``AsyncStream[RawMessageStreamEvent]``)."""

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a location.",
    "input_schema": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
}


async def call_anthropic(message: str) -> Any:
    """The real provider call (needs ``ANTHROPIC_API_KEY``)."""
    import anthropic  # noqa: PLC0415 - only the real provider call needs the SDK

    client = anthropic.AsyncAnthropic()
    return await client.messages.create(
        model="claude-sonnet-4-20250514",
        max_tokens=1024,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": message}],
        stream=True,
    )


class ChatRequest(BaseModel):
    turn_id: str = Field(min_length=1, max_length=256)
    message: str = Field(min_length=1)


def text_of(event: Any) -> str:
    """The user-visible text an anthropic stream event carries ('' for the others)."""
    if getattr(event, "type", None) == "content_block_delta" and event.delta.type == "text_delta":
        return str(event.delta.text)
    return ""


def create_app(settings: processor.Settings, call_model: CallModel = call_anthropic) -> FastAPI:
    """The gateway: one :class:`processor.Publisher` for the process's lifetime."""
    state: dict[str, processor.Publisher] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with processor.Publisher(settings) as publisher:
            state["publisher"] = publisher
            yield

    app = FastAPI(title="toolcall gateway example", lifespan=lifespan)

    @app.post("/chat")
    async def chat(
        request: ChatRequest,
        x_tenant: str = Header(min_length=1, max_length=256),
        x_user: str = Header(min_length=1, max_length=256),
    ) -> StreamingResponse:
        publisher = state["publisher"]
        turn = processor.TurnContext(tenant=x_tenant, turn_id=request.turn_id, actor=x_user)
        await publisher.start_turn(turn)
        stream = await call_model(request.message)

        async def body() -> AsyncIterator[str]:
            tee = processor.tee_stream(stream, publisher, turn=turn)
            async with contextlib.aclosing(tee) as events:
                async for event in events:
                    if text := text_of(event):
                        yield text

        return StreamingResponse(body(), media_type="text/plain; charset=utf-8")

    return app


def _default_app() -> FastAPI:
    return create_app(processor.Settings())


app = _default_app()
