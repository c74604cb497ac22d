"""The agent loop example with an MCP-imported registry, end to end on the real broker (issue 43,
item 4): `processor tools import-mcp` (the real command) imports the example MCP server's tools;
:func:`processor.tool_definitions` offers them to Anthropic (flattened names) and OpenAI
Responses (a namespace tool); the provider's own SDK replays the model's call by the offered name
(``examples/recordings/*-mcp-*``) through the tee to a worker subprocess, which resolves it to
``bookings``' ``list_free_slots``; the MCP executor (:func:`examples.agent_loop.mcp_handlers`,
the server over stdio) runs it; the outcome follower brings the server's answer back under the
name the model called, and the next request, built by :func:`processor.tool_results`, answers
that call and validates against the provider SDK's request type."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
from pydantic import TypeAdapter

import processor
from examples.agent_loop import (
    MCP_QUESTION,
    MCP_SCRIPTS,
    MCP_SERVER,
    MCP_TOOLS_FILE,
    RECORDINGS,
    ReplayModel,
    Step,
    agent_loop,
    make_model,
    mcp_handlers,
)
from processor.agent.outcomes import OutcomeKind
from tests.integration.conftest import REPO_ROOT, Runtime
from tests.integration.executor_harness import Executor, group_of, running

pytestmark = pytest.mark.integration

REQUEST_TYPE: dict[str, Any] = {
    "anthropic": MessageCreateParamsStreaming,
    "openai-responses": ResponseCreateParamsStreaming,
}
# what the model is offered, and calls the server's list_free_slots by: (namespace, name)
OFFERED = {
    "anthropic": (None, "bookings__list_free_slots"),
    "openai-responses": ("bookings", "list_free_slots"),
}
# the server's answer for the day the recorded call asks about (it is computed from the day)
SLOTS = ["2026-12-07T09:00", "2026-12-07T14:00"]
IMPORT_MCP = [sys.executable, "-m", "processor.cli", "tools", "import-mcp"]


def _import(runtime: Runtime) -> processor.Registry:
    """The worker's registry, as `processor tools import-mcp` writes it for the example server
    (the same file the example offers: deploy/mcp/tools.yaml)."""
    path = runtime.tmp_path / "mcp-tools.yaml"
    done = subprocess.run(
        [*IMPORT_MCP, "--server-command", MCP_SERVER, "-o", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert path.read_text() == MCP_TOOLS_FILE.read_text()
    shutil.copy(path, runtime.tmp_path / "tools.yaml")  # the worker's registry
    return processor.load_registry(path)


async def _run(runtime: Runtime, provider: str) -> tuple[list[Step], ReplayModel]:
    registry = _import(runtime)
    worker = runtime.start_worker()
    await worker.wait_ready()
    tools = processor.tool_definitions(registry, provider, tenant="acme", actor="user-42")
    replay = ReplayModel([RECORDINGS / name for name in MCP_SCRIPTS[provider]])
    model = make_model(provider, replay.transport, tools, MCP_QUESTION)
    async with mcp_handlers(registry) as handlers:
        executor = Executor(runtime.settings, handlers, group=group_of(runtime), registry=registry)
        async with (
            running(executor),
            processor.OutcomeFollower(runtime.settings) as follower,
            processor.Publisher(runtime.settings) as publisher,
        ):
            steps = await agent_loop(
                model, publisher, follower, tenant="acme", actor="user-42", outcome_wait=60
            )
    for body in replay.requests:  # what the provider would have received
        TypeAdapter(REQUEST_TYPE[provider]).validate_python(body)
    return steps, replay


def _offered(provider: str, request: dict[str, Any]) -> list[tuple[str | None, str]]:
    """The (namespace, name) of every tool the request offered."""
    found: list[tuple[str | None, str]] = []
    for tool in request["tools"]:
        if tool.get("type") == "namespace":
            found += [(tool["name"], inner["name"]) for inner in tool["tools"]]
        else:
            found.append((None, tool["name"]))
    return found


def _answered(provider: str, request: dict[str, Any]) -> tuple[tuple[str | None, str], str, str]:
    """The call the next request answers, as the model made it ((namespace, name), call id), and
    the answer's content; each checked to be the same call."""
    if provider == "anthropic":
        call, [result] = request["messages"][-2]["content"][-1], request["messages"][-1]["content"]
        assert call["type"] == "tool_use" and result["type"] == "tool_result"
        assert result["tool_use_id"] == call["id"] and result["is_error"] is False
        return (None, call["name"]), call["id"], result["content"]
    call, result = request["input"][-2], request["input"][-1]
    assert call["type"] == "function_call" and result["type"] == "function_call_output"
    assert result["call_id"] == call["call_id"]
    assert (result["namespace"], result["name"]) == (call.get("namespace"), call["name"])
    return (call.get("namespace"), call["name"]), call["call_id"], result["output"]


@pytest.mark.parametrize("provider", ["anthropic", "openai-responses"])
async def test_the_model_calls_an_mcp_tool_by_its_offered_name_and_hears_the_server(
    runtime: Runtime, provider: str
) -> None:
    steps, replay = await _run(runtime, provider)
    assert len(steps) == 2 and len(replay.requests) == 2
    first, second = replay.requests
    assert OFFERED[provider] in _offered(provider, first)
    [outcome] = steps[0].outcomes
    # the worker resolved the offered name to the pinned entry, the MCP server ran it
    assert outcome.kind is OutcomeKind.RAN, (outcome.kind, outcome.reason)
    assert (outcome.namespace, outcome.tool) == ("bookings", "list_free_slots")
    assert outcome.output is not None
    assert outcome.output["structuredContent"] == {"result": SLOTS}
    assert (outcome.called_namespace, outcome.name) == OFFERED[provider]
    # the next request answers the call under the name the model called it by
    called, call_id, content = _answered(provider, second)
    assert called == OFFERED[provider] and call_id == outcome.key.call_id
    assert json.loads(content)["structuredContent"] == {"result": SLOTS}
    assert steps[1].outcomes == [] and "09:00" in steps[1].text
