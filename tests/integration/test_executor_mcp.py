"""MCP servers as executors, on the real broker, against real MCP servers (the SDK's own server
API, :mod:`tests.integration.mcp_server`) over stdio and over Streamable HTTP on loopback.

The executor client is the unchanged one, with the MCP handlers of :mod:`processor.mcp.tools`;
the server appends every call that reaches it (tool and ``_meta`` idempotency key) to a log
file, which is how these tests know what the server saw.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from processor.core.events import Audit, Dispatch
from processor.core.registry import Registry
from processor.mcp.connection import McpConnection, ServerSpec
from processor.mcp.tools import META_IDEMPOTENCY_KEY, McpTools
from processor.registry_file import load_registry
from processor.settings import Settings
from tests.integration.conftest import (
    REPO_ROOT,
    Runtime,
    free_port,
    turn_cancelled,
    turn_started,
    wait_until,
)
from tests.integration.executor_harness import (
    Executor,
    group_of,
    running,
    wait_results,
    write_dispatch,
)
from tests.integration.executor_harness import make_dispatch as _make_dispatch

pytestmark = pytest.mark.integration

SERVER = [sys.executable, "-m", "tests.integration.mcp_server"]


# the version of each imported tool, by (namespace, name), as the last import wrote it
PINNED_VERSIONS: dict[tuple[str | None, str], str] = {}


def make_dispatch(
    *args: Any, namespace: str | None = "bookings", version: str | None = None, **kwargs: Any
) -> Dispatch:
    """A dispatch of the test server's tool (in its namespace, as import-mcp declares it),
    validated against the imported version unless told another."""
    dispatch = _make_dispatch(*args, **kwargs)
    pinned = PINNED_VERSIONS.get((namespace, dispatch.tool), dispatch.tool_version)
    return dispatch.model_copy(update={"namespace": namespace, "tool_version": version or pinned})


class Server:
    """Where the test server runs and what it saw."""

    def __init__(self, tmp: Path, transport: str, **env: str) -> None:
        self.log = tmp / f"calls-{transport}.jsonl"
        self.env = {"MCP_TEST_LOG": str(self.log), "PYTHONPATH": str(REPO_ROOT), **env}
        self.transport = transport
        self.process: subprocess.Popen[bytes] | None = None
        self.url: str | None = None

    def spec(self) -> ServerSpec:
        if self.transport == "stdio":
            command = " ".join([*SERVER, "stdio"])
            return ServerSpec(command=command, env=self.env, cwd=str(REPO_ROOT))
        assert self.url is not None
        return ServerSpec(url=self.url)

    def seen(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [orjson.loads(line) for line in self.log.read_text().splitlines() if line]

    def keys(self, tool: str) -> list[str]:
        return [s["key"] for s in self.seen() if s["tool"] == tool]

    @contextlib.contextmanager
    def serving(self) -> Iterator[Server]:
        """Start an HTTP server (loopback only) for the test; stdio servers are started by the
        connection itself."""
        if self.transport == "stdio":
            yield self
            return
        port = free_port()
        self.process = subprocess.Popen(
            [*SERVER, "http", str(port)],
            cwd=REPO_ROOT,
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{port}/mcp"
        try:
            yield self
        finally:
            self.process.kill()
            self.process.wait(10)


async def pinned_registry(server: Server, tmp: Path) -> Registry:
    """The registry as `processor tools import-mcp` writes it (the real command)."""
    path = tmp / "mcp-tools.yaml"
    spec = server.spec()
    where = (
        ["--server-command", spec.command, "--server-env", "MCP_TEST_LOG"]
        if spec.command
        else ["--server-url", spec.url or ""]
    )
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", "tools", "import-mcp", *where, "-o", str(path)],
        cwd=REPO_ROOT,
        env={**os.environ, **server.env, "MCP_TEST_VARIANT": ""},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"6 tool(s) of server 'bookings' imported, 0 refused" in done.stderr
    doc = yaml.safe_load(path.read_text())
    book = next(t for t in doc["tools"] if t["name"] == "book_slot")
    assert book["mcp"]["server"] == "bookings" and book["mcp"]["digest"].startswith("sha256:")
    assert book["namespace"] == "bookings"
    assert book["requires_confirmation"] is False  # destructiveHint false
    assert book["parameters"]["required"] == ["slot"]
    registry = load_registry(path)
    PINNED_VERSIONS.update({(t.namespace, t.name): t.version for t in registry.tools})
    return registry


@contextlib.asynccontextmanager
async def mcp_executor(
    rt: Runtime,
    server: Server,
    registry: Registry,
    settings: Settings | None = None,
    **options: Any,
) -> AsyncIterator[tuple[McpTools, McpConnection]]:
    tools: McpTools | None = None
    changes: list[Any] = []

    async def on_listing(listing: Any) -> None:
        assert tools is not None
        await tools.check_listing(listing)

    async def on_change(change: Any) -> None:
        changes.append(change)

    connection = McpConnection(server.spec(), on_listing=on_listing, connect_timeout_seconds=30)
    tools = McpTools(registry, connection, on_change=on_change, **options)
    tools.changes = changes  # type: ignore[attr-defined]
    await connection.start()
    try:
        executor = Executor(
            settings or rt.settings, tools.handlers(), group=group_of(rt), registry=registry
        )
        tools.executor = executor  # type: ignore[attr-defined]
        async with running(executor):
            yield tools, connection
    finally:
        await connection.stop()


def outcome(result: Any) -> tuple[str, str | None]:
    return (result.outcome.value, result.reason)


# ---------------------------------------------------------------------------- stdio


@pytest.mark.partitions(2)
async def test_stdio_calls_end_to_end_with_the_fence_and_bounded_results(
    runtime: Runtime, tmp_path: Path
) -> None:
    """A call runs once with its dispatch id as the idempotency key; isError, an oversized
    result and a crash mid-call each end as they must; a cancellation written between dispatch
    and execution is refused by the fence and never reaches the server."""
    rt = runtime
    server = Server(tmp_path, "stdio")
    registry = await pinned_registry(server, tmp_path)
    calls = {
        name: make_dispatch("acme", f"t-{name}", "call_0", tool=name, arguments={"slot": "9"})
        for name in ("book_slot", "fail", "big", "crash")
    }
    cancelled = make_dispatch(
        "acme", "t-cancelled", "call_0", tool="book_slot", arguments={"slot": "7"}
    )
    # the same tool name, bare and in another namespace: another group's tools, never run here
    bare = make_dispatch("acme", "t-bare", "call_0", tool="book_slot", namespace=None)
    other = make_dispatch("acme", "t-other", "call_0", tool="book_slot", namespace="crm")
    for d in [*calls.values(), cancelled, bare, other]:
        await rt.control(turn_started("acme", d.turn_id))
    # calls run side by side: the crash, which ends the session and every call open on it
    # (unknown, truthfully), is dispatched once the others have ended
    first = [calls[name] for name in ("book_slot", "fail", "big")]
    await write_dispatch(rt, bare, other, *first, cancelled)
    await rt.control(turn_cancelled("acme", "t-cancelled"))  # after dispatch, before execution
    async with mcp_executor(rt, server, registry) as (tools, connection):
        await wait_results(rt.settings, 4, timeout=90)
        await write_dispatch(rt, calls["crash"])
        got = {r.turn_id: r for r in await wait_results(rt.settings, 5, timeout=90)}
        assert tools.executor.client.stats.other_tools == 2  # type: ignore[attr-defined]
        # the crash closed the session; it is reopened
        await wait_until(
            lambda: _true(connection.sessions >= 2 and connection.live),
            timeout=30,
            what="a new session",
        )
    assert outcome(got["t-book_slot"]) == ("succeeded", None)
    assert got["t-book_slot"].output == {
        "content": [{"type": "text", "text": '{\n  "ref": "B-9"\n}'}],
        "structuredContent": {"ref": "B-9"},
    }
    assert outcome(got["t-fail"]) == ("failed", "tool_error")
    assert "9" not in got["t-fail"].detail  # the server's error text is not recorded
    assert outcome(got["t-big"]) == ("unknown", "result_too_large")  # it may have acted
    assert got["t-big"].output is None
    assert outcome(got["t-crash"]) == ("unknown", "mcp_session_lost")
    assert outcome(got["t-cancelled"]) == ("refused", "turn_cancelled")
    # what the server saw: each call once, keyed by its dispatch id; never the cancelled one
    assert server.keys("book_slot") == [calls["book_slot"].dispatch_id]
    for name in ("fail", "big", "crash"):
        assert server.keys(name) == [calls[name].dispatch_id]
    seen = {s["key"] for s in server.seen()}
    assert not seen & {cancelled.dispatch_id, bare.dispatch_id, other.dispatch_id}
    assert set(got) == {f"t-{n}" for n in calls} | {"t-cancelled"}
    status = [s for s in await rt.read("status") if s["turn_id"] == "t-crash"]
    assert [s["state"] for s in status] == ["failed"]  # what the user is told: unknown
    # the crashed call is never run again: a second member of the group skips it
    async with mcp_executor(rt, server, registry):
        again = make_dispatch(
            "acme", "t-again", "call_0", tool="book_slot", arguments={"slot": "8"}
        )
        await rt.control(turn_started("acme", "t-again"))
        await write_dispatch(rt, again)
        await wait_results(rt.settings, 6, timeout=90)
    assert server.keys("crash") == [calls["crash"].dispatch_id]


@pytest.mark.partitions(1)
async def test_stdio_slow_server_times_out_as_unknown(runtime: Runtime, tmp_path: Path) -> None:
    rt = runtime
    server = Server(tmp_path, "stdio", MCP_TEST_SLOW_SECONDS="20")
    registry = await pinned_registry(server, tmp_path)
    d = make_dispatch("acme", "t-slow", "call_0", tool="slow", arguments={"slot": "1"})
    await rt.control(turn_started("acme", "t-slow"))
    await write_dispatch(rt, d)
    async with mcp_executor(rt, server, registry, call_timeout_seconds=1.0):
        [result] = await wait_results(rt.settings, 1, timeout=60)
    assert outcome(result) == ("unknown", "mcp_timeout")
    assert server.keys("slow") == [d.dispatch_id]


@pytest.mark.partitions(1)
async def test_a_call_running_when_its_turn_is_stopped_is_cancelled_on_the_server(
    runtime: Runtime, tmp_path: Path
) -> None:
    """Issue 39, item 3: a turn stopped while its MCP call runs abandons the request at once
    (the server gets notifications/cancelled and stops it); the outcome is unknown,
    cancelled_while_running (the server may have acted), long before the call's timeout."""
    rt = runtime
    server = Server(tmp_path, "stdio", MCP_TEST_SLOW_SECONDS="40")
    registry = await pinned_registry(server, tmp_path)
    d = make_dispatch("acme", "t-stop", "call_0", tool="slow", arguments={"slot": "1"})
    await rt.control(turn_started("acme", "t-stop"))
    await write_dispatch(rt, d)
    # the executor's own grace before it cancels a handler that ignores the stop is longer
    # than the bound below: only the handler's own abandoning of the request meets it
    patient = rt.settings.model_copy(update={"executor_stop_grace_seconds": 120.0})
    async with mcp_executor(rt, server, registry, patient, call_timeout_seconds=60.0):
        await wait_until(
            lambda: _true(server.keys("slow") == [d.dispatch_id]),
            timeout=60,
            what="the slow call running on the server",
        )
        started = time.monotonic()
        await rt.control(turn_cancelled("acme", "t-stop"))
        [result] = await wait_results(rt.settings, 1, timeout=60)
        took = time.monotonic() - started
        await wait_until(
            lambda: _true(server.keys("slow_cancelled") == [d.dispatch_id]),
            timeout=30,
            what="the server told to cancel",
        )
    assert outcome(result) == ("unknown", "cancelled_while_running")
    assert took < 30  # told at once, not at the call's timeout or the server's answer


@pytest.mark.partitions(1)
async def test_stdio_definition_changed_at_runtime_is_refused_until_reimported(
    runtime: Runtime, tmp_path: Path
) -> None:
    """notifications/tools/list_changed: the changed tool's calls fail tool_changed and never
    reach the server; the change is reported once (the command writes it to the audit)."""
    rt = runtime
    server = Server(tmp_path, "stdio")
    registry = await pinned_registry(server, tmp_path)
    before = make_dispatch("acme", "t-rug", "call_0", tool="book_slot", arguments={"slot": "1"})
    pull = make_dispatch("acme", "t-rug", "call_1", tool="rug_pull", arguments={"slot": "1"})
    after = make_dispatch("acme", "t-rug", "call_2", tool="book_slot", arguments={"slot": "2"})
    await rt.control(turn_started("acme", "t-rug"))
    async with mcp_executor(rt, server, registry) as (tools, _connection):
        await write_dispatch(rt, before, pull)
        await wait_results(rt.settings, 2, timeout=60)
        await wait_until(
            lambda: _true(tools.states.get("book_slot") == "changed"),
            timeout=30,
            what="the listing re-checked",
        )
        await write_dispatch(rt, after)
        got = {r.call_id: r for r in await wait_results(rt.settings, 3, timeout=60)}
        changes = list(tools.changes)  # type: ignore[attr-defined]
    assert outcome(got["call_0"]) == ("succeeded", None)
    assert outcome(got["call_1"]) == ("succeeded", None)
    assert outcome(got["call_2"]) == ("failed", "tool_changed")
    assert server.keys("book_slot") == [before.dispatch_id]  # the refused call never got there
    assert [(c.tool, c.state.value) for c in changes] == [("book_slot", "changed")]


@pytest.mark.partitions(1)
async def test_a_call_validated_against_another_version_never_runs(
    runtime: Runtime, tmp_path: Path
) -> None:
    """A backlog validated against v1 of a tool, when the registry now pins v2 (a re-import):
    refused tool_version_mismatch, never sent (issue 38, item 7)."""
    rt = runtime
    server = Server(tmp_path, "stdio")
    registry = await pinned_registry(server, tmp_path)
    old = make_dispatch(
        "acme", "t-v1", "call_0", tool="book_slot", arguments={"slot": "1"}, version="0123abcd0123"
    )
    current = make_dispatch("acme", "t-v2", "call_0", tool="book_slot", arguments={"slot": "2"})
    for d in (old, current):
        await rt.control(turn_started("acme", d.turn_id))
    await write_dispatch(rt, old, current)
    async with mcp_executor(rt, server, registry):
        got = {r.turn_id: r for r in await wait_results(rt.settings, 2, timeout=60)}
    assert outcome(got["t-v1"]) == ("failed", "tool_version_mismatch")
    assert outcome(got["t-v2"]) == ("succeeded", None)
    assert server.keys("book_slot") == [current.dispatch_id]


async def _true(value: bool) -> bool:
    return value


# ---------------------------------------------------------------------------- Streamable HTTP


@pytest.mark.partitions(2)
async def test_http_calls_end_to_end_and_a_changed_definition_at_start_is_refused(
    runtime: Runtime, tmp_path: Path
) -> None:
    rt = runtime
    server = Server(tmp_path, "http")
    with server.serving():
        await wait_until(lambda: _listening(server), timeout=30, what="the HTTP server")
        registry = await pinned_registry(server, tmp_path)
        book = make_dispatch("acme", "h-book", "call_0", tool="book_slot", arguments={"slot": "5"})
        fail = make_dispatch("acme", "h-fail", "call_0", tool="fail", arguments={"slot": "5"})
        for d in (book, fail):
            await rt.control(turn_started("acme", d.turn_id))
        await write_dispatch(rt, book, fail)
        async with mcp_executor(rt, server, registry):
            got = {r.turn_id: r for r in await wait_results(rt.settings, 2, timeout=60)}
        assert outcome(got["h-book"]) == ("succeeded", None)
        assert got["h-book"].output is not None
        assert got["h-book"].output["structuredContent"] == {"ref": "B-5"}
        assert outcome(got["h-fail"]) == ("failed", "tool_error")
        assert server.keys("book_slot") == [book.dispatch_id]
    # the same server restarted with a changed definition of book_slot: refused from the start
    changed = Server(tmp_path, "http", MCP_TEST_VARIANT="changed")
    changed.log = server.log
    with changed.serving():
        await wait_until(lambda: _listening(changed), timeout=30, what="the HTTP server")
        again = make_dispatch(
            "acme", "h-again", "call_0", tool="book_slot", arguments={"slot": "6"}
        )
        await rt.control(turn_started("acme", "h-again"))
        await write_dispatch(rt, again)
        async with mcp_executor(rt, changed, registry) as (tools, _connection):
            got = {r.turn_id: r for r in await wait_results(rt.settings, 3, timeout=60)}
            changes = list(tools.changes)  # type: ignore[attr-defined]
    assert outcome(got["h-again"]) == ("failed", "tool_changed")
    assert server.keys("book_slot") == [book.dispatch_id]
    assert [(c.tool, c.state.value) for c in changes] == [("book_slot", "changed")]


async def _listening(server: Server) -> bool:
    import socket

    assert server.url is not None
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---------------------------------------------------------------------------- the command


@pytest.mark.partitions(1)
async def test_executor_mcp_command_runs_calls_and_audits_a_changed_definition(
    runtime: Runtime, tmp_path: Path
) -> None:
    """`processor executor mcp` as a subprocess: a call end to end, and the audit record of a
    definition that departs from its pin (the server started with a changed book_slot)."""
    rt = runtime
    server = Server(tmp_path, "stdio")
    await pinned_registry(server, tmp_path)
    ok = make_dispatch("acme", "c-ok", "call_0", tool="fail", arguments={"slot": "3"})
    refused = make_dispatch("acme", "c-no", "call_0", tool="book_slot", arguments={"slot": "3"})
    for d in (ok, refused):
        await rt.control(turn_started("acme", d.turn_id))
    await write_dispatch(rt, ok, refused)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")},
        **rt.env_settings,
        **server.env,
        "MCP_TEST_VARIANT": "changed",
        "PROCESSOR_LOG_LEVEL": "INFO",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "processor.cli",
            "executor",
            "mcp",
            "--server-command",
            " ".join([*SERVER, "stdio"]),
            "--server-env",
            "MCP_TEST_LOG",
            "--server-env",
            "MCP_TEST_VARIANT",
            "--server-env",
            "PYTHONPATH",
            "--tools",
            str(tmp_path / "mcp-tools.yaml"),
            "--group",
            group_of(rt),
            "--allow-unsigned-operators",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "executor.log").open("wb"),
    )
    try:
        got = {r.turn_id: r for r in await wait_results(rt.settings, 2, timeout=90)}
        audits = await wait_until(
            lambda: _mcp_audits(rt), timeout=30, what="the audit record of the change"
        )
    finally:
        proc.terminate()
        proc.wait(30)
    assert outcome(got["c-ok"]) == ("failed", "tool_error")
    assert outcome(got["c-no"]) == ("failed", "tool_changed")
    assert [(a.command_type, a.outcome.value, a.rejection) for a in audits] == [
        ("mcp.tool_changed", "rejected", "tool_changed")
    ]
    assert "book_slot" in audits[0].reason and "bookings" in audits[0].reason
    log = (tmp_path / "executor.log").read_text()
    assert log.count("MCP tool definition departs from the registry") == 1
    assert server.keys("book_slot") == []
    assert server.keys("fail") == [ok.dispatch_id]
    assert proc.returncode == 0


async def _mcp_audits(rt: Runtime) -> list[Audit]:
    records = [
        Audit.model_validate({k: v for k, v in a.items() if not k.startswith("_")})
        for a in await rt.read("audit")
    ]
    return [a for a in records if a.command_type.startswith("mcp.")]


def test_meta_key_is_the_documented_one() -> None:
    assert META_IDEMPOTENCY_KEY == "toolcall-processor/idempotency-key"
