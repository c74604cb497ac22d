"""A stdio MCP server that lists exactly the tools a test gives it, for the import tests.

    MCP_LISTING=/path/to/listing.json python -m tests.integration.mcp_listing_server

``listing.json`` is ``{"name": "<server name>", "tools": [<tool>, ...]}``, each tool as MCP
lists it (``name``, ``description``, ``inputSchema``, ``annotations``), served verbatim by the
SDK's low-level ``Server`` (so a test can list names and texts no decorator would write).
``tools/call`` is refused: the import never calls.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def _listing() -> dict[str, Any]:
    with open(os.environ["MCP_LISTING"], encoding="utf-8") as source:
        listing: dict[str, Any] = json.load(source)
    return listing


async def _list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[types.Tool.model_validate(tool) for tool in _listing()["tools"]]
    )


async def _call_tool(ctx: Any, params: Any) -> types.CallToolResult:
    raise ValueError("this test server runs no tool")


async def main() -> None:
    server: Server[Any] = Server(
        _listing()["name"], on_list_tools=_list_tools, on_call_tool=_call_tool
    )
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
