"""One session with one MCP server, kept open by a task of its own, and reopened when lost.

A :class:`ServerSpec` says how to reach the server: ``command`` (a command line started as a
subprocess, spoken to over stdio) or ``url`` (Streamable HTTP, with ``headers`` such as an
``Authorization`` whose values come from the environment, never from flags or files).

:class:`McpConnection` owns the SDK's transport and ``ClientSession`` in one task (their anyio
scopes must be entered and left by the same task) and publishes a live session through
:meth:`call_tool` and :meth:`list_tools`. After each (re)connection, and on every
``notifications/tools/list_changed``, it runs ``on_listing`` (the pinned-definition check)
before calls may go through again: :meth:`call_tool` waits for a session whose listing was
checked. How a call ends, in this module's terms:

- a result (a ``CallToolResult`` object as the server sent it) — the server answered;
- :class:`ServerRefused` — a JSON-RPC error saying the server did not run the call (invalid
  params, unknown method or tool, an invalid request);
- :class:`NotSent` — the request provably never left: no live session within the wait (a
  session whose server is gone is not live, even before the SDK notices), or the transport
  could not write it (the stdio pipe refused it, the HTTP connection could not be made);
- what ``before_send`` raises, checked once the session is live (the pinned definitions);
- :class:`AnswerLost` — anything else once the request may have been written, the server
  may have acted: the session closed mid-call (``mcp_session_lost``), a timeout
  (``mcp_timeout``), an answer over the transport's bound (``result_too_large``) or one that
  does not read as JSON (``malformed_result``), another JSON-RPC error.

The transports are :mod:`processor.mcp.transport`'s (bounded while reading, the server's
stderr and stray stdout never logged). The SDK's ``ClientSession.call_tool`` is not used: it
validates a result against the server's ``outputSchema`` with jsonschema, whose ``pattern``
is Python's backtracking ``re``, on the event loop (``^(a+)+$`` on 27 bytes blocked it for
seconds). Requests go through ``send_request``; the listing is read as the server sent it (the
whole tool objects, for the definition digest) and a result is returned as the server sent
it, for :mod:`processor.mcp.results` to judge against the pinned output schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self, cast
from urllib.parse import urlsplit

from processor.core.errors import McpError, ProcessorError
from processor.core.mcp_pins import ToolDefinition
from processor.mcp.transport import (
    MAX_MESSAGE_BYTES,
    META_IDEMPOTENCY_KEY,
    TransportState,
    http_streams,
    quiet_sdk_loggers,
    shown,
    stdio_streams,
)
from processor.observability.logging import fields

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import RequestParamsMeta

__all__ = [
    "AnswerLost",
    "McpConnection",
    "NotSent",
    "ServerRefused",
    "ServerSpec",
]

log = logging.getLogger(__name__)

MAX_LIST_PAGES: Final = 100
"""A ``tools/list`` that pages on longer than this is refused (a paginator that never ends)."""
# JSON-RPC codes saying the server did not run the request
_REFUSING_CODES: Final = frozenset({-32700, -32600, -32601, -32602})
_BACKOFF_SECONDS: Final = (0.2, 0.5, 1.0, 2.0, 5.0)
_DEAD_POLL_SECONDS: Final = 0.02
# what the SDK's HTTP transport answers for a body it could not read
_UNREADABLE_ANSWER: Final = "Failed to parse JSON response"


class NotSent(McpError):
    """No live session: the request was never written."""


class ServerRefused(McpError):
    """The server answered with a JSON-RPC error that means it did not run the call."""

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(code)


class AnswerLost(McpError):
    """The request may have reached the server, and its answer is lost or unreadable."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


@dataclass(frozen=True)
class ServerSpec:
    """How to reach one MCP server: a stdio ``command`` line, or a Streamable HTTP ``url``."""

    command: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    env: Mapping[str, str] | None = field(default=None, repr=False)
    cwd: str | None = None

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("give one of a server command and a server URL")
        if self.command is not None and not shlex.split(self.command):
            raise ValueError("the server command is empty")
        if self.url is not None and urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError("the server URL must be http:// or https://")

    def describe(self) -> str:
        """For logs: the program's name, or the URL without credentials, query or fragment."""
        if self.command is not None:
            return f"stdio:{shlex.split(self.command)[0]}"
        parts = urlsplit(self.url or "")
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    @contextlib.asynccontextmanager
    async def open(self, state: TransportState) -> AsyncIterator[tuple[Any, Any]]:
        """The session's (read, write) streams (:mod:`processor.mcp.transport`)."""
        if self.command is not None:
            argv = shlex.split(self.command)
            async with stdio_streams(argv, env=self.env, cwd=self.cwd, state=state) as streams:
                yield streams
            return
        async with http_streams(self.url or "", self.headers, state=state) as streams:
            yield streams


class _WatchedStream:
    """The session's read stream, telling when it ends (the server went away)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.closed = asyncio.Event()

    def __getattr__(self, name: str) -> Any:  # last_context and the like
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except BaseException:
            self.closed.set()
            raise

    async def aclose(self) -> None:
        self.closed.set()
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except BaseException:
            self.closed.set()
            raise

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self.closed.set()
        result: bool | None = await self._inner.__aexit__(exc_type, exc, tb)
        return result


OnListing = Callable[[list[ToolDefinition]], Awaitable[None]]


class McpConnection:
    """A session with one server; see the module docstring.

    ``on_listing`` receives the server's listing after each (re)connection and after each
    ``notifications/tools/list_changed``; calls wait until it has returned.
    ``connect_timeout_seconds`` bounds the initialize handshake and each listing.
    """

    def __init__(
        self,
        spec: ServerSpec,
        *,
        on_listing: OnListing | None = None,
        connect_timeout_seconds: float = 30.0,
        client_name: str = "toolcall-processor",
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.spec = spec
        self.server_name: str | None = None
        self._on_listing = on_listing
        self._connect_timeout = connect_timeout_seconds
        self._client_name = client_name
        self._session: ClientSession | None = None
        self._session_state: TransportState | None = None
        self._max_message_bytes = max_message_bytes
        self._ready = asyncio.Event()  # a live session whose listing was checked
        self._relist = asyncio.Event()
        self._stopping = asyncio.Event()
        self._first: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.sessions = 0  # how many sessions were opened (tests, diagnostics)
        self._unreadable = 0  # messages the SDK could not read (never kept)
        self._opening: TransportState | None = None
        quiet_sdk_loggers()

    async def start(self) -> None:
        """Open the first session (initialize and check the listing), or raise why not."""
        self._first = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(), name="mcp-session")
        await asyncio.shield(self._first)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 10)
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def live(self) -> bool:
        return self._ready.is_set()

    # ---------------------------------------------------------------- the owning task

    async def _own(self) -> None:
        attempt = 0
        while not self._stopping.is_set():
            try:
                await self._session_once()
                attempt = 0
            except Exception as exc:
                if self._first is not None and not self._first.done():
                    self._first.set_exception(self._unreachable(exc))
                    return
                log.warning(
                    "MCP session failed; reconnecting",
                    extra=fields(server=self.spec.describe(), error=type(exc).__name__),
                )
            if self._stopping.is_set():
                return
            delay = _BACKOFF_SECONDS[min(attempt, len(_BACKOFF_SECONDS) - 1)]
            attempt += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stopping.wait()

    async def _session_once(self) -> None:
        from mcp import ClientSession  # noqa: PLC0415

        state = TransportState(max_message_bytes=self._max_message_bytes)
        self._opening = state  # what a first session that fails wrote (see _unreachable)
        async with self.spec.open(state) as (read, write):
            watched = _WatchedStream(read)
            async with ClientSession(
                watched, write, message_handler=self._on_message, client_info=self._client_info()
            ) as session:
                async with asyncio.timeout(self._connect_timeout):
                    init = await session.initialize()
                self.server_name = init.server_info.name
                self._session = session
                self._session_state = state
                self.sessions += 1
                try:
                    await self._check_listing(session)
                    if self._first is not None and not self._first.done():
                        self._first.set_result(None)
                    log.info(
                        "MCP session open",
                        extra=fields(server=self.spec.describe(), name=shown(self.server_name)),
                    )
                    await self._serve(session, watched)
                finally:
                    self._ready.clear()
                    self._session = None
                    self._session_state = None

    async def _serve(self, session: ClientSession, watched: _WatchedStream) -> None:
        """Until stopped or the server goes away; re-check the listing when it changes."""
        while not self._stopping.is_set():
            waits = {
                asyncio.ensure_future(self._stopping.wait()),
                asyncio.ensure_future(watched.closed.wait()),
                asyncio.ensure_future(self._relist.wait()),
            }
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
            if watched.closed.is_set():
                log.warning(
                    "MCP session closed by the server", extra=fields(server=self.spec.describe())
                )
                return
            if self._relist.is_set():
                await self._check_listing(session)

    async def _check_listing(self, session: ClientSession) -> None:
        self._ready.clear()
        self._relist.clear()
        async with asyncio.timeout(self._connect_timeout):
            listing = await _list_all(session)
        if self._on_listing is not None:
            await self._on_listing(listing)
        self._ready.set()

    async def _on_message(self, message: Any) -> None:
        from mcp.types import ToolListChangedNotification  # noqa: PLC0415

        if isinstance(message, Exception):  # the transport could not read what the server wrote
            self._unreadable += 1
        elif isinstance(message, ToolListChangedNotification):
            self._ready.clear()  # no call goes through until the new listing is checked
            self._relist.set()

    def _unreachable(self, exc: BaseException) -> ProcessorError:
        """One line for a first session that could not be opened (the innermost cause); a
        program that wrote something other than JSON-RPC before any session is not an MCP
        server (what it wrote is not quoted: it is not ours to show)."""
        junk = self._unreadable + (self._opening.junk_lines if self._opening else 0)
        if junk and self.server_name is None:
            return ProcessorError(
                "mcp_not_a_server",
                f"{self.spec.describe()} is not an MCP server: it wrote {junk} "
                "line(s) that are not MCP messages instead of answering initialize "
                "(--server-command / --server-url)",
            )
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        if isinstance(exc, TimeoutError) and self.server_name is None:
            return ProcessorError(
                "mcp_unreachable",
                f"the MCP server {self.spec.describe()} did not answer initialize within "
                f"{self._connect_timeout:g} s (--connect-timeout)",
            )
        why = f"{type(exc).__name__}: {shown(str(exc))}" if str(exc) else type(exc).__name__
        return ProcessorError(
            "mcp_unreachable", f"no session with the MCP server {self.spec.describe()} ({why})"
        )

    def _client_info(self) -> Any:
        from mcp.types import Implementation  # noqa: PLC0415

        return Implementation(name=self._client_name, version="1")

    # ---------------------------------------------------------------- requests

    async def list_tools(self, *, wait_seconds: float = 30.0) -> list[ToolDefinition]:
        session, _state = await self._live_session(wait_seconds)
        async with asyncio.timeout(self._connect_timeout):
            return await _list_all(session)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        meta: Mapping[str, Any],
        *,
        wait_seconds: float,
        read_timeout_seconds: float | None = None,
        before_send: Callable[[], Exception | None] | None = None,
    ) -> dict[str, Any]:
        """One ``tools/call``: the result object as the server sent it (JSON), for
        :mod:`processor.mcp.results` to read; see the module docstring for how it can end.
        ``meta`` carries the call's idempotency key, which is how the transport tells that
        this request never left."""
        from mcp import MCPError  # noqa: PLC0415
        from mcp.types import CallToolRequest, CallToolRequestParams  # noqa: PLC0415

        session, state = await self._live_session(wait_seconds)
        if before_send is not None and (refusal := before_send()) is not None:
            raise refusal
        key = meta.get(META_IDEMPOTENCY_KEY)
        request = CallToolRequest(
            params=CallToolRequestParams(
                name=name, arguments=dict(arguments), _meta=cast("RequestParamsMeta", dict(meta))
            )
        )
        try:
            result: dict[str, Any] = await session.send_request(
                request, _raw_result(), request_read_timeout_seconds=read_timeout_seconds
            )
            return result
        except MCPError as exc:
            if state.never_left(key):
                raise NotSent("the request could not be written to the MCP server") from None
            over = key is not None and key in state.oversized_keys  # HTTP: this answer
            if over or (state.process is not None and state.oversized):  # stdio: the session
                raise AnswerLost("result_too_large") from None
            if exc.code == -32700 and exc.message.startswith(_UNREADABLE_ANSWER):
                raise AnswerLost("malformed_result") from None  # ours, not the server's -32700
            if exc.code in _REFUSING_CODES:
                raise ServerRefused(exc.code) from None
            why = {-32000: "mcp_session_lost", -32001: "mcp_timeout"}.get(exc.code, "mcp_error")
            raise AnswerLost(why) from None
        except (RuntimeError, ValueError):  # pydantic's ValidationError is a ValueError
            raise AnswerLost("malformed_result") from None
        except (OSError, EOFError):
            if state.never_left(key):
                raise NotSent("the request could not be written to the MCP server") from None
            raise AnswerLost("mcp_session_lost") from None
        finally:
            state.forget(key)

    async def _live_session(self, wait_seconds: float) -> tuple[ClientSession, TransportState]:
        """A live session whose listing was checked and whose server is not known to be gone
        (a crashed stdio server's session is not used while the SDK has yet to notice)."""
        try:
            async with asyncio.timeout(wait_seconds):
                while True:
                    await self._ready.wait()
                    session, state = self._session, self._session_state
                    if session is not None and state is not None and not state.dead:
                        return session, state
                    await asyncio.sleep(_DEAD_POLL_SECONDS)
        except TimeoutError:
            raise NotSent("no live session with the MCP server") from None


@functools.cache
def _raw_result() -> Any:
    """A result as the server sent it (a JSON object), unparsed by the SDK."""
    from pydantic import TypeAdapter  # noqa: PLC0415

    return TypeAdapter(dict[str, Any])


async def _list_all(session: ClientSession) -> list[ToolDefinition]:
    """Every page of ``tools/list``, each tool as the server sent it (the digest covers the
    whole object); a page the SDK cannot read as a ``ListToolsResult`` is refused."""
    from mcp.types import ListToolsRequest, ListToolsResult, PaginatedRequestParams  # noqa: PLC0415

    definitions: list[ToolDefinition] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        raw = await session.send_request(ListToolsRequest(params=params), _raw_result())
        page = ListToolsResult.model_validate(raw, by_name=False)
        documents = raw.get("tools")
        if not isinstance(documents, list) or len(documents) != len(page.tools):
            raise AnswerLost("tools_list_unreadable")
        definitions.extend(ToolDefinition.from_wire(document) for document in documents)
        cursor = page.next_cursor
        if cursor is None:
            return definitions
    raise AnswerLost("tools_list_unbounded")
