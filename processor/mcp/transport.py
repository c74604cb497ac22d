"""The byte-level transports to an MCP server: bounded while reading, quiet, and telling what
provably never left.

The SDK's own transports read a whole stdout line or HTTP body before any bound applies (one
48 MB answer raised the executor's peak memory by 241 MB), log a stdout line that is not
JSON-RPC verbatim (a server's debug line quoting its arguments became an executor log line),
let the server's stderr into the executor's own, and cannot tell a request that was written
from one that was not. This module owns the replacements:

- :func:`stdio_streams` runs a stdio server (its own session and process group, only a safe
  environment; its exit ends the session, even when a child of it keeps the pipes). Stdout
  is read in chunks and a message is at most ``max_message_bytes``: a longer line ends the
  session (its bytes are dropped as they arrive, never held; :attr:`TransportState.oversized`
  is set). A line that is not JSON-RPC is dropped and counted, never logged; stderr is read
  and counted, never logged; a request the writer could not write (the server is gone) is
  recorded in :attr:`TransportState.unsent`;
- :func:`http_streams` is the SDK's Streamable HTTP transport over an HTTP client whose
  response bodies are counted while read (a JSON body, or one server-sent event, over
  ``max_message_bytes`` ends that response; a compressed body is refused, asked for as
  ``identity``, since its size is known only once decoded), and whose requests that could
  not connect are recorded as unsent.

A request is recognised by the idempotency key in its ``_meta``
(:data:`META_IDEMPOTENCY_KEY`, the dispatch id); :class:`TransportState` is per session.
Logs carry counts and lengths only, never what the server wrote. The SDK's own loggers quote
what passes through them (a message that did not parse, with its text; every message sent,
arguments included, at DEBUG; server-chosen event names), so :func:`quiet_sdk_loggers` keeps
them, and the HTTP client's request lines, out of the process's logs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from processor.core.errors import McpError
from processor.observability.logging import fields

__all__ = [
    "MAX_MESSAGE_BYTES",
    "META_IDEMPOTENCY_KEY",
    "TransportState",
    "http_streams",
    "quiet_sdk_loggers",
    "shown",
    "stdio_streams",
]

log = logging.getLogger(__name__)

META_IDEMPOTENCY_KEY: Final = "toolcall-processor/idempotency-key"
"""The ``_meta`` key of a ``tools/call`` that carries the dispatch id."""
MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024
"""The largest message read from a server (a ``tools/list`` page, a result before its own
bound): 4 MiB. Larger ones are dropped while they arrive."""
_SAFE_ENVIRONMENT: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
_STOP_GRACE_SECONDS: Final = 2.0
_EXIT_POLL_SECONDS: Final = 0.05


_SDK_LOGGERS: Final = ("mcp", "httpx2", "httpcore")


def quiet_sdk_loggers() -> None:
    """Silence the SDK's and its HTTP client's loggers (see the module docstring)."""
    for name in _SDK_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


class MessageTooLarge(McpError):
    """A message from the server went over ``max_message_bytes`` while being read."""


@dataclass
class TransportState:
    """What one session's transport saw (counts only, never content)."""

    max_message_bytes: int = MAX_MESSAGE_BYTES
    closed: bool = False  # stdio: the server's stdout ended or the process exited
    oversized: int = 0  # messages over the bound (stdio: the session ended at the first)
    oversized_keys: set[str] = field(default_factory=set)  # HTTP: whose answer was too large
    handed: set[str] = field(default_factory=set)  # requests the session gave the transport
    unsent: set[str] = field(default_factory=set)  # requests that provably never left
    junk_lines: int = 0  # stdout lines that are not JSON-RPC
    stderr_bytes: int = 0
    stderr_lines: int = 0
    process: Any = None  # stdio: the server process

    def never_left(self, key: str | None) -> bool:
        """Whether the request keyed ``key`` provably never left: the session never handed it
        to the transport, or the transport could not write it."""
        return key is not None and (key not in self.handed or key in self.unsent)

    def forget(self, key: str | None) -> None:
        """Drop what was recorded of a finished request (the sets stay small)."""
        if key is not None:
            for keys in (self.handed, self.unsent, self.oversized_keys):
                keys.discard(key)

    @property
    def dead(self) -> bool:
        """Nothing written now can reach the server (stdio only; HTTP cannot tell)."""
        if self.closed:
            return True
        return self.process is not None and self.process.returncode is not None


def shown(text: str | None, limit: int = 200) -> str:
    """Server-chosen text (its name, an error it sent) as a log or an error line may show it:
    at most ``limit`` characters, every character that is not printable ASCII escaped."""
    return "".join(
        c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii")
        for c in (text or "")[:limit]
    )


def request_key(message: Any) -> str | None:
    """The idempotency key in a JSON-RPC request's ``params._meta`` (an SDK message or JSON)."""
    if isinstance(message, Mapping):
        params = message.get("params")
    else:
        params = getattr(message, "params", None)
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    key = meta.get(META_IDEMPOTENCY_KEY) if isinstance(meta, Mapping) else None
    return key if isinstance(key, str) else None


class _HandedStream:
    """The session's write stream, recording each request handed to the transport (before it
    is: a send that raises may still have delivered it). A request the session failed
    without handing it over (its connection had closed) provably never left."""

    def __init__(self, inner: Any, state: TransportState) -> None:
        self._inner = inner
        self._state = state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def send(self, item: Any) -> None:
        key = request_key(getattr(item, "message", None))
        if key is not None:
            self._state.handed.add(key)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _HandedStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


# ------------------------------------------------------------------------------------- stdio


class _LineReader:
    """Newline-delimited messages out of byte chunks, each at most ``limit`` bytes; a longer
    one raises :class:`MessageTooLarge` as soon as it passes the bound (nothing more of it is
    kept)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished message held now."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if len(self._buffer) + len(piece) > self._limit:
                self._buffer.clear()
                raise MessageTooLarge
            self._buffer += piece
            if end < 0:
                return lines
            lines.append(bytes(self._buffer).rstrip(b"\r"))
            self._buffer.clear()
            start = end + 1


@contextlib.asynccontextmanager
async def stdio_streams(
    argv: list[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
    state: TransportState,
) -> AsyncIterator[tuple[Any, Any]]:
    """The session's (read, write) streams to a stdio server (see the module docstring)."""
    import anyio  # noqa: PLC0415
    from mcp.shared.message import SessionMessage  # noqa: PLC0415
    from mcp.types import jsonrpc_message_adapter  # noqa: PLC0415

    environment = {  # as the SDK's: a few safe variables, never an exported shell function
        k: v for k in _SAFE_ENVIRONMENT if (v := os.environ.get(k)) and not v.startswith("()")
    }
    environment.update(env or {})
    process = await anyio.open_process(argv, env=environment, cwd=cwd, start_new_session=True)
    state.process = process
    read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_reader = anyio.create_memory_object_stream[Any](0)

    async def stdout_reader() -> None:
        assert process.stdout is not None
        lines = _LineReader(state.max_message_bytes)
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    for line in lines.feed(chunk):
                        if not line.strip():
                            continue
                        try:
                            message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                        except ValueError:
                            state.junk_lines += 1
                            _junk_line(state, len(line))
                            continue
                        await read_writer.send(SessionMessage(message))
        except MessageTooLarge:
            state.oversized += 1
            log.warning(
                "MCP server sent a message over the size bound; the session is closed",
                extra=fields(limit=state.max_message_bytes),
            )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            state.closed = True

    async def stderr_reader() -> None:
        assert process.stderr is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stderr:  # counted, never logged: it may quote arguments
                state.stderr_bytes += len(chunk)
                state.stderr_lines += chunk.count(b"\n")

    async def exit_watcher() -> None:
        # the server's exit ends the session even when a child of it holds the pipes open (no
        # end of stdout then); polled: asyncio's wait() also waits for the pipes' end
        while process.returncode is None:
            await anyio.sleep(_EXIT_POLL_SECONDS)
        state.closed = True
        await read_writer.aclose()

    async def stdin_writer() -> None:
        assert process.stdin is not None
        async with write_reader:
            async for session_message in write_reader:
                message = session_message.message
                if state.dead:
                    _unsent(state, message)
                    continue
                data = message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
                try:
                    await process.stdin.send(data)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    # the pipe refused the bytes: the server is gone and never read them
                    state.closed = True
                    _unsent(state, message)
                    await read_writer.aclose()

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(stdout_reader)
            tasks.start_soon(stderr_reader)
            tasks.start_soon(stdin_writer)
            tasks.start_soon(exit_watcher)
            try:
                yield read_stream, _HandedStream(write_stream, state)
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(process)
                tasks.cancel_scope.cancel()
    finally:
        state.closed = True
        if state.stderr_bytes or state.junk_lines:
            log.info(
                "MCP server output not read as messages (counted, not logged)",
                extra=fields(
                    stderr_lines=state.stderr_lines,
                    stderr_bytes=state.stderr_bytes,
                    stdout_junk_lines=state.junk_lines,
                ),
            )


def _junk_line(state: TransportState, length: int) -> None:
    if state.junk_lines & (state.junk_lines - 1) == 0:  # the 1st, 2nd, 4th, 8th, …
        log.warning(
            "MCP server wrote a stdout line that is not JSON-RPC; dropped (not logged)",
            extra=fields(bytes=length, lines=state.junk_lines),
        )


def _unsent(state: TransportState, message: Any) -> None:
    key = request_key(message)
    if key is not None:
        state.unsent.add(key)


async def _stop(process: Any) -> None:
    """Close stdin, give the server a grace period, then end its process group (a child it
    left holding the pipes too), and release the pipes."""
    import anyio  # noqa: PLC0415

    with contextlib.suppress(Exception):
        await process.stdin.aclose()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with anyio.move_on_after(_STOP_GRACE_SECONDS):
            while process.returncode is None:  # not wait(): it also waits for the pipes' end
                await anyio.sleep(_EXIT_POLL_SECONDS)
        if process.returncode is not None:
            break
        with contextlib.suppress(OSError):
            os.killpg(process.pid, sig)  # its own session: the server and its children
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)  # what it left behind in its group
    for stream in (process.stdout, process.stderr):
        with contextlib.suppress(Exception):
            await stream.aclose()
    # the asyncio transport, else closed by the garbage collector, maybe after the loop
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    if transport is not None:
        with contextlib.suppress(Exception):
            transport.close()


# ------------------------------------------------------------------------------------- HTTP


def _bounded_transport(state: TransportState) -> Any:
    """The default HTTP transport, with response bodies counted while read (over the bound:
    the whole body, or one server-sent event, it raises and records the request's key as
    oversized) and requests that could not connect recorded as unsent."""
    import httpx2  # noqa: PLC0415

    class BoundedBody(httpx2.AsyncByteStream):
        def __init__(self, inner: Any, key: str | None, events: bool, encoded: bool) -> None:
            self._inner = inner
            self._key = key
            self._events = events
            self._encoded = encoded

        async def __aiter__(self) -> AsyncIterator[bytes]:
            if self._encoded:  # its size unknown until decoded (a gzip bomb): refused
                log.warning("MCP server sent a compressed answer; refused")
                raise httpx2.StreamError("compressed answer refused")
            limit = state.max_message_bytes
            size = 0
            tail = b""
            async for chunk in self._inner:
                if self._events:  # the bytes since the last blank line (an event's end)
                    window = tail + chunk
                    cut = max(window.rfind(b"\n\n"), window.rfind(b"\r\n\r\n"))
                    size = len(window) - cut if cut >= 0 else size + len(chunk)
                    tail = window[-3:]
                else:
                    size += len(chunk)
                if size > limit:
                    state.oversized += 1
                    if self._key is not None:
                        state.oversized_keys.add(self._key)
                    log.warning(
                        "MCP server sent a message over the size bound; dropped",
                        extra=fields(limit=limit),
                    )
                    raise httpx2.StreamError(f"message over {limit} bytes")
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    class BoundedTransport(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            request.headers["Accept-Encoding"] = "identity"
            key = None
            if request.method == "POST":
                with contextlib.suppress(Exception):  # best effort: our own JSON body
                    key = request_key(orjson.loads(request.content))
            try:
                response = await self._inner.handle_async_request(request)
            except (httpx2.ConnectError, httpx2.ConnectTimeout):
                if key is not None:
                    state.unsent.add(key)  # no connection: the request never left
                raise
            events = response.headers.get("content-type", "").startswith("text/event-stream")
            encoded = response.headers.get("content-encoding", "identity").lower() != "identity"
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=BoundedBody(response.stream, key, events, encoded),
                request=request,
                extensions=response.extensions,
            )

        async def aclose(self) -> None:
            await self._inner.aclose()

    return BoundedTransport()


@contextlib.asynccontextmanager
async def http_streams(
    url: str, headers: Mapping[str, str], *, state: TransportState
) -> AsyncIterator[tuple[Any, Any]]:
    """The session's (read, write) streams to a Streamable HTTP server."""
    import httpx2  # noqa: PLC0415
    from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415
    from mcp.shared._httpx_utils import (  # noqa: PLC0415
        MCP_DEFAULT_SSE_READ_TIMEOUT,
        MCP_DEFAULT_TIMEOUT,
    )

    client = httpx2.AsyncClient(
        headers=dict(headers),
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=_bounded_transport(state),
    )
    async with (
        client,
        streamable_http_client(
            url, http_client=client, max_sse_event_size=state.max_message_bytes
        ) as (read, write),
    ):
        yield read, _HandedStream(write, state)
