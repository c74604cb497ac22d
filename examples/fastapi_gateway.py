"""An LLM gateway on FastAPI: text streams to the client, tool calls go through Kafka.

Run it (a worker and an executor running against the same topics)::

    pip install 'toolcall-processor[anthropic,examples]' uvicorn
    export GATEWAY_TOKENS='{"tok-42": {"tenant": "acme", "actor": "user-42"}}'
    PROCESSOR_BOOTSTRAP_SERVERS=127.0.0.1:9092 uvicorn examples.fastapi_gateway:app

    curl -N localhost:8000/chat -H 'Authorization: Bearer tok-42' \\
         -d '{"message": "What is the weather in Paris?"}'

Per request the gateway (1) authenticates the caller: tenant and actor come from the
authenticated principal (here a bearer-token table stands in for your identity provider), never
from the request; (2) mints a fresh turn id on the server (returned in ``X-Turn-Id``) and writes
``turn.started``, which binds that turn to the actor; (3) calls the model with streaming on and
passes the SDK's stream through :func:`processor.tee_stream`: the text deltas go to the client as
they arrive, and the tool-call fragments go to the ``fragments`` topic on the side.

A client never names a turn: a body carrying ``turn_id`` is refused (422). Were a client allowed
to choose it, one who named another user's turn id first would bind that turn to himself, and
the other user's calls would fail ``permission_denied`` behind an HTTP 200.

After the model's stream, the gateway tells the caller what became of the turn, from the
worker's own records (followed by the library's :class:`processor.OutcomeFollower`): one line per
tool call (``[get_weather: dispatched]``, ``[get_weather: rejected: schema_invalid]``), and
``[turn refused: <reason>; …]`` if the worker refused the binding (``actor_rebind``,
``turn_limit``): then none of the turn's calls will run, and the caller is told so instead of
seeing a silent success.

The worker assembles and validates each call and dispatches it once the response completed; an
executor runs it (see ``examples/sqlite_executor.py``). The gateway never executes a tool. If the
client disconnects, Starlette cancels the response: ``aclosing`` ends the tee at once and the
response's open calls end inert, so nothing the user abandoned is ever dispatched.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

import processor

CallModel = Callable[[str, list[Any]], Any]
"""``(message, tools) -> the SDK's async stream`` (anthropic
``AsyncStream[RawMessageStreamEvent]``); ``tools`` is the registry's, rendered for the caller."""

EXAMPLE_TOOLS = Path(__file__).with_name("tools.yaml")


async def call_anthropic(message: str, tools: list[Any]) -> Any:
    """The real provider call (needs ``ANTHROPIC_API_KEY``)."""
    import anthropic  # noqa: PLC0415 - only the real provider call needs the SDK

    client = anthropic.AsyncAnthropic()
    return await client.messages.create(
        model="claude-sonnet-4-20250514",
        max_tokens=1024,
        tools=tools,
        messages=[{"role": "user", "content": message}],
        stream=True,
    )


class ChatRequest(BaseModel):
    """What a client may say: its message. Never a turn id, a tenant or a user."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1)


# ------------------------------------------------------------------------------ authentication


@dataclass(frozen=True)
class Principal:
    """Who the authenticated caller is: the only source of a turn's tenant and actor."""

    tenant: str
    actor: str


Authenticate = Callable[[Request], Principal | None]


def token_table(tokens: Mapping[str, Principal]) -> Authenticate:
    """Stand-in authentication: ``Authorization: Bearer <token>`` looked up in a fixed table
    (compared in constant time). Replace it with your identity provider's check."""

    def authenticate(request: Request) -> Principal | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        found = None
        for known, principal in tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = principal
        return found

    return authenticate


def tokens_from_env(variable: str = "GATEWAY_TOKENS") -> dict[str, Principal]:
    """``{"token": {"tenant": ..., "actor": ...}}`` from the environment (empty: nobody)."""
    table = json.loads(os.environ.get(variable) or "{}")
    return {token: Principal(**who) for token, who in table.items()}


def new_turn_id() -> str:
    """A turn id nobody can guess or choose: 128 random bits, minted by the server."""
    return f"turn-{secrets.token_hex(16)}"


# ------------------------------------------------------------------------ the worker's verdicts


def verdict_lines(report: processor.TurnReport) -> list[str]:
    """What the caller is told after the text: a refused binding, then each call's state as
    the worker decided it (``dispatched``, or why it will not run)."""
    lines = []
    if report.binding_refused is not None:
        lines.append(f"[turn refused: {report.binding_refused}; none of its tool calls will run]")
    for outcome in report.outcomes:
        if outcome.reason == "turn_binding_refused":
            lines.append(f"[{outcome.name}: will not run]")
        elif outcome.settled:
            text = f"[{outcome.name}: {outcome.kind.value}"
            lines.append(text + (f": {outcome.reason}]" if outcome.reason else "]"))
        elif outcome.stage == "dispatched":
            lines.append(f"[{outcome.name}: dispatched]")
        else:
            lines.append(f"[{outcome.name}: no verdict yet]")
    return lines


# ------------------------------------------------------------------------------------- the app


def text_of(event: Any) -> str:
    """The user-visible text an anthropic stream event carries ('' for the others)."""
    if getattr(event, "type", None) == "content_block_delta" and event.delta.type == "text_delta":
        return str(event.delta.text)
    return ""


def create_app(
    settings: processor.Settings,
    call_model: CallModel = call_anthropic,
    *,
    authenticate: Authenticate,
    mint_turn_id: Callable[[], str] = new_turn_id,
    verdict_wait: float = 10.0,
    registry: processor.Registry | None = None,
) -> FastAPI:
    """The gateway: one :class:`processor.Publisher` and one :class:`processor.OutcomeFollower`
    for the process's lifetime. ``verdict_wait`` bounds how long a response waits, after the model's
    stream, for the worker's verdict on the turn's calls. The model is offered the tools of
    ``registry`` (default: the worker's, ``PROCESSOR_TOOLS_FILE``) that the caller's tenant and
    actor may call, rendered by :func:`processor.tool_definitions`: no hand-written tool list to
    keep in step with what the worker accepts."""
    if registry is None:
        if settings.tools_file is None:
            raise processor.ConfigurationError(
                "missing_tools", "the gateway offers the registry's tools: set PROCESSOR_TOOLS_FILE"
            )
        registry = processor.load_registry(settings.tools_file)
    offered = registry
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with (
            processor.OutcomeFollower(settings) as follower,
            processor.Publisher(settings) as publisher,
        ):
            state["publisher"], state["follower"] = publisher, follower
            yield

    app = FastAPI(title="toolcall gateway example", lifespan=lifespan)

    @app.post("/chat")
    async def chat(body: ChatRequest, request: Request) -> StreamingResponse:
        principal = authenticate(request)
        if principal is None:
            raise HTTPException(401, "authentication required")
        publisher: processor.Publisher = state["publisher"]
        follower: processor.OutcomeFollower = state["follower"]
        turn = processor.TurnContext(
            tenant=principal.tenant, turn_id=mint_turn_id(), actor=principal.actor
        )
        command_id = f"{turn.turn_id}.started"
        # followed before the turn starts: nothing the worker says about it is missed
        followed = await follower.follow(turn, command_id=command_id)
        await publisher.start_turn(turn, command_id=command_id)
        tools = processor.tool_definitions(
            offered, "anthropic", tenant=principal.tenant, actor=principal.actor
        )
        stream = await call_model(body.message, tools)
        side = processor.TeeState(turn, keep_events=True)

        async def text() -> AsyncIterator[str]:
            tee = processor.tee_stream(stream, publisher, turn=turn, state=side)
            async with contextlib.aclosing(tee) as events:
                async for event in events:
                    if piece := text_of(event):
                        yield piece
            async with followed:
                followed.expect(side)
                report = await followed.wait(verdict_wait, until="decided")
            for line in verdict_lines(report):
                yield "\n" + line

        return StreamingResponse(
            text(), media_type="text/plain; charset=utf-8", headers={"X-Turn-Id": turn.turn_id}
        )

    return app


def _default_app() -> FastAPI:
    settings = processor.Settings()
    if settings.tools_file is None:
        settings = settings.model_copy(update={"tools_file": EXAMPLE_TOOLS})
    return create_app(settings, authenticate=token_table(tokens_from_env()))


app = _default_app()
