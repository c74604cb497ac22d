"""MCP servers that answer what a careful server never would, on the real broker (issue 38,
items 4, 5, 6, 8 and 13): a hand-written server (:mod:`tests.integration.mcp_raw_server`)
over stdio and over HTTP with JSON answers, behind the executor (in-process, or the
``processor executor mcp`` command as a subprocess)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from processor.core.events import Dispatch
from processor.core.registry import Registry
from processor.mcp.connection import McpConnection, ServerSpec
from processor.mcp.tools import McpTools
from processor.registry_file import load_registry
from tests.integration.conftest import REPO_ROOT, Runtime, free_port, turn_started
from tests.integration.executor_harness import (
    Executor,
    group_of,
    running,
    wait_results,
    write_dispatch,
)
from tests.integration.executor_harness import make_dispatch as _make_dispatch

pytestmark = pytest.mark.integration

SERVER = [sys.executable, "-m", "tests.integration.mcp_raw_server"]
SECRET = "SECRET-ARGUMENT-4711"


class RawServer:
    """Where the hand-written server runs and what it saw."""

    def __init__(self, tmp: Path, transport: str, **env: str) -> None:
        self.log = tmp / f"raw-calls-{transport}.jsonl"
        self.env = {"MCP_TEST_LOG": str(self.log), "PYTHONPATH": str(REPO_ROOT), **env}
        self.transport = transport
        self.process: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.versions: dict[str, str] = {}

    def command(self) -> str:
        return " ".join([*SERVER, "stdio"])

    def spec(self) -> ServerSpec:
        if self.transport == "stdio":
            return ServerSpec(command=self.command(), env=self.env, cwd=str(REPO_ROOT))
        assert self.url is not None
        return ServerSpec(url=self.url)

    def where(self) -> list[str]:
        if self.transport == "stdio":
            flags = ["--server-command", self.command()]
            for name in self.env:
                flags += ["--server-env", name]
            return flags
        return ["--server-url", self.url or ""]

    def keys(self, tool: str) -> list[str]:
        if not self.log.exists():
            return []
        seen = [orjson.loads(line) for line in self.log.read_text().splitlines() if line]
        return [s["key"] for s in seen if s["tool"] == tool]

    @contextlib.contextmanager
    def serving(self) -> Iterator[RawServer]:
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
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        try:
            yield self
        finally:
            self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def dispatch(self, turn: str, tool: str, text: str = "t") -> Dispatch:
        d = _make_dispatch("acme", turn, "call_0", tool=tool, arguments={"text": text})
        return d.model_copy(
            update={"namespace": "rawbookings", "tool_version": self.versions.get(tool, "1")}
        )


def import_registry(server: RawServer, tmp: Path) -> Registry:
    """The registry as `processor tools import-mcp` writes it."""
    path = tmp / "raw-tools.yaml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "processor.cli",
            "tools",
            "import-mcp",
            *server.where(),
            "-o",
            str(path),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, **server.env, "MCP_TEST_VARIANT": ""},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    doc = yaml.safe_load(path.read_text())
    typed = next(t for t in doc["tools"] if t["name"] == "typed")
    assert typed["mcp"]["digest_version"] == 2
    registry = load_registry(path)
    server.versions = {t.name: t.version for t in registry.tools}
    return registry


@contextlib.asynccontextmanager
async def mcp_executor(
    rt: Runtime, server: RawServer, registry: Registry, **options: Any
) -> AsyncIterator[McpTools]:
    tools: McpTools | None = None

    async def on_listing(listing: Any) -> None:
        assert tools is not None
        await tools.check_listing(listing)

    connection = McpConnection(server.spec(), on_listing=on_listing, connect_timeout_seconds=30)
    tools = McpTools(registry, connection, **options)
    await connection.start()
    try:
        executor = Executor(rt.settings, tools.handlers(), group=group_of(rt), registry=registry)
        async with running(executor):
            yield tools
    finally:
        await connection.stop()


def outcome(result: Any) -> tuple[str, str | None]:
    return (result.outcome.value, result.reason)


class LoopLag:
    """The longest the event loop went without running this probe (10 ms ticks)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, time.monotonic() - before - 0.01)

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


# ------------------------------------------------------------------ items 4 and 5: definitions


@pytest.mark.partitions(1)
async def test_output_schema_is_pinned_and_results_are_judged_without_backtracking(
    runtime: Runtime, tmp_path: Path
) -> None:
    """The pinned outputSchema's ``^(a+)+$`` on 31 bytes neither blocks the loop nor is run by
    Python's ``re``: the answer is unknown (result_schema_mismatch), as are an answer that
    breaks its schema and one that is not a CallToolResult (the server may have acted). A
    server that then declares another output schema (nothing else changed) has its tool
    refused as changed, never called."""
    rt = runtime
    server = RawServer(tmp_path, "stdio")
    registry = import_registry(server, tmp_path)
    calls = {t: server.dispatch(f"t-{t}", t) for t in ("typed", "shaped", "unreadable")}
    for d in calls.values():
        await rt.control(turn_started("acme", d.turn_id))
    async with mcp_executor(rt, server, registry, call_timeout_seconds=5.0):
        with LoopLag() as lag:  # the executor is running: what follows is its calls
            await write_dispatch(rt, *calls.values())
            got = {r.turn_id: r for r in await wait_results(rt.settings, 3, timeout=90)}
    assert outcome(got["t-typed"]) == ("unknown", "result_schema_mismatch")
    assert outcome(got["t-shaped"]) == ("unknown", "result_schema_mismatch")
    assert outcome(got["t-unreadable"]) == ("unknown", "malformed_result")
    assert all(got[f"t-{t}"].output is None for t in calls)
    assert lag.worst < 0.5, f"the event loop was blocked for {lag.worst:.2f} s"
    # the server now declares another output schema for `typed`: a changed definition
    changed = RawServer(tmp_path, "stdio", MCP_TEST_VARIANT="output_changed")
    changed.log, changed.versions = server.log, server.versions
    again = changed.dispatch("t-typed-2", "typed")
    await rt.control(turn_started("acme", again.turn_id))
    await write_dispatch(rt, again)
    async with mcp_executor(rt, changed, registry) as tools:
        got = {r.turn_id: r for r in await wait_results(rt.settings, 4, timeout=90)}
        assert tools.states["typed"] == "changed"
        assert tools.states["shaped"] == "matches"
    assert outcome(got["t-typed-2"]) == ("failed", "tool_changed")
    assert server.keys("typed") == [calls["typed"].dispatch_id]


def test_a_version_one_pin_is_refused_with_a_re_import_message(tmp_path: Path) -> None:
    """A registry written before the whole definition was pinned (no digest_version) still
    loads, but an executor refuses it, telling the operator to re-import."""
    from processor.core.errors import ConfigurationError

    entry = {
        "name": "typed",
        "namespace": "rawbookings",
        "parameters": {"type": "object"},
        "mcp": {"server": "rawbookings", "digest": "sha256:" + "0" * 64},
    }
    registry = Registry.from_document({"tools": [entry]})
    connection = McpConnection(RawServer(tmp_path, "stdio").spec())
    tools = McpTools(registry, connection, server_name="rawbookings")
    with pytest.raises(ConfigurationError, match="re-import the registry") as raised:
        tools.handlers()
    assert raised.value.reason == "mcp_old_digest"


# ------------------------------------------------------------------ item 13: a dead session


@pytest.mark.partitions(1)
async def test_a_call_after_the_stdio_server_exited_is_not_sent_into_the_dead_session(
    runtime: Runtime, tmp_path: Path
) -> None:
    """The server answers, then exits while a child of it keeps its pipes open (no end of
    stdout, so the SDK never notices): the next call is not written into the dead session
    (where it waited for its timeout and ended unknown); it runs on a new one."""
    rt = runtime
    server = RawServer(tmp_path, "stdio", MCP_TEST_ORPHAN="1")
    registry = import_registry(server, tmp_path)
    first = server.dispatch("t-die", "die_after")
    second = server.dispatch("t-next", "echo")
    for d in (first, second):
        await rt.control(turn_started("acme", d.turn_id))
    await write_dispatch(rt, first)
    async with mcp_executor(rt, server, registry, call_timeout_seconds=5.0):
        await wait_results(rt.settings, 1, timeout=60)
        await asyncio.sleep(0.5)  # the server has exited (a write racing its exit is unknown)
        await write_dispatch(rt, second)
        got = {r.turn_id: r for r in await wait_results(rt.settings, 2, timeout=60)}
    assert outcome(got["t-die"]) == ("succeeded", None)
    assert outcome(got["t-next"]) == ("succeeded", None)
    assert server.keys("echo") == [second.dispatch_id]


@pytest.mark.partitions(1)
async def test_a_call_after_the_http_server_died_fails_unavailable(
    runtime: Runtime, tmp_path: Path
) -> None:
    """The HTTP server is gone: the connection cannot be made, so the request provably never
    left: failed, mcp_unavailable (retry possible), not unknown."""
    rt = runtime
    server = RawServer(tmp_path, "http")
    with server.serving():
        registry = import_registry(server, tmp_path)
        ok = server.dispatch("h-ok", "echo")
        await rt.control(turn_started("acme", ok.turn_id))
        await write_dispatch(rt, ok)
        async with mcp_executor(rt, server, registry, session_wait_seconds=2.0):
            await wait_results(rt.settings, 1, timeout=60)
            server.kill()
            late = server.dispatch("h-late", "echo")
            await rt.control(turn_started("acme", late.turn_id))
            await write_dispatch(rt, late)
            got = {r.turn_id: r for r in await wait_results(rt.settings, 2, timeout=60)}
    assert outcome(got["h-ok"]) == ("succeeded", None)
    assert outcome(got["h-late"]) == ("failed", "mcp_unavailable")
    assert got["h-late"].retry_possible is True
    assert server.keys("echo") == [ok.dispatch_id]


# ------------------------------------------------------------------ items 6 and 8: the command


def _peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.partitions(1)
async def test_command_bounds_answers_while_reading_and_logs_nothing_a_server_wrote(
    runtime: Runtime, tmp_path: Path, transport: str
) -> None:
    """`processor executor mcp`: a server that prints a debug line quoting its argument (on
    stdout and stderr), or answers a JSON body that is not JSON-RPC quoting it, puts nothing of
    it in the executor's log; a 48 MB answer is unknown (result_too_large) and raises the
    executor's peak memory by far less than its size, and so does (HTTP) the same answer
    gzip-compressed to 47 KB (refused: its size is known only once decoded)."""
    rt = runtime
    server = RawServer(tmp_path, transport)
    with server.serving():
        registry_path = tmp_path / "raw-tools.yaml"
        import_registry(server, tmp_path)
        echo = server.dispatch("c-echo", "echo", text=SECRET)
        garbled = server.dispatch("c-garbled", "garbled", text=SECRET)
        huge = server.dispatch("c-huge", "huge")
        bomb = server.dispatch("c-bomb", "bomb")
        big = [huge, bomb] if transport == "http" else [huge]
        for d in (echo, garbled, *big):
            await rt.control(turn_started("acme", d.turn_id))
        await write_dispatch(rt, echo, garbled)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")},
            **rt.env_settings,
            **server.env,
            "PROCESSOR_LOG_LEVEL": "INFO",
        }
        log_path = tmp_path / f"executor-{transport}.log"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "processor.cli",
                "executor",
                "mcp",
                *server.where(),
                "--tools",
                str(registry_path),
                "--group",
                group_of(rt),
                "--allow-unsigned-operators",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log_path.open("wb"),
        )
        try:
            await wait_results(rt.settings, 2, timeout=90)
            before = _peak_rss_bytes(proc.pid)
            await write_dispatch(rt, *big)
            got = {r.turn_id: r for r in await wait_results(rt.settings, 2 + len(big), timeout=120)}
            after = _peak_rss_bytes(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
    assert outcome(got["c-echo"]) == ("succeeded", None)
    # stdio: the junk line is dropped, the answer after it read; HTTP: the answer is unreadable
    assert outcome(got["c-garbled"]) == (
        ("succeeded", None) if transport == "stdio" else ("unknown", "malformed_result")
    )
    assert outcome(got["c-huge"]) == ("unknown", "result_too_large")
    if transport == "http":
        assert outcome(got["c-bomb"]) == ("unknown", "malformed_result")
    growth = after - before
    print(f"{transport}: peak RSS {before / 2**20:.0f} MiB -> {after / 2**20:.0f} MiB")
    assert growth < 24 * 2**20, f"a 48 MB answer raised the peak RSS by {growth / 2**20:.0f} MiB"
    log = log_path.read_text()
    assert SECRET not in log
    assert "Failed to parse JSONRPC message" not in log
    if transport == "stdio":
        assert "not JSON-RPC" in log  # counted: one line, no content
    assert server.keys("huge") == [huge.dispatch_id]
