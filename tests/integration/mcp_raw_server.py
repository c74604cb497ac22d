"""A hand-written MCP server for the tests of hostile answers: newline-delimited JSON-RPC over
stdio, or JSON answers over HTTP (no SDK, so it can answer what the SDK's server never would).

    python -m tests.integration.mcp_raw_server stdio
    python -m tests.integration.mcp_raw_server http PORT     # 127.0.0.1 only, JSON answers

Every tool call appends one JSON line to ``$MCP_TEST_LOG`` (tool and idempotency key) first.
The server calls itself ``rawbookings``. Tools (one ``text`` string argument):

- ``echo`` → ``{"echo": "ok"}``; first prints a debug line quoting its argument on stdout
  (stdio) and on stderr, as a careless server does;
- ``typed`` → declares an ``outputSchema`` whose ``code`` has the pattern ``^(a+)+$`` and
  answers ``code`` = 30 ``a`` and a ``!`` (Python's ``re`` needs seconds to say no);
  ``$MCP_TEST_VARIANT=output_changed`` declares another pattern (nothing else changes);
- ``shaped`` → declares an ``outputSchema`` (``{"n": integer}``), answers ``{"n": "seven"}``;
- ``unreadable`` → an answer that is not a ``CallToolResult`` (``content`` is a string);
- ``garbled`` → over HTTP, a JSON body that is not JSON-RPC, quoting its argument; over
  stdio, that line, then a proper answer;
- ``huge`` → a ``$MCP_TEST_HUGE_BYTES`` (48,000,000) text result;
- ``bomb`` → over HTTP, ``huge``'s answer gzip-compressed (``Content-Encoding: gzip``, 47 KB);
- ``die_after`` → answers, then exits at once (stdio); with ``$MCP_TEST_ORPHAN`` it first
  starts a child that inherits its pipes and outlives it (no end of stdout).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
SAFE = {"destructiveHint": False}


def _tools() -> list[dict[str, Any]]:
    pattern = "^(b+)+$" if os.environ.get("MCP_TEST_VARIANT") == "output_changed" else "^(a+)+$"
    typed_schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": pattern}},
        "required": ["code"],
    }
    shaped_schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }
    tools = [
        {"name": "echo", "description": "Echo."},
        {"name": "typed", "description": "Typed.", "outputSchema": typed_schema},
        {"name": "shaped", "description": "Shaped.", "outputSchema": shaped_schema},
        {"name": "unreadable", "description": "Unreadable."},
        {"name": "garbled", "description": "Garbled."},
        {"name": "huge", "description": "Huge."},
        {"name": "bomb", "description": "Compressed."},
        {"name": "die_after", "description": "Answer, then exit."},
    ]
    return [{**t, "inputSchema": TEXT, "annotations": SAFE} for t in tools]


def _record(tool: str, params: dict[str, Any]) -> None:
    key = (params.get("_meta") or {}).get("toolcall-processor/idempotency-key")
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"tool": tool, "key": key}) + "\n")
            log.flush()
            os.fsync(log.fileno())


def _call(params: dict[str, Any], stdio: bool) -> dict[str, Any]:
    tool = params.get("name", "")
    text = (params.get("arguments") or {}).get("text", "")
    _record(tool, params)
    if tool == "echo":
        debug = f"DEBUG echo called with text={text}\n"
        if stdio:
            sys.stdout.write(debug)
            sys.stdout.flush()
        sys.stderr.write(debug)
        sys.stderr.flush()
        return {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"echo": "ok"}}
    if tool == "typed":
        code = "a" * 30 + "!"
        return {"content": [{"type": "text", "text": code}], "structuredContent": {"code": code}}
    if tool == "shaped":
        return {"content": [{"type": "text", "text": "seven"}], "structuredContent": {"n": "seven"}}
    if tool == "garbled":
        if stdio:
            sys.stdout.write(json.dumps({"debug": f"garbled called with {text}"}) + "\n")
            sys.stdout.flush()
        return {"content": [{"type": "text", "text": "ok"}]}
    if tool == "unreadable":
        return {"content": "not a list of blocks"}
    if tool in ("huge", "bomb"):
        size = int(os.environ.get("MCP_TEST_HUGE_BYTES", "48000000"))
        return {"content": [{"type": "text", "text": "x" * size}]}
    return {"content": [{"type": "text", "text": "bye"}]}  # die_after


def answer(message: dict[str, Any], stdio: bool) -> dict[str, Any] | None:
    """The answer to one JSON-RPC message (None for a notification)."""
    if "id" not in message:
        return None
    method = message.get("method")
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "rawbookings", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": _tools()}
    elif method == "tools/call":
        result = _call(message.get("params") or {}, stdio)
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": "method not found"}
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def serve_stdio() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        reply = answer(message, stdio=True)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
            if (message.get("params") or {}).get("name") == "die_after":
                if os.environ.get("MCP_TEST_ORPHAN"):  # a child keeps the pipes open
                    subprocess.Popen(["sleep", "30"])
                os._exit(0)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        message = json.loads(body)
        reply = answer(message, stdio=False)
        if (message.get("params") or {}).get("name") == "garbled":
            text = message["params"]["arguments"]["text"]
            reply = {"debug": f"garbled called with {text}"}
        if reply is None:
            self.send_response(202)
            self.end_headers()
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        if (message.get("params") or {}).get("name") == "bomb":
            data = gzip.compress(data)
            self.send_header("content-encoding", "gzip")
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)

    def do_GET(self) -> None:
        self.send_response(405)
        self.end_headers()

    def do_DELETE(self) -> None:
        self.send_response(405)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
    else:
        serve_stdio()
