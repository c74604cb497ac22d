"""An MCP server's tools as an executor group's handlers, with their definitions pinned.

:class:`McpTools` takes the registry and one :class:`~processor.mcp.connection.McpConnection`,
and gives the :class:`~processor.executor.handlers.Handlers` of the executor client: for every
registry tool whose ``mcp.server`` is this server, a handler that sends one ``tools/call``. The
executor client around it is unchanged (fence, claim ledger, ``unknown`` after a crash between
claim and outcome, never a re-run).

Per call, once the connection holds a live session whose listing was checked:

1. the call's namespace must be the one its tool is pinned in (else ``wrong_namespace``: the
   executor client never hands over another namespace's tool, this is a second check), and
   its ``tool_version`` the pinned entry's ``version`` (else ``tool_version_mismatch``: a
   backlog validated against v1 never runs on v2's definition; both decided before any wait
   for the server); the tool's pin: a definition that differs from the registry's digest
   fails the call ``tool_changed``; a tool the server no longer lists fails it
   ``tool_unavailable`` (the request is not sent);
2. ``tools/call`` with the validated arguments and ``_meta`` = ``{META_IDEMPOTENCY_KEY:
   dispatch_id}`` (a server that dedupes side effects on it survives an ``unknown`` resolved
   by hand), bounded by ``call_timeout_seconds``;
3. the result, read by :func:`processor.mcp.results.result_output`: ``isError`` fails the
   call ``tool_error``; otherwise the output record is ``{"content": [...],
   "structuredContent": ...}``; an answer that is unreadable, over ``max_result_bytes`` or
   not matching the tool's pinned output schema is ``unknown`` (the server may have acted).

A call whose turn is stopped while it runs (``call.stop``: a cancel, quarantine, tool disable
or tenant stop committed meanwhile) is abandoned at once: the SDK tells the server with
``notifications/cancelled`` for the request it wrote, and the outcome is ``unknown``,
``cancelled_while_running`` (the server may have acted before it read the cancel), or
``failed`` with that reason when the request was not yet written. Calls are independent
requests on the one session, so the executor's ``--max-in-flight`` calls may be open on it at
once.

How the outcome is told (``results`` reason): ``mcp_timeout``, ``mcp_session_lost``,
``result_too_large``, ``malformed_result``, ``result_schema_mismatch`` (and ``mcp_error``, any
other JSON-RPC error once the request was sent) are ``unknown``: the server may have acted.
``mcp_unavailable`` (the request provably never left: no live session within the wait, or
the transport could not write it) and ``mcp_refused`` (the server answered that it did not
run it) are ``failed``.

Pinned definitions (:meth:`McpTools.check_listing`, run by the connection at each
(re)connection and on ``notifications/tools/list_changed``): every change of a tool's
:class:`~processor.core.mcp_pins.PinState` away from ``matches`` is one warning line, one
``toolcall_mcp_definition_changes_total`` increment and one ``on_change`` call (the command
writes an audit record). Nothing here logs argument values or server-sent text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from processor.core.errors import ConfigurationError
from processor.core.mcp_pins import PinState, ToolDefinition, compare, refuse_old_digests
from processor.core.registry import Registry, ToolDeclaration
from processor.executor.handlers import Call, ExecutionFailed, Handlers, OutcomeUnknown
from processor.executor.records import MAX_OUTPUT_BYTES
from processor.mcp.connection import AnswerLost, McpConnection, NotSent, ServerRefused
from processor.mcp.results import OutputCheck, output_check, result_output
from processor.mcp.transport import META_IDEMPOTENCY_KEY
from processor.observability import metrics
from processor.observability.logging import fields

__all__ = ["META_IDEMPOTENCY_KEY", "McpTools", "PinChange", "result_output"]

log = logging.getLogger(__name__)

TIMEOUT_MARGIN_SECONDS: Final = 5.0
"""The executor's own deadline on a handler is the wait for a session, the call timeout, and
this (a backstop: the call's own timeout ends it first, as ``mcp_timeout``)."""


@dataclass(frozen=True)
class PinChange:
    """A tool whose definition on the server stopped matching its pin (or was never pinned)."""

    server: str
    tool: str
    state: PinState
    pinned: str | None  # the registry's digest
    listed: str | None  # the server's digest


OnChange = Callable[[PinChange], Awaitable[None]]


class McpTools:
    """The pinned tools of one MCP server and their handlers (see the module docstring)."""

    def __init__(
        self,
        registry: Registry,
        connection: McpConnection,
        *,
        server_name: str | None = None,
        call_timeout_seconds: float = 60.0,
        session_wait_seconds: float = 10.0,
        max_result_bytes: int = MAX_OUTPUT_BYTES,
        on_change: OnChange | None = None,
    ) -> None:
        self.registry = registry
        self.connection = connection
        self._server_name = server_name
        self.call_timeout_seconds = call_timeout_seconds
        self.session_wait_seconds = session_wait_seconds
        self.max_result_bytes = min(max_result_bytes, MAX_OUTPUT_BYTES)
        self._on_change = on_change
        self.states: dict[str, PinState] = {}
        self.listed: dict[str, str] = {}  # the server's digests, by tool name
        # the pinned output schemas of the tools whose listing matches, by digest
        self.output_checks: dict[str, OutputCheck | None] = {}

    @property
    def server(self) -> str:
        """This server's name in the registry: as given, else the one it reports."""
        name = self._server_name or self.connection.server_name
        if not name:
            raise ConfigurationError("mcp_server_name", "the MCP server reported no name")
        return name

    def pinned(self) -> list[ToolDeclaration]:
        return [t for t in self.registry.tools if t.mcp is not None and t.mcp.server == self.server]

    async def check_listing(self, listing: list[ToolDefinition]) -> None:
        """Compare the server's listing with the pins; report each new departure once."""
        pins = {t.name: t.mcp.digest for t in self.pinned() if t.mcp is not None}
        listed: dict[str, ToolDefinition] = {}
        ambiguous: set[str] = set()
        for definition in listing:
            seen = listed.get(definition.name)
            if seen is not None and seen.digest != definition.digest:
                ambiguous.add(definition.name)  # listed twice, differently: trust neither
            listed[definition.name] = definition
        states = compare(pins, listed)
        for name in ambiguous:
            states[name] = PinState.CHANGED if name in pins else PinState.NEW
        previous, self.states = self.states, states
        self.listed = {name: d.digest for name, d in listed.items()}
        checks = {}
        for name, definition in listed.items():
            if states.get(name) is PinState.MATCHES:
                digest = definition.digest
                known = self.output_checks.get(digest)
                checks[digest] = (
                    known if known is not None else output_check(definition.output_schema)
                )
        self.output_checks = checks
        for name, state in sorted(states.items()):
            if state is PinState.MATCHES or previous.get(name) is state:
                continue
            change = PinChange(self.server, name, state, pins.get(name), self.listed.get(name))
            metrics.MCP_DEFINITION_CHANGES.labels(state.value).inc()
            log.warning(
                "MCP tool definition departs from the registry; its calls are refused until "
                "the registry is re-imported and reviewed",
                extra=fields(
                    server=change.server,
                    tool=name[:128],
                    state=state.value,
                    pinned=change.pinned,
                    listed=change.listed,
                ),
            )
            if self._on_change is not None:
                await self._on_change(change)

    def handlers(self) -> Handlers:
        """One handler per pinned tool of this server, registered in the tool's namespace
        (the server's name, as ``tools import-mcp`` writes it; or none). ConfigurationError
        when the registry pins no tool of this server, or pins one in another namespace."""
        handlers = Handlers()
        refuse_old_digests(self.server, {t.name: t.mcp for t in self.pinned() if t.mcp is not None})
        for tool in self.pinned():
            if tool.namespace is not None and tool.namespace != self.server:
                raise ConfigurationError(
                    "mcp_namespace",
                    f"tool {tool.name!r} is pinned to MCP server {self.server!r} but declared "
                    f"in namespace {tool.namespace!r} (the server's name, or none)",
                )
            if not handlers.handles(tool.name, tool.namespace):
                handlers.register(
                    tool.name,
                    self.handle,
                    timeout_seconds=self.session_wait_seconds
                    + self.call_timeout_seconds
                    + TIMEOUT_MARGIN_SECONDS,
                    namespace=tool.namespace,
                )
        if not len(handlers):
            raise ConfigurationError(
                "mcp_no_tools",
                f"the registry pins no tool of MCP server {self.server!r} "
                "(write one with `processor tools import-mcp`)",
            )
        return handlers

    def refusal(
        self, tool: str, namespace: str | None, version: str | None = None
    ) -> ExecutionFailed | None:
        """Why a call of ``tool`` in ``namespace``, validated against ``version``, must not be
        sent now, if it must not."""
        if (static := self.static_refusal(tool, namespace, version)) is not None:
            return static
        state = self.states.get(tool)
        if state is PinState.CHANGED:
            return ExecutionFailed(
                "tool_changed",
                detail="the server's definition of this tool differs from the reviewed one",
            )
        if state is not PinState.MATCHES:
            return ExecutionFailed("tool_unavailable", detail="the server does not list this tool")
        check = self._output_check(tool)
        if check is not None and check.unusable is not None:
            return ExecutionFailed("output_schema_unusable", detail=check.unusable)
        return None

    def _output_check(self, tool: str) -> OutputCheck | None:
        digest = self.listed.get(tool)
        return self.output_checks.get(digest) if digest is not None else None

    def static_refusal(
        self, tool: str, namespace: str | None, version: str | None = None
    ) -> ExecutionFailed | None:
        """What the registry alone refuses, whatever the server lists: another namespace's
        tool, or a call validated against another version than the pinned one."""
        declaration = next(
            (t for t in self.pinned() if t.name == tool and t.namespace == namespace), None
        )
        if declaration is None:
            return ExecutionFailed(
                "wrong_namespace", detail="this tool is not this MCP server's in that namespace"
            )
        if version is not None and version != declaration.version:
            return ExecutionFailed(
                "tool_version_mismatch",
                detail="the call was validated against another version of this tool than the "
                "pinned definition this executor calls",
            )
        return None

    async def handle(self, call: Call) -> Mapping[str, Any]:
        """The handler of every pinned tool: one ``tools/call``."""
        if (
            refused := self.static_refusal(call.tool, call.namespace, call.tool_version)
        ) is not None:
            raise refused  # decided before any wait for the server
        meta: dict[str, Any] = {META_IDEMPOTENCY_KEY: call.dispatch_id}
        check: list[OutputCheck | None] = []

        def before_send() -> ExecutionFailed | None:
            refused = self.refusal(call.tool, call.namespace, call.tool_version)
            check.append(self._output_check(call.tool))  # the schema pinned when it was sent
            return refused

        request = asyncio.ensure_future(
            self.connection.call_tool(
                call.tool,
                call.arguments,
                meta,
                wait_seconds=self.session_wait_seconds,
                read_timeout_seconds=self.call_timeout_seconds,
                before_send=before_send,
            )
        )
        stopped = asyncio.ensure_future(call.stop.wait())
        try:
            await asyncio.wait({request, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not request.done():  # stopped, or this handler cancelled: abandon the request
                request.cancel()  # the SDK tells the server: notifications/cancelled
                with contextlib.suppress(BaseException):
                    await request
        if request.cancelled():
            if check:  # written to the server: it may have acted before it read the cancel
                raise OutcomeUnknown(
                    "cancelled_while_running",
                    detail="the turn was stopped while the MCP server ran the call; "
                    "notifications/cancelled was sent",
                )
            raise ExecutionFailed("cancelled_while_running", detail="stopped before it was sent")
        try:
            result = request.result()
        except NotSent:
            raise ExecutionFailed(
                "mcp_unavailable", retry_possible=True, detail="no session with the MCP server"
            ) from None
        except ServerRefused as exc:
            raise ExecutionFailed(
                "mcp_refused", detail=f"the MCP server refused the call (JSON-RPC {exc.code})"
            ) from None
        except AnswerLost as exc:
            raise OutcomeUnknown(exc.why) from None
        try:
            return result_output(result, self.max_result_bytes, check[-1] if check else None)
        except (ExecutionFailed, OutcomeUnknown):
            raise
        except Exception:  # the server answered: whatever breaks reading it, it may have acted
            raise OutcomeUnknown(
                "malformed_result", detail="the MCP server's answer could not be read"
            ) from None
