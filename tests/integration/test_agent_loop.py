"""The agent loop example end to end on the real broker (issue 40, item 3): the provider's own
SDK over recorded streams, the tee, a worker subprocess, an in-process executor, the outcome
follower, and the next model request built from the outcomes, for Anthropic and OpenAI
Responses; each request body the SDK sent is checked against the provider's documented request
type. The cancel variant stops the turn after its call was dispatched and before the executor
ran it: the model is told that the call did not run; the other stops it while the call runs:
the model is told that the call was stopped before it completed."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
from pydantic import TypeAdapter

import processor
from examples.agent_loop import (
    RECORDINGS,
    SCRIPTS,
    TOOLS_FILE,
    ReplayModel,
    Step,
    agent_loop,
    make_handlers,
    make_model,
    stop_turn,
)
from processor.agent.outcomes import OutcomeKind
from tests.integration.conftest import Runtime
from tests.integration.executor_harness import Executor, group_of

pytestmark = pytest.mark.integration

REQUEST_TYPE: dict[str, Any] = {
    "anthropic": MessageCreateParamsStreaming,
    "openai-responses": ResponseCreateParamsStreaming,
}


async def _run(
    runtime: Runtime, provider: str, *, cancel: bool, cancel_running: bool = False
) -> tuple[list[Step], ReplayModel]:
    shutil.copy(TOOLS_FILE, runtime.tmp_path / "tools.yaml")  # the worker's registry
    worker = runtime.start_worker()
    await worker.wait_ready()
    registry = processor.load_registry(TOOLS_FILE)
    tools = processor.tool_definitions(registry, provider, tenant="acme", actor="user-42")
    replay = ReplayModel([RECORDINGS / name for name in SCRIPTS[provider]])
    model = make_model(provider, replay.transport, tools, "What is the weather in Paris?")
    running_call = asyncio.Event() if cancel_running else None
    executor = Executor(
        runtime.settings, make_handlers(running_call), group=group_of(runtime), registry=registry
    )
    started: list[Executor] = []

    async def stop_then_run(turn: processor.TurnContext) -> None:
        await stop_turn(runtime.settings, turn)
        await executor.start()
        started.append(executor)

    async def stop_while_running(turn: processor.TurnContext) -> None:
        assert running_call is not None
        await asyncio.wait_for(running_call.wait(), 60)  # the handler runs now
        await stop_turn(runtime.settings, turn)

    on_dispatched = stop_then_run if cancel else stop_while_running if cancel_running else None

    try:
        async with (
            processor.OutcomeFollower(runtime.settings) as follower,
            processor.Publisher(runtime.settings) as publisher,
        ):
            if not cancel:
                await executor.start()
                started.append(executor)
            steps = await agent_loop(
                model,
                publisher,
                follower,
                tenant="acme",
                actor="user-42",
                outcome_wait=60,
                on_dispatched=on_dispatched,
            )
    finally:
        for running in started:
            await running.stop()
    for body in replay.requests:  # what the provider would have received
        TypeAdapter(REQUEST_TYPE[provider]).validate_python(body)
    return steps, replay


def _tool_result(provider: str, request: dict[str, Any]) -> tuple[str, str, bool]:
    """(call id, content, is an error) of the one tool result the request carries."""
    if provider == "anthropic":
        [block] = request["messages"][-1]["content"]
        assert request["messages"][-1]["role"] == "user"
        assert request["messages"][-2]["content"][-1]["type"] == "tool_use"
        return block["tool_use_id"], block["content"], block["is_error"]
    item = request["input"][-1]
    assert item["type"] == "function_call_output"
    assert request["input"][-2]["type"] == "function_call"
    return item["call_id"], item["output"], not item["output"].startswith("{")


@pytest.mark.parametrize("provider", ["anthropic", "openai-responses"])
async def test_the_model_gets_the_executors_output_and_answers(
    runtime: Runtime, provider: str
) -> None:
    steps, replay = await _run(runtime, provider, cancel=False)
    assert len(steps) == 2 and len(replay.requests) == 2
    [outcome] = steps[0].outcomes
    assert outcome.kind is OutcomeKind.RAN
    assert outcome.output == {"conditions": "sunny", "temp_c": 18}
    assert steps[1].outcomes == [] and "sunny" in steps[1].text
    call_id, content, is_error = _tool_result(provider, replay.requests[1])
    assert call_id == outcome.key.call_id
    assert (content, is_error) == ('{"conditions":"sunny","temp_c":18}', False)
    assert "tools" in replay.requests[0] and replay.requests[0]["tools"]


@pytest.mark.parametrize("provider", ["anthropic", "openai-responses"])
async def test_a_stopped_turn_is_told_to_the_model_as_not_run(
    runtime: Runtime, provider: str
) -> None:
    steps, replay = await _run(runtime, provider, cancel=True)
    [outcome] = steps[0].outcomes
    assert (outcome.kind, outcome.reason) == (OutcomeKind.REFUSED, "turn_cancelled")
    assert outcome.output is None
    _, content, is_error = _tool_result(provider, replay.requests[1])
    assert is_error
    assert content.startswith("Not run (turn_cancelled)")
    assert "sunny" not in content


@pytest.mark.parametrize("provider", ["anthropic", "openai-responses"])
async def test_a_turn_stopped_while_its_call_runs_is_told_to_the_model_as_stopped(
    runtime: Runtime, provider: str
) -> None:
    """The user stops the turn while the (slow) tool runs: the executor tells the running
    handler (``call.stop``), it stops without acting, and the model is told the call was
    stopped before it completed, never that it ran."""
    steps, replay = await _run(runtime, provider, cancel=False, cancel_running=True)
    [outcome] = steps[0].outcomes
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "cancelled_while_running")
    assert outcome.output is None
    _, content, is_error = _tool_result(provider, replay.requests[1])
    assert is_error
    assert content.startswith("Stopped (cancelled_while_running)")
    assert "sunny" not in content
