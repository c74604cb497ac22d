"""MCP executors: what the executor adds per call over a bare ``tools/call``, stdio and HTTP.

For each transport, against the same server (``examples/mcp_bookings_server.py``'s read-only
``list_free_slots``), on the real broker, one run:

- **bare**: ``--calls`` sequential ``tools/call`` on one session (the SDK's ``ClientSession``
  through :class:`processor.mcp.connection.McpConnection`), mean time per call;
- **no-op**: the same executor with an in-process handler that returns at once (what the
  executor client costs whatever the handler);
- **executor**: ``--calls`` dispatch records of one turn (one partition, so run one after the
  other) through ``ExecutorClient`` + :class:`processor.mcp.tools.McpTools`: fence (control
  barrier), claim transaction, second fence, ``tools/call``, outcome transaction. Time per call
  = the interval between consecutive results' timestamps (executor-side), so polling does not
  count; calls per second per executor = its inverse.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python bench/bench_mcp_executor.py [--calls 200] [--out F]

(``make bench`` runs it: the section "Executor: MCP servers" of docs/benchmarks.md.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from processor.core.authn import AllowUnsigned  # noqa: E402
from processor.core.mcp_import import import_entries  # noqa: E402
from processor.core.registry import Registry  # noqa: E402
from processor.executor.client import ExecutorClient  # noqa: E402
from processor.executor.handlers import Handlers  # noqa: E402
from processor.mcp.connection import McpConnection, ServerSpec  # noqa: E402
from processor.mcp.tools import McpTools  # noqa: E402
from tests.integration.conftest import Runtime, turn_started, wait_until  # noqa: E402
from tests.integration.executor_harness import (  # noqa: E402
    make_dispatch,
    results,
    write_dispatch,
)

RESULTS = ROOT / "bench" / "results" / "mcp_executor.json"
SERVER = [sys.executable, "-m", "examples.mcp_bookings_server"]
ARGS = {"day": "2026-12-05"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(transport: str) -> Iterator[ServerSpec]:
    if transport == "stdio":
        yield ServerSpec(command=" ".join([*SERVER, "stdio"]), cwd=str(ROOT))
        return
    port = free_port()
    proc = subprocess.Popen(
        [*SERVER, "http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield ServerSpec(url=f"http://127.0.0.1:{port}/mcp")
    finally:
        proc.kill()
        proc.wait(10)


async def bare(spec: ServerSpec, calls: int) -> float:
    async with McpConnection(spec) as connection:
        for _ in range(20):  # warm
            await connection.call_tool("list_free_slots", ARGS, {}, wait_seconds=10)
        started = time.perf_counter()
        for n in range(calls):
            await connection.call_tool(
                "list_free_slots",
                ARGS,
                {"toolcall-processor/idempotency-key": str(n)},
                wait_seconds=10,
            )
        return (time.perf_counter() - started) / calls


async def through_executor(
    spec: ServerSpec, calls: int, bootstrap: str, *, noop: bool = False
) -> float:
    with tempfile.TemporaryDirectory() as folder:
        rt = Runtime(bootstrap, f"bench-{uuid.uuid4().hex[:8]}.", Path(folder), 1)
        await rt.create_topics()
        tools: McpTools | None = None

        async def on_listing(listing: Any) -> None:
            assert tools is not None
            await tools.check_listing(listing)

        connection = McpConnection(spec, on_listing=on_listing)
        try:
            async with McpConnection(spec) as probe:
                listing = await probe.list_tools()
                name = probe.server_name or ""
            registry = Registry.from_document({"tools": import_entries(name, listing).entries})
            tools = McpTools(registry, connection)
            await connection.start()
            handlers = tools.handlers()
            if noop:  # the same executor, its handler a coroutine that returns at once
                handlers = Handlers()
                handlers.register("list_free_slots", _noop, namespace=name)
            client = ExecutorClient(
                rt.settings,
                handlers,
                verifier=AllowUnsigned(),
                group=f"{rt.prefix}exec",
                registry=registry,
            )
            await client.start()
            task = asyncio.create_task(client.run())
            await wait_until(
                lambda: _true(bool(client.owned_partitions())), timeout=60, what="assigned"
            )
            await rt.control(turn_started("acme", "bench"))
            dispatches = [
                make_dispatch(
                    "acme", "bench", f"call_{n}", tool="list_free_slots", arguments=ARGS
                ).model_copy(update={"namespace": name})
                for n in range(calls + 10)
            ]
            await write_dispatch(rt, *dispatches)
            got = await wait_until(
                lambda: _enough(rt, calls + 10), timeout=600, interval=1.0, what="results"
            )
            client.request_stop()
            await task
            await client.stop()
            assert all(r.outcome.value == "succeeded" for r in got), {r.reason for r in got}
            stamps = sorted(r.ts for r in got)[10:]  # the first 10 warm up
            return (stamps[-1] - stamps[0]) / (len(stamps) - 1)
        finally:
            await connection.stop()
            await rt.close()


async def _noop(call: Any) -> dict[str, Any]:
    return {"ok": True}


async def _true(value: bool) -> bool:
    return value


async def _enough(rt: Runtime, n: int) -> list[Any] | None:
    got = await results(rt.settings)
    return got if len(got) >= n else None


async def measure(calls: int, bootstrap: str) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": calls, "transports": {}}
    with server("stdio") as spec:
        out["noop_handler_ms_per_call"] = 1000 * await through_executor(
            spec, calls, bootstrap, noop=True
        )
    for transport in ("stdio", "http"):
        with server(transport) as spec:
            bare_s = await bare(spec, calls)
            executor_s = await through_executor(spec, calls, bootstrap)
        out["transports"][transport] = {
            "bare_ms_per_call": bare_s * 1000,
            "executor_ms_per_call": executor_s * 1000,
            "added_ms_per_call": (executor_s - bare_s) * 1000,
            "ratio": executor_s / bare_s,
            "executor_calls_per_second": 1 / executor_s,
            "bare_calls_per_second": 1 / bare_s,
        }
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['calls']} calls each, sequential (one partition), one run. The same executor "
        f"with a no-op Python handler: {result['noop_handler_ms_per_call']:.2f} ms per call "
        "(the fence twice, the claim and the outcome transactions).",
        "",
        "| transport | bare tools/call | through the executor | added per call | ratio | "
        "calls/s per executor |",
        "|---|---|---|---|---|---|",
    ]
    for transport, r in result["transports"].items():
        lines.append(
            f"| {transport} | {r['bare_ms_per_call']:.2f} ms | {r['executor_ms_per_call']:.2f} ms "
            f"| {r['added_ms_per_call']:.2f} ms | {r['ratio']:.1f}x "
            f"| {r['executor_calls_per_second']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results JSON")
    args = parser.parse_args(argv)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    result = asyncio.run(measure(args.calls, bootstrap))
    result["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
