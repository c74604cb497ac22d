"""One small HTTP endpoint per process: ``/metrics``, ``/healthz`` (liveness), ``/readyz``.

It runs on the process's asyncio loop (``asyncio.start_server``), so a blocked loop also stops
answering liveness, which is what a liveness probe should notice. The probes are callables given
by the owner (the worker): ``live()`` and ``ready()`` return ``(ok, detail)``; ``ok`` decides
between 200 and 503 and ``detail`` (a small JSON-able dict) is the body.

Only GET and HEAD are served; requests are read up to the end of their headers (bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Final

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from processor.observability.logging import fields

log = logging.getLogger(__name__)

Probe = Callable[[], tuple[bool, dict[str, Any]]]

_MAX_HEADER_BYTES: Final = 8192
_READ_TIMEOUT_S: Final = 5.0


class HealthServer:
    """Serves metrics and probes on ``host:port`` until :meth:`stop`."""

    def __init__(self, host: str, port: int, *, live: Probe, ready: Probe) -> None:
        self.host = host
        self.port = port
        self._live = live
        self._ready = ready
        self._server: asyncio.Server | None = None

    @property
    def bound_port(self) -> int:
        """The actual port (useful with port 0)."""
        assert self._server is not None and self._server.sockets
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        log.info("health endpoint listening", extra=fields(host=self.host, port=self.bound_port))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        method = "GET"
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            if len(head) > _MAX_HEADER_BYTES:
                raise ValueError("headers too large")
            method, target = _request_line(head)
            status, ctype, body = self._route(method, target)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            status, ctype, body = 400, "text/plain", b"bad request\n"
        try:
            writer.write(
                f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _route(self, method: str, target: str) -> tuple[int, str, bytes]:
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
        if path in ("/healthz", "/livez"):
            return _probe(self._live)
        if path == "/readyz":
            return _probe(self._ready)
        return 404, "text/plain", b"not found\n"


_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


def _request_line(head: bytes) -> tuple[str, str]:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3:
        raise ValueError("bad request line")
    return parts[0], parts[1]


def _probe(probe: Probe) -> tuple[int, str, bytes]:
    try:
        ok, detail = probe()
    except Exception as exc:  # a probe must never take the endpoint down
        ok, detail = False, {"error": type(exc).__name__}
    return (200 if ok else 503), "application/json", orjson.dumps(detail, default=str) + b"\n"
