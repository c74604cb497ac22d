"""The chaos executors' MCP server (``--executors-mcp``): the run's tools, served over stdio with
the SDK's low-level server API, each call's side effect the line :mod:`tests.chaos.effects`
writes.

Every ``processor executor mcp`` member starts one (``--server-command "python -m
tests.chaos.mcp_effects"``). Its tools are the run's registry (``CHAOS_TOOLS``): the same names
and schemas, ``destructiveHint`` = the tool's ``requires_confirmation``. A ``tools/call`` appends
``{dispatch_id, pid, arguments}`` to ``CHAOS_EFFECTS`` (the dispatch id from the request's
``_meta`` idempotency key; ``pid`` the executor member's, this server's parent, so a ``kill``
fault can target the member whose call is in flight; ``at`` and ``ends`` as there: when the side
effect happened and when the call will return), then takes 0-500 ms.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import mcp.types as types
import orjson
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from processor.registry_file import load_registry
from tests.chaos.effects import arguments_digest

SERVER_NAME = "chaos-effects"
IDEMPOTENCY_KEY = "toolcall-processor/idempotency-key"


def definitions() -> list[types.Tool]:
    registry = load_registry(Path(os.environ["CHAOS_TOOLS"]))
    return [
        types.Tool.model_validate(
            {
                "name": tool.name,
                "description": f"The chaos run's {tool.name}.",
                "inputSchema": dict(tool.parameters),
                "annotations": {"destructiveHint": tool.requires_confirmation},
            }
        )
        for tool in registry.tools
    ]


async def main() -> None:
    tools = definitions()
    rng = random.Random()  # the harness's own timing, not the product's
    effects = Path(os.environ["CHAOS_EFFECTS"])

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        meta = dict(ctx.meta or {})
        sleep = rng.uniform(0.0, 0.5)
        at = time.time()
        line = {
            "dispatch_id": meta.get(IDEMPOTENCY_KEY),
            "pid": os.getppid(),
            "arguments": arguments_digest(params.arguments or {}),
            "at": at,
            "ends": at + sleep,
        }
        fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:  # one write of one short line with O_APPEND: whole, and never interleaved
            os.write(fd, orjson.dumps(line) + b"\n")
        finally:
            os.close(fd)
        await asyncio.sleep(sleep)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="done")],
            structured_content={"done": True},
        )

    server: Server[Any] = Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    asyncio.run(main())
