"""Helpers for the worker integration tests (a real broker: ``kafka_bootstrap``).

* ``runtime`` fixture: a :class:`Runtime` for one test: its settings (unique topic prefix, group
  id and application id, short timeouts suited to tests), its topics (created with
  ``processor topics create`` logic, deleted afterwards), worker subprocesses, and the helpers
  below.
* :class:`WorkerProcess`: ``python -m processor.runtime worker`` as a subprocess with env
  settings, a metrics port and a log file; ``wait_ready`` polls ``/readyz``; ``terminate``
  sends SIGTERM, ``kill`` SIGKILL.
* Event builders for hand-made calls, and ``wait_until`` (poll-until, never fixed sleeps).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from pydantic import BaseModel

from processor.core.events import (
    CallDelta,
    CallEnded,
    CallStarted,
    FragmentEvent,
    ResponseEnded,
    ResponseQuarantined,
    ResponseStatus,
    TenantStopped,
    TurnCancelled,
    TurnStarted,
    encode,
    turn_key,
)
from processor.kafka.clients import admin_client, committed_reader
from processor.kafka.publish import Publisher
from processor.kafka.tail import read_records
from processor.kafka.topics import create_topics
from processor.settings import Settings
from tests.kafka_broker import delete_topics

REPO_ROOT = Path(__file__).resolve().parents[2]
# The tests' own registry (examples/tools.yaml evolves with the examples): get_weather and its
# alias, and no get_stock_price, so the recordings exercise both dispatch and unknown_tool.
TOOLS_YAML = """
tools:
  - name: get_weather
    version: "2"
    aliases: [GetWeatherArgs]
    parameters:
      type: object
      properties:
        city: {type: string, minLength: 1}
        location: {type: string}
        country: {type: string}
        units: {enum: [c, f]}
      additionalProperties: false
"""
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

_Command = TypeVar("_Command", bound=BaseModel)


# ---------------------------------------------------------------------------- polling


async def wait_until(
    check: Callable[[], Awaitable[Any]], *, timeout: float, interval: float = 0.5, what: str = ""
) -> Any:
    """Call ``check`` until it returns a truthy value; return it, or fail after ``timeout``.

    The pause between checks starts at 25 ms and doubles up to ``interval``: most conditions
    hold within a second, and a fixed half-second pause cost each wait a quarter of a second on
    average (about a minute of ``make test``), while a long wait still checks every
    ``interval``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    pause = min(interval, 0.025)
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}: last={last!r}")
        await asyncio.sleep(pause)
        pause = min(interval, pause * 2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------- events


def call_events(
    tenant: str,
    turn: str,
    call_id: str,
    arguments: str,
    *,
    tool: str = "get_weather",
    actor: str = "user-1",
    response: str = "resp-1",
    pieces: int = 4,
    ts: float | None = None,
    end_response: bool = True,
) -> list[FragmentEvent]:
    """call.started, the argument text cut into ``pieces`` deltas, call.ended, and (unless
    ``end_response`` is false) the response's normal end, ``response.ended`` completed: a call
    acts only once its response completed. The last two events are the call's terminal ones.
    """
    now = ts if ts is not None else time.time()
    base = {
        "tenant": tenant,
        "turn_id": turn,
        "response_id": response,
        "item_id": call_id,
        "call_id": call_id,
        "provider": "test",
        "ts": now,
    }
    eid = f"{tenant}.{turn}.{response}.{call_id}"
    size = max(1, -(-len(arguments) // pieces))
    chunks = [arguments[i : i + size] for i in range(0, len(arguments), size)]
    events: list[FragmentEvent] = [CallStarted(**base, event_id=f"{eid}.s", tool=tool, actor=actor)]
    events += [
        CallDelta(**base, event_id=f"{eid}.d{n}", seq=n, delta=c)
        for n, c in enumerate(chunks, start=1)
    ]
    events.append(
        CallEnded(**base, event_id=f"{eid}.e", seq=len(chunks) + 1, terminal_event_id=f"{eid}.t")
    )
    if end_response:
        del base["item_id"], base["call_id"]
        events.append(
            ResponseEnded(
                **base,
                event_id=f"{tenant}.{turn}.{response}.end",
                status=ResponseStatus.COMPLETED,
                reason="stop",
            )
        )
    return events


def _command(cls: type[_Command], command_id: str, issued_by: str, **fields: Any) -> _Command:
    """A control event issued now (unsigned: tests that sign use ``processor ctl``)."""
    return cls(command_id=command_id, issued_by=issued_by, issued_at=time.time(), **fields)


def turn_started(tenant: str, turn: str, actor: str = "user-1") -> TurnStarted:
    return _command(
        TurnStarted, f"ts-{tenant}-{turn}", "gateway", tenant=tenant, turn_id=turn, actor=actor
    )


def turn_cancelled(tenant: str, turn: str, reason: str = "user_stop") -> TurnCancelled:
    command_id = f"tc-{tenant}-{turn}-{uuid.uuid4().hex[:6]}"
    return _command(
        TurnCancelled, command_id, "gateway", reason=reason, tenant=tenant, turn_id=turn
    )


def quarantine(tenant: str, turn: str, response: str) -> ResponseQuarantined:
    return _command(
        ResponseQuarantined,
        f"rq-{uuid.uuid4().hex[:8]}",
        "ops",
        reason="suspicious output",
        tenant=tenant,
        turn_id=turn,
        response_id=response,
    )


def tenant_stopped(tenant: str) -> TenantStopped:
    return _command(
        TenantStopped, f"stop-{uuid.uuid4().hex[:8]}", "ops", reason="incident", tenant=tenant
    )


# ---------------------------------------------------------------------------- workers


class WorkerProcess:
    """One ``processor.runtime worker`` subprocess (or, with ``command``, another long-running
    command of the project's that serves ``/readyz`` on ``--metrics-port``)."""

    def __init__(
        self,
        name: str,
        env: dict[str, str],
        log_path: Path,
        command: Sequence[str] = ("processor.runtime", "worker"),
    ) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *command, "--metrics-port", str(self.port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def _get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            return 0, b""

    async def ready(self) -> bool:
        status, _ = await asyncio.to_thread(self._get, "/readyz")
        return status == 200

    async def readiness(self) -> dict[str, Any]:
        status, body = await asyncio.to_thread(self._get, "/readyz")
        return orjson.loads(body) if status else {}

    async def metrics(self) -> str:
        _, body = await asyncio.to_thread(self._get, "/metrics")
        return body.decode()

    async def wait_ready(self, timeout: float = 60.0) -> None:
        async def check() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.log()}")
            return await self.ready()

        await wait_until(check, timeout=timeout, what=f"{self.name} ready")

    async def wait_exit(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} did not exit within {timeout}s")
            await asyncio.sleep(0.2)
        return self.proc.returncode

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                item = orjson.loads(line)
                if isinstance(item, dict):
                    out.append(item)
        return out

    def close(self) -> None:
        self.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(10)
        self._log.close()


class Runtime:
    """Everything one worker test needs: settings, topics, workers, producers, readers."""

    def __init__(self, bootstrap: str, prefix: str, tmp_path: Path, partitions: int) -> None:
        self.prefix = prefix
        self.tmp_path = tmp_path
        (tmp_path / "tools.yaml").write_text(TOOLS_YAML)
        self.partitions = partitions
        self.env_settings = {
            "PROCESSOR_BOOTSTRAP_SERVERS": bootstrap,
            "PROCESSOR_TOPIC_PREFIX": prefix,
            "PROCESSOR_PARTITIONS": str(partitions),
            "PROCESSOR_GROUP_ID": f"{prefix}assemblers",
            "PROCESSOR_APPLICATION_ID": f"{prefix}assembler",
            "PROCESSOR_TOOLS_FILE": str(tmp_path / "tools.yaml"),
            "PROCESSOR_SESSION_TIMEOUT_MS": "6000",
            "PROCESSOR_HEARTBEAT_INTERVAL_MS": "1000",
            "PROCESSOR_TRANSACTION_TIMEOUT_MS": "5000",
            "PROCESSOR_COMMIT_TIMEOUT_SECONDS": "4",
            "PROCESSOR_POLL_TIMEOUT_MS": "100",
            "PROCESSOR_LAG_INTERVAL_SECONDS": "1",
            "PROCESSOR_LOG_LEVEL": "INFO",
            # the harness's operator commands are unsigned (tests that sign give a keyring)
            "PROCESSOR_ALLOW_UNSIGNED_COMMANDS": "true",
        }
        self.settings = Settings(
            **{k.removeprefix("PROCESSOR_").lower(): v for k, v in self.env_settings.items()}
        )
        self.topics = self.settings.topics
        self.workers: list[WorkerProcess] = []
        self._producer: AIOKafkaProducer | None = None
        self._publisher: Publisher | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def create_topics(self) -> None:
        async with admin_client(self.settings) as admin:
            await create_topics(self.settings, admin)

    async def close(self) -> None:
        for w in self.workers:
            w.close()
        if self._producer is not None:
            await self._producer.stop()
        if self._publisher is not None:
            await self._publisher.stop()
        await delete_topics(self.settings.bootstrap_servers, list(self.topics.all().values()))

    def start_worker(self, name: str | None = None, **env: str) -> WorkerProcess:
        name = name or f"w{len(self.workers) + 1}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
        full_env.update(self.env_settings)
        full_env.update(env)
        worker = WorkerProcess(name, full_env, self.tmp_path / f"{name}.log")
        self.workers.append(worker)
        return worker

    # -- writing ---------------------------------------------------------------------------

    async def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            self._producer = AIOKafkaProducer(
                enable_idempotence=True, **self.settings.kafka_client_kwargs()
            )
            await self._producer.start()
        return self._producer

    async def publish(
        self, events: Sequence[FragmentEvent], traceparent: str | None = None
    ) -> None:
        """Publish as ``processor adapt --publish`` does (one shared idempotent producer)."""
        if self._publisher is None:
            self._publisher = Publisher(self.settings)
            await self._publisher.start()
        await self._publisher.publish(events, traceparent)

    async def control(self, *events: BaseModel) -> None:
        """Turn-scoped control events, keyed by turn key (their turn's partition)."""
        producer = await self.producer()
        for event in events:
            key = turn_key(event.tenant, event.turn_id)  # type: ignore[attr-defined]
            await producer.send_and_wait(self.topics.control, encode(event), key=key.encode())

    async def broadcast(self, event: BaseModel) -> None:
        """An operator command copied to every control partition (the CLI's fan-out)."""
        producer = await self.producer()
        key = (getattr(event, "tenant", None) or "*").encode()
        for p in range(self.partitions):
            await producer.send_and_wait(self.topics.control, encode(event), key=key, partition=p)

    async def raw_fragment(self, value: bytes, key: bytes = b"x/y") -> None:
        producer = await self.producer()
        await producer.send_and_wait(self.topics.fragments, value, key=key)

    # -- reading ---------------------------------------------------------------------------

    async def ledger_by_turn(self, turns: int, timeout: float = 30) -> dict[str, list[Any]]:
        """Each turn's ledger records as (state, terminal reason), once ``turns`` turns have
        some (or fail after ``timeout``)."""

        async def decided() -> dict[str, list[Any]] | None:
            ledger: dict[str, list[Any]] = {}
            for r in await self.read("ledger"):
                ledger.setdefault(r["turn_id"], []).append((r["state"], r["terminal_reason"]))
            return ledger if len(ledger) >= turns else None

        found: dict[str, list[Any]] = await wait_until(
            decided, timeout=timeout, what=f"ledger entries of {turns} turns"
        )
        return found

    async def read(self, role: str) -> list[dict[str, Any]]:
        """Every committed record of an output topic: value plus partition/offset/traceparent."""
        out = []
        async for record in read_records(self.settings, self.topics.output(role)):
            value = orjson.loads(record.value)
            headers = dict(record.headers or ())
            value["_traceparent"] = headers.get("traceparent", b"").decode() or None
            value["_partition"] = record.partition
            out.append(value)
        return out

    async def read_uncommitted(self, role: str) -> list[dict[str, Any]]:
        """Every record of an output topic including aborted ones (``read_uncommitted``)."""
        consumer = AIOKafkaConsumer(
            group_id=None, isolation_level="read_uncommitted", **self.settings.kafka_client_kwargs()
        )
        await consumer.start()
        out: list[dict[str, Any]] = []
        try:
            tps = [TopicPartition(self.topics.output(role), p) for p in range(self.partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            while any([await consumer.position(tp) < ends[tp] for tp in tps]):
                batch = await consumer.getmany(timeout_ms=500)
                out += [orjson.loads(r.value) for rs in batch.values() for r in rs]
        finally:
            await consumer.stop()
        return out

    async def dispatches(self) -> list[dict[str, Any]]:
        return await self.read("dispatch")

    async def caught_up(self) -> bool:
        """The group's committed offsets reached the end of fragments and control."""
        async with admin_client(self.settings) as admin:
            committed = await admin.list_consumer_group_offsets(self.settings.group_id)
        consumer = committed_reader(self.settings)
        await consumer.start()
        try:
            tps = [
                TopicPartition(t, p)
                for t in (self.topics.fragments, self.topics.control)
                for p in range(self.partitions)
            ]
            ends = await consumer.end_offsets(tps)
        finally:
            await consumer.stop()
        for tp, end in ends.items():
            if end == 0:
                continue
            done = committed.get(tp)
            if done is None or done.offset < end:
                return False
        return True

    async def wait_caught_up(self, timeout: float = 60.0) -> None:
        await wait_until(self.caught_up, timeout=timeout, what="group caught up")


@pytest.fixture
async def runtime(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Runtime]:
    """A Runtime with its topics created (``@pytest.mark.partitions(n)``, default 3)."""
    marker = request.node.get_closest_marker("partitions")
    partitions = int(marker.args[0]) if marker else 3
    rt = Runtime(kafka_bootstrap, topic_prefix, tmp_path, partitions)
    await rt.create_topics()
    try:
        yield rt
    finally:
        if getattr(request.node, "rep_call_failed", False):
            for w in rt.workers:
                print(f"----- {w.name} log -----\n{w.log()[-6000:]}")
        await rt.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "partitions(n): partition count of the runtime's topics")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.rep_call_failed = report.failed  # type: ignore[attr-defined]
    return report


def dispatch_keys(records: Iterable[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted((r["tenant"], r["turn_id"], r["call_id"]) for r in records)


def run_bench(
    script: str, *args: str, bootstrap: str, out: Path, timeout: float
) -> tuple[dict[str, Any], str]:
    """Run ``bench/<script>`` on the broker as a user would; its JSON results and its stdout."""
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / script), *args, str(out)],
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text()), done.stdout
