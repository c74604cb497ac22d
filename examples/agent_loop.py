"""An agent loop that closes over Kafka: model → tee → worker → executor → outcome → model.

Run it (a worker running against the same topics; the executor runs in this process)::

    PROCESSOR_BOOTSTRAP_SERVERS=127.0.0.1:9092 processor worker --tools examples/tools.yaml &
    PROCESSOR_BOOTSTRAP_SERVERS=127.0.0.1:9092 python -m examples.agent_loop anthropic
    PROCESSOR_BOOTSTRAP_SERVERS=127.0.0.1:9092 python -m examples.agent_loop openai-responses

With ``--mcp`` the tools are an MCP server's: the registry is the one ``processor tools
import-mcp`` wrote for ``examples/mcp_bookings_server.py`` (``deploy/mcp/tools.yaml``: every
tool in the ``bookings`` namespace, its definition pinned), and the executor is the MCP one
(:mod:`processor.mcp`, the library form of ``processor executor mcp``), running that server
over stdio::

    processor tools import-mcp --server-command "python -m examples.mcp_bookings_server" \
        -o deploy/mcp/tools.yaml                       # the same file again: nothing changes
    PROCESSOR_BOOTSTRAP_SERVERS=127.0.0.1:9092 processor worker --tools deploy/mcp/tools.yaml &
    PROCESSOR_BOOTSTRAP_SERVERS=127.0.0.1:9092 python -m examples.agent_loop anthropic --mcp

Anthropic is offered ``bookings__list_free_slots`` (the flattened name, which the registry
resolves to ``bookings``' ``list_free_slots``); OpenAI Responses a ``namespace`` tool
``bookings`` holding ``list_free_slots``, and its call carries the namespace. Either way the
server runs ``list_free_slots``, and the model is answered under the name it called.

The model is the provider's real SDK over :class:`ReplayModel`, an HTTP mock transport (``httpx2``,
the client the openai and anthropic SDKs use)
that answers each request with the next recorded stream of ``examples/recordings/`` (and keeps
the request bodies, so they can be checked against the provider's schema). Swap in a real
client and nothing else changes. Each model request is one turn:

1. the tools are the registry's, offered with :func:`processor.tool_definitions` for the turn's
   tenant and actor;
2. :meth:`processor.OutcomeFollower.follow` *before* ``start_turn``, so nothing the worker or
   the executor says about the turn is missed;
3. the SDK stream goes through :func:`processor.tee_stream`: the text as it comes, the tool-call
   fragments to Kafka; the worker validates and dispatches, an executor runs the call;
4. ``followed.expect(tee_state)`` then ``followed.wait(bound)``: each call's settled outcome
   (or ``open`` at the bound);
5. :func:`processor.tool_results` turns the outcomes into the provider's own tool-result
   messages, appended to the next request; the loop ends when the model answers without a call.

The ``--cancel`` variant stops the turn after the worker dispatched its call and before the
executor runs it: the executor's fence refuses it (``turn_cancelled``) and the model is told,
truthfully, that it did not run. The ``--cancel-running`` variant stops the turn while the call
runs (a slow tool): the executor tells the running handler (``call.stop``), the handler stops
without acting, and the model is told the call was stopped before it completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx2  # the HTTP client the openai and anthropic SDKs are built on

import processor

HERE = Path(__file__).resolve().parent
RECORDINGS = HERE / "recordings"
TOOLS_FILE = HERE / "tools.yaml"
MCP_TOOLS_FILE = HERE.parent / "deploy" / "mcp" / "tools.yaml"  # import-mcp of the server below
MCP_SERVER = f"{sys.executable} -m examples.mcp_bookings_server"  # stdio, from the repository
QUESTION = "What is the weather in Paris?"
MCP_QUESTION = "When can we meet on 7 December 2026?"
SCRIPTS = {
    "anthropic": ["anthropic-1-tool-use.sse", "anthropic-2-answer-SYNTHETIC.sse"],
    "openai-responses": [
        "openai-responses-1-call.sse",
        "openai-responses-2-answer-SYNTHETIC.sse",
    ],
}
MCP_SCRIPTS = {  # the model calls the MCP server's list_free_slots by the name it was offered
    "anthropic": ["anthropic-mcp-1-tool-use-SYNTHETIC.sse", "anthropic-mcp-2-answer-SYNTHETIC.sse"],
    "openai-responses": [
        "openai-responses-mcp-1-call-SYNTHETIC.sse",
        "openai-responses-mcp-2-answer-SYNTHETIC.sse",
    ],
}

OnDispatched = Callable[[processor.TurnContext], Awaitable[None]]


class ReplayModel:
    """An ``httpx2`` transport standing in for the provider: each request is answered with the
    next recorded stream; ``requests`` keeps the JSON bodies the SDK sent."""

    def __init__(self, recordings: list[Path]) -> None:
        self._left = deque(recordings)
        self.requests: list[dict[str, Any]] = []
        self.transport = httpx2.MockTransport(self._answer)

    def _answer(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        if not self._left:
            return httpx2.Response(500, json={"error": "no more recorded answers"})
        body = self._left.popleft().read_bytes()
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)


class Model(Protocol):
    """One provider's conversation: ask, stream a reply, hear the outcomes."""

    provider: str

    async def reply(
        self, publisher: processor.Publisher, turn: processor.TurnContext, side: Any
    ) -> str: ...

    def hear(self, outcomes: list[processor.Outcome]) -> None: ...


@dataclass
class AnthropicModel:
    """Anthropic Messages: ``messages`` grows by the assistant's content and one user message
    of ``tool_result`` blocks per step."""

    client: Any
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]] = field(default_factory=list)
    provider: str = "anthropic"

    async def reply(
        self, publisher: processor.Publisher, turn: processor.TurnContext, side: Any
    ) -> str:
        async with self.client.messages.stream(
            model="claude-sonnet-4-20250514", max_tokens=1024, tools=self.tools,
            messages=self.messages,
        ) as stream:  # fmt: skip
            async for _ in processor.tee_stream(stream, publisher, turn=turn, state=side):
                pass  # a gateway forwards text here
            final = await stream.get_final_message()
        content: list[dict[str, Any]] = []
        for block in final.content:
            if block.type == "text":
                content.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                content.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
                )
        self.messages.append({"role": "assistant", "content": content})
        return "".join(b["text"] for b in content if b["type"] == "text")

    def hear(self, outcomes: list[processor.Outcome]) -> None:
        self.messages += processor.tool_results(outcomes, self.provider)


@dataclass
class OpenAIResponsesModel:
    """OpenAI Responses: ``input`` grows by the response's output items and one
    ``function_call_output`` item per call (a call of a namespaced tool keeps its namespace)."""

    client: Any
    tools: list[dict[str, Any]]
    input: list[dict[str, Any]] = field(default_factory=list)
    provider: str = "openai-responses"

    async def reply(
        self, publisher: processor.Publisher, turn: processor.TurnContext, side: Any
    ) -> str:
        stream = await self.client.responses.create(
            model="gpt-5.1", input=self.input, tools=self.tools, stream=True
        )
        completed = None
        async for event in processor.tee_stream(stream, publisher, turn=turn, state=side):
            if event.type == "response.completed":
                completed = event.response
        text = []
        for item in completed.output if completed is not None else ():
            if item.type == "function_call":
                call = {"type": "function_call", "call_id": item.call_id, "name": item.name,
                        "arguments": item.arguments}  # fmt: skip
                if item.namespace is not None:
                    call["namespace"] = item.namespace
                self.input.append(call)
            elif item.type == "message":
                said = "".join(c.text for c in item.content if c.type == "output_text")
                self.input.append({"role": "assistant", "content": said})
                text.append(said)
        return "".join(text)

    def hear(self, outcomes: list[processor.Outcome]) -> None:
        self.input += processor.tool_results(outcomes, self.provider)


def make_model(
    provider: str, transport: httpx2.MockTransport, tools: list[dict[str, Any]], question: str
) -> Model:
    """The provider's own SDK client over ``transport``, with the user's first message."""
    http = httpx2.AsyncClient(transport=transport)
    if provider == "anthropic":
        import anthropic  # noqa: PLC0415 - the example's provider SDKs are optional extras

        client = anthropic.AsyncAnthropic(api_key="replay", http_client=http)
        return AnthropicModel(client, tools, [{"role": "user", "content": question}])
    if provider == "openai-responses":
        import openai  # noqa: PLC0415

        client = openai.AsyncOpenAI(api_key="replay", http_client=http)
        return OpenAIResponsesModel(client, tools, [{"role": "user", "content": question}])
    raise ValueError(f"no model for {provider!r}")


@dataclass
class Step:
    """One model request: what the model said, and the outcomes of the calls it made."""

    text: str
    outcomes: list[processor.Outcome]


async def agent_loop(
    model: Model,
    publisher: processor.Publisher,
    follower: processor.OutcomeFollower,
    *,
    tenant: str,
    actor: str,
    outcome_wait: float = 30.0,
    max_steps: int = 5,
    on_dispatched: OnDispatched | None = None,
) -> list[Step]:
    """Ask, run the calls through Kafka, tell the outcomes, until an answer without a call."""
    steps: list[Step] = []
    for _ in range(max_steps):
        turn = processor.TurnContext(
            tenant=tenant, turn_id=f"turn-{secrets.token_hex(16)}", actor=actor
        )
        command_id = f"{turn.turn_id}.started"
        async with await follower.follow(turn, command_id=command_id) as followed:
            await publisher.start_turn(turn, command_id=command_id)
            side = processor.TeeState(turn, keep_events=True)
            text = await model.reply(publisher, turn, side)
            if not any(isinstance(e, processor.CallStarted) for e in side.events):
                steps.append(Step(text, []))
                return steps
            followed.expect(side)
            if on_dispatched is not None:
                await followed.wait(outcome_wait, until="decided")
                await on_dispatched(turn)
            report = await followed.wait(outcome_wait)
        steps.append(Step(text, report.outcomes))
        model.hear(report.outcomes)
    return steps


# ------------------------------------------------------------------------- the tool and a stop


def make_handlers(running: asyncio.Event | None = None) -> Any:
    """The executor's side: ``get_weather`` answers from a table (never echoing arguments).

    With ``running`` it is a slow tool instead: it sets ``running`` once it started, then
    works until its turn is stopped (``call.stop``) and stops cleanly, having done nothing:
    ``ExecutionFailed("cancelled_while_running")``."""

    async def get_weather(call: Any) -> dict[str, Any]:
        if running is not None:
            running.set()
            try:
                await asyncio.wait_for(call.stop.wait(), timeout=60)
            except TimeoutError:
                return {"conditions": "sunny", "temp_c": 18}
            raise processor.ExecutionFailed("cancelled_while_running")
        return {"conditions": "sunny", "temp_c": 18}

    handlers = processor.Handlers()
    handlers.register("get_weather", get_weather, requires_confirmation=False)
    return handlers


@contextlib.asynccontextmanager
async def mcp_handlers(
    registry: processor.Registry, command: str = MCP_SERVER
) -> AsyncIterator[processor.Handlers]:
    """The executor's side for an MCP-imported registry: a handler for each tool pinned to the
    server, each one ``tools/call`` over stdio (what ``processor executor mcp`` runs). The
    server is started here and stopped on exit; a definition that no longer matches its pin
    fails its calls (``tool_changed``)."""
    from processor.mcp.connection import McpConnection, ServerSpec  # noqa: PLC0415 - [mcp]
    from processor.mcp.tools import McpTools  # noqa: PLC0415

    tools: McpTools | None = None

    async def on_listing(listing: Any) -> None:
        if tools is not None:
            await tools.check_listing(listing)

    spec = ServerSpec(command=command, cwd=str(HERE.parent))
    connection = McpConnection(spec, on_listing=on_listing)
    tools = McpTools(registry, connection)
    await connection.start()
    try:
        yield tools.handlers()
    finally:
        await connection.stop()


async def stop_turn(settings: processor.Settings, turn: processor.TurnContext) -> None:
    """The user pressed stop: ``turn.cancelled`` on the turn's control partition."""
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    cancel = processor.TurnCancelled(
        command_id=f"{turn.turn_id}.stopped",
        issued_by="agent",
        issued_at=time.time(),
        reason="user_stop",
        tenant=turn.tenant,
        turn_id=turn.turn_id,
    )
    producer = AIOKafkaProducer(**settings.kafka_client_kwargs(), enable_idempotence=True)
    await producer.start()
    try:
        key = f"{turn.tenant}/{turn.turn_id}".encode()
        await producer.send_and_wait(settings.topics.control, processor.encode(cancel), key=key)
    finally:
        await producer.stop()


async def main(
    provider: str, cancel: bool = False, cancel_running: bool = False, mcp: bool = False
) -> list[Step]:
    """The whole loop against the broker of ``PROCESSOR_BOOTSTRAP_SERVERS`` (a worker must run,
    with the same registry). With ``cancel``, the executor starts only after the user stopped
    the turn; with ``cancel_running``, the user stops the turn while its call runs; with
    ``mcp``, the tools are the MCP server's (neither stop variant)."""
    if mcp and (cancel or cancel_running):
        raise ValueError("--mcp runs the plain loop only")
    async with contextlib.AsyncExitStack() as stack:
        registry = processor.load_registry(MCP_TOOLS_FILE if mcp else TOOLS_FILE)
        running_call = asyncio.Event() if cancel_running else None
        if mcp:
            handlers = await stack.enter_async_context(mcp_handlers(registry))
        else:
            handlers = make_handlers(running_call)
        return await _main(provider, registry, handlers, running_call, cancel=cancel, mcp=mcp)


async def _main(
    provider: str,
    registry: processor.Registry,
    handlers: processor.Handlers,
    running_call: asyncio.Event | None,
    *,
    cancel: bool,
    mcp: bool,
) -> list[Step]:
    from processor.core.authn import AllowUnsigned  # noqa: PLC0415 - a demo: no operator keys

    settings = processor.Settings()
    tenant, actor = "acme", "user-42"
    tools = processor.tool_definitions(registry, provider, tenant=tenant, actor=actor)
    scripts, question = (MCP_SCRIPTS, MCP_QUESTION) if mcp else (SCRIPTS, QUESTION)
    replay = ReplayModel([RECORDINGS / name for name in scripts[provider]])
    model = make_model(provider, replay.transport, tools, question)
    executor = processor.ExecutorClient(
        settings, handlers, verifier=AllowUnsigned(), group="agent-loop", registry=registry
    )
    running: list[asyncio.Task[None]] = []

    async def run_executor() -> None:
        if not running:
            await executor.start()
            running.append(asyncio.create_task(executor.run()))

    async def stop_then_run(turn: processor.TurnContext) -> None:
        await stop_turn(settings, turn)
        await run_executor()

    async def stop_while_running(turn: processor.TurnContext) -> None:
        assert running_call is not None
        await running_call.wait()
        await stop_turn(settings, turn)

    on_dispatched = (
        stop_then_run if cancel else stop_while_running if running_call is not None else None
    )
    async with processor.OutcomeFollower(settings) as follower, processor.Publisher(settings) as p:
        if not cancel:
            await run_executor()
        try:
            return await agent_loop(
                model, p, follower, tenant=tenant, actor=actor, on_dispatched=on_dispatched
            )
        finally:
            executor.request_stop()
            for task in running:
                await task


if __name__ == "__main__":
    variant = {
        "cancel": "--cancel" in sys.argv,
        "cancel_running": "--cancel-running" in sys.argv,
        "mcp": "--mcp" in sys.argv,
    }
    for step in asyncio.run(main(sys.argv[1], **variant)):
        print(step.text)
        for outcome in step.outcomes:
            print(f"  [{outcome.name}: {outcome.kind.value}] {processor.outcome_text(outcome)}")
