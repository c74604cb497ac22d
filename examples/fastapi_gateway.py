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
worker's own records (``status`` and ``audit``, followed by :class:`TurnWatch`): one line per
tool call (``[get_weather: dispatched]``, ``[get_weather: failed: …]``), and
``[turn refused: <reason>; …]`` if the worker refused the binding (``actor_rebind``,
``turn_limit``): then none of the turn's calls will run, and the caller is told so instead of
seeing a silent success.

The worker assembles and validates each call and dispatches it once the response completed; an
executor runs it (see ``examples/sqlite_executor.py``). The gateway never executes a tool. If the
client disconnects, Starlette cancels the response: ``aclosing`` ends the tee at once and the
response's open calls end inert, so nothing the user abandoned is ever dispatched.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

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


@dataclass
class TurnNotes:
    """What the worker said about one turn: call statuses by call id, a refused binding."""

    command_id: str
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    refused: str | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


_SETTLED = frozenset({"dispatched", "awaiting_confirmation", "cancelled", "failed"})


class TurnWatch:
    """Follows the worker's ``status`` and ``audit`` topics (committed records, from the end at
    start) for the turns this gateway minted; remembers at most ``max_turns`` of them."""

    def __init__(self, settings: processor.Settings, max_turns: int = 10_000) -> None:
        self.settings = settings
        self.max_turns = max_turns
        self.turns: OrderedDict[tuple[str, str], TurnNotes] = OrderedDict()
        self.commands: dict[str, TurnNotes] = {}
        self._task: asyncio.Task[None] | None = None
        self._consumer = AIOKafkaConsumer(
            **settings.kafka_client_kwargs(),
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )

    async def start(self) -> None:
        topics = [self.settings.topics.output(role) for role in ("status", "audit")]
        admin = AIOKafkaAdminClient(**self.settings.kafka_client_kwargs())
        await admin.start()
        try:
            described = await admin.describe_topics(topics)
        finally:
            await admin.close()
        tps = [
            TopicPartition(info["topic"], part["partition"])
            for info in described
            for part in info["partitions"]
        ]
        if {tp.topic for tp in tps} != set(topics):
            raise RuntimeError(f"the topics {topics} must exist")
        await self._consumer.start()
        self._consumer.assign(tps)
        await self._consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the positions now: nothing written after start is missed
            await self._consumer.position(tp)
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    def watch(self, tenant: str, turn_id: str, command_id: str) -> TurnNotes:
        notes = self.turns[(tenant, turn_id)] = self.commands[command_id] = TurnNotes(command_id)
        while len(self.turns) > self.max_turns:
            _, old = self.turns.popitem(last=False)
            self.commands.pop(old.command_id, None)
        return notes

    async def _follow(self) -> None:
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    with contextlib.suppress(orjson.JSONDecodeError, TypeError, KeyError):
                        self._note(orjson.loads(record.value))

    def _note(self, value: dict[str, Any]) -> None:
        if value.get("type") == "status":
            notes = self.turns.get((value["tenant"], value["turn_id"]))
            if notes is not None:
                notes.statuses[value["call_id"]] = value
                notes.changed.set()
        elif value.get("type") == "audit" and value.get("command_type") == "turn.started":
            notes = self.commands.get(value["command_id"])
            if notes is not None and value.get("outcome") == "rejected":
                notes.refused = value.get("rejection") or "rejected"
                notes.changed.set()

    async def settle(self, notes: TurnNotes, calls: Iterable[str], timeout: float) -> None:
        """Wait until every call has a settled status, the binding was refused, or timeout."""
        calls = list(calls)
        deadline = time.monotonic() + timeout
        while notes.refused is None and not all(
            notes.statuses.get(c, {}).get("state") in _SETTLED for c in calls
        ):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            notes.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(notes.changed.wait(), left)


def verdict_lines(notes: TurnNotes, calls: dict[str, str]) -> list[str]:
    """What the caller is told after the text (``calls``: call id → tool name): a refused
    binding, then each call's state."""
    lines = []
    if notes.refused is not None:
        lines.append(f"[turn refused: {notes.refused}; none of its tool calls will run]")
    for call, tool in calls.items():
        status = notes.statuses.get(call)
        # a refused binding settles the turn: a call still "preparing" when the refusal was read
        # will not run either (its own failure may follow), so it is not shown as in progress
        if status is None or (notes.refused is not None and status["state"] not in _SETTLED):
            lines.append(f"[{tool}: {'will not run' if notes.refused else 'no verdict yet'}]")
            continue
        text = f"[{tool}: {status['state']}"
        if status["state"] in ("failed", "cancelled") and status.get("message"):
            text += f": {status['message']}"
        lines.append(text + "]")
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
) -> FastAPI:
    """The gateway: one :class:`processor.Publisher` and one :class:`TurnWatch` for the
    process's lifetime. ``verdict_wait`` bounds how long a response waits, after the model's
    stream, for the worker's verdict on the turn's calls."""
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        watch = TurnWatch(settings)
        await watch.start()
        try:
            async with processor.Publisher(settings) as publisher:
                state["publisher"], state["watch"] = publisher, watch
                yield
        finally:
            await watch.stop()

    app = FastAPI(title="toolcall gateway example", lifespan=lifespan)

    @app.post("/chat")
    async def chat(body: ChatRequest, request: Request) -> StreamingResponse:
        principal = authenticate(request)
        if principal is None:
            raise HTTPException(401, "authentication required")
        publisher: processor.Publisher = state["publisher"]
        watch: TurnWatch = state["watch"]
        turn = processor.TurnContext(
            tenant=principal.tenant, turn_id=mint_turn_id(), actor=principal.actor
        )
        command_id = f"{turn.turn_id}.started"
        notes = watch.watch(turn.tenant, turn.turn_id, command_id)
        await publisher.start_turn(turn, command_id=command_id)
        stream = await call_model(body.message)
        side = processor.TeeState(turn, keep_events=True)

        async def text() -> AsyncIterator[str]:
            tee = processor.tee_stream(stream, publisher, turn=turn, state=side)
            async with contextlib.aclosing(tee) as events:
                async for event in events:
                    if piece := text_of(event):
                        yield piece
            calls = {e.call_id: e.tool for e in side.events if isinstance(e, processor.CallStarted)}
            await watch.settle(notes, calls, verdict_wait)
            for line in verdict_lines(notes, calls):
                yield "\n" + line

        return StreamingResponse(
            text(), media_type="text/plain; charset=utf-8", headers={"X-Turn-Id": turn.turn_id}
        )

    return app


def _default_app() -> FastAPI:
    return create_app(processor.Settings(), authenticate=token_table(tokens_from_env()))


app = _default_app()
