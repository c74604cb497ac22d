"""A worker started before its broker is reachable waits for it, live but not ready, then runs.

The broker becomes reachable late through a TCP forwarder on a free port, started only after
the worker has retried a few times (the real broker behind it advertises its own address, so
every connection after the bootstrap goes to it directly).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

from processor.settings import TopicNames
from tests.integration.conftest import REPO_ROOT, wait_until
from tests.kafka_broker import delete_topics


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@contextlib.asynccontextmanager
async def forwarder(port: int, target: str) -> AsyncIterator[None]:
    host, _, target_port = target.rpartition(":")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(target_port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()


async def test_worker_waits_for_a_late_broker_live_but_not_ready(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    names = TopicNames.from_prefix(topic_prefix)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROCESSOR_", "KAFKA_"))}
    env["PROCESSOR_TOPIC_PREFIX"] = topic_prefix
    created = subprocess.run(
        [sys.executable, "-m", "processor.cli", "topics", "create", "--partitions", "2",
         "--bootstrap-servers", kafka_bootstrap],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    late, metrics = _free_port(), _free_port()
    worker = subprocess.Popen(
        [sys.executable, "-W", "always::ResourceWarning", "-m", "processor.cli", "worker",
         "--tools", "examples/tools.yaml", "--metrics-port", str(metrics),
         "--metrics-host", "127.0.0.1", "--bootstrap-servers", f"127.0.0.1:{late}"],
        cwd=REPO_ROOT, env={**env, "PROCESSOR_STARTUP_TIMEOUT_SECONDS": "120"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        await wait_until(
            lambda: asyncio.to_thread(_status, metrics, "/healthz"),
            timeout=30,
            what="liveness while the broker is unreachable",
        )
        await asyncio.sleep(2.0)  # a few attempts
        assert await asyncio.to_thread(_status, metrics, "/healthz") == 200
        assert await asyncio.to_thread(_status, metrics, "/readyz") == 503
        assert worker.poll() is None  # still waiting, not exited
        async with forwarder(late, kafka_bootstrap):

            async def ready() -> bool:
                return await asyncio.to_thread(_status, metrics, "/readyz") == 200

            await wait_until(ready, timeout=90, what="readiness once the broker is reachable")
        worker.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(worker.communicate, timeout=60)
        assert worker.returncode == 0, err
        attempts = [line for line in err.splitlines() if "kafka unreachable; retrying" in line]
        assert len(attempts) >= 2, err
        assert all(f'"bootstrap_servers":"127.0.0.1:{late}"' in line for line in attempts)
        assert "kafka reachable" in err
        for noise in ("Traceback", "Unclosed", "ResourceWarning"):
            assert noise not in err, err
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
        await delete_topics(kafka_bootstrap, list(names.all().values()))
