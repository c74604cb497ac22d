"""A small MCP server (the SDK's ``MCPServer``) to try ``processor executor mcp`` with.

    python -m examples.mcp_bookings_server                 # stdio
    python -m examples.mcp_bookings_server http 8000       # Streamable HTTP on 127.0.0.1:8000

(``MCP_HOST`` sets the HTTP address to listen on: ``0.0.0.0`` in a container.)

``book_slot`` reads the ``toolcall-processor/idempotency-key`` of the request's ``_meta`` (the
dispatch id) and books a slot once per key, as a real system should: a call resolved by hand
after an ``unknown`` outcome cannot book twice.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("bookings")
_booked: dict[str, str] = {}  # idempotency key -> reference


@server.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=True))
async def book_slot(slot: str, ctx: Context) -> dict[str, Any]:
    """Book a meeting slot (ISO 8601 start time)."""
    key = dict(ctx.request_context.meta or {}).get("toolcall-processor/idempotency-key")
    if isinstance(key, str) and key in _booked:
        return {"ref": _booked[key], "replayed": True}
    ref = f"B-{len(_booked) + 1:04d}"
    if isinstance(key, str):
        _booked[key] = ref
    return {"ref": ref, "replayed": False}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def list_free_slots(day: str) -> list[str]:
    """The free slots of a day (YYYY-MM-DD)."""
    return [f"{day}T09:00", f"{day}T14:00"]


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
        host = os.environ.get("MCP_HOST", "127.0.0.1")
        server.run("streamable-http", host=host, port=port)
    else:
        server.run()
