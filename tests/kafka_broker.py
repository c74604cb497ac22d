"""Pytest plugin: find a real Kafka broker for integration tests.

Listed in ``tests/conftest.py`` as ``pytest_plugins = ["tests.kafka_broker"]``.

``kafka_bootstrap`` (session scope) returns a bootstrap string, found in this order:

1. the ``KAFKA_BOOTSTRAP_SERVERS`` environment variable (used as is);
2. a testcontainers ``apache/kafka`` container, only when the ``testcontainers`` package
   imports *and* a Docker engine answers ``docker info`` quickly;
3. ``scripts/kafka-local start`` (a local JVM broker; jars from Maven Central).

It never skips: when no broker can be had the fixture fails with the reason.

Helpers: :func:`create_topics`, :func:`delete_topics`, :func:`wait_for_broker`, and the
``topic_prefix`` fixture, a unique ``t<8 hex>.`` prefix per test for topics, group ids and
transactional ids so tests never collide on a shared broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code
from aiokafka.structs import ConsumerRecord, TopicPartition

REPO_ROOT = Path(__file__).resolve().parent.parent
KAFKA_LOCAL = REPO_ROOT / "scripts" / "kafka-local"
POM = REPO_ROOT / "kafka" / "pom.xml"

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
# first start may download ~60 MB of jars through Maven
KAFKA_LOCAL_START_TIMEOUT_S = 600

_TOPIC_ALREADY_EXISTS = 36
_UNKNOWN_TOPIC_OR_PARTITION = 3


# --------------------------------------------------------------------------------------
# admin helpers
# --------------------------------------------------------------------------------------
def _raise_for_topic_errors(errors: list[tuple], *, ignore: set[int]) -> None:
    problems = []
    for entry in errors:
        name, code = entry[0], entry[1]
        message = entry[2] if len(entry) > 2 else None
        if code and code not in ignore:
            problems.append(f"{name}: {for_code(code).__name__} {message or ''}".strip())
    if problems:
        raise RuntimeError("topic admin request failed: " + "; ".join(problems))


async def _wait_topics(
    admin: AIOKafkaAdminClient,
    names: Mapping[str, int] | list[str],
    *,
    present: bool,
    timeout: float = 30.0,
) -> None:
    """Wait until every topic has all partitions with a leader (or is gone)."""
    wanted = list(names)
    deadline = time.monotonic() + timeout
    while True:
        described = await admin.describe_topics(wanted)
        done = True
        for t in described:
            if present:
                parts = t["partitions"]
                expected = names[t["topic"]] if isinstance(names, Mapping) else len(parts)
                if t["error_code"] or len(parts) < expected or any(p["leader"] < 0 for p in parts):
                    done = False
            elif t["error_code"] != _UNKNOWN_TOPIC_OR_PARTITION:
                done = False
        if done:
            return
        if time.monotonic() > deadline:
            state = "created" if present else "deleted"
            raise TimeoutError(f"topics {wanted} not {state} within {timeout}s: {described}")
        await asyncio.sleep(0.1)


async def create_topics(
    bootstrap: str,
    topics: Mapping[str, int],
    config: Mapping[str, str] | None = None,
    *,
    exist_ok: bool = False,
) -> None:
    """Create ``{name: partitions}`` (replication factor 1) and wait until they are usable.

    ``config`` (e.g. ``{"cleanup.policy": "compact"}``) applies to every topic.
    """
    if not topics:
        return
    cfg = {k: str(v) for k, v in (config or {}).items()}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    await admin.start()
    try:
        resp = await admin.create_topics(
            [NewTopic(name, n, 1, topic_configs=cfg) for name, n in topics.items()]
        )
        ignore = {_TOPIC_ALREADY_EXISTS} if exist_ok else set()
        _raise_for_topic_errors(resp.topic_errors, ignore=ignore)
        await _wait_topics(admin, topics, present=True)
    finally:
        await admin.close()


async def read_partition(
    tp: TopicPartition, *, isolation: str = "read_committed", **client: Any
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of one partition, from its start to its end offset as of now (``client``:
    the client keyword arguments, ``bootstrap_servers`` and security)."""
    consumer = AIOKafkaConsumer(isolation_level=isolation, **client)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[ConsumerRecord[bytes, bytes]] = []
        while await consumer.position(tp) < end:
            out += (await consumer.getmany(tp, timeout_ms=1000)).get(tp, [])
        return out
    finally:
        await consumer.stop()


async def delete_topics(bootstrap: str, names: list[str] | Mapping[str, int]) -> None:
    """Delete topics (missing ones are ignored) and wait until they are gone."""
    wanted = list(names)
    if not wanted:
        return
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    await admin.start()
    try:
        resp = await admin.delete_topics(wanted)
        _raise_for_topic_errors(resp.topic_error_codes, ignore={_UNKNOWN_TOPIC_OR_PARTITION})
        await _wait_topics(admin, wanted, present=False)
    finally:
        await admin.close()


async def _probe(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await asyncio.wait_for(admin.start(), 10)
        info = await asyncio.wait_for(admin.describe_cluster(), 10)
        if not info.get("brokers"):
            raise RuntimeError("metadata answer lists no brokers")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin.close(), 5)


def _run_in_thread(coro_factory, timeout: float):  # type: ignore[no-untyped-def]
    """Run a coroutine on a private loop in a thread (safe inside pytest-asyncio)."""
    result: dict[str, BaseException | None] = {"error": None}

    def target() -> None:
        try:
            asyncio.run(coro_factory())
        except BaseException as exc:
            result["error"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        raise TimeoutError(f"timed out after {timeout}s")
    if result["error"] is not None:
        raise result["error"]


def wait_for_broker(bootstrap: str, timeout: float = 60.0) -> None:
    """Block until ``bootstrap`` answers a Metadata request, or raise."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            _run_in_thread(lambda: _probe(bootstrap), timeout=30)
            return
        except Exception as exc:
            last = exc
            time.sleep(0.5)
    raise RuntimeError(f"Kafka at {bootstrap} did not answer within {timeout}s: {last!r}")


# --------------------------------------------------------------------------------------
# broker discovery
# --------------------------------------------------------------------------------------
def _docker_engine_answers() -> bool:
    docker = shutil.which("docker")
    if not docker:
        return False
    try:
        res = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def _testcontainers_importable() -> bool:
    try:
        import testcontainers.core.container  # noqa: F401
    except Exception:
        return False
    return True


def _pom_kafka_version() -> str:
    try:
        m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    except OSError:
        m = None
    return m.group(1).strip() if m else "4.0.0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_testcontainer():  # type: ignore[no-untyped-def]
    """Start an ``apache/kafka`` container and return ``(container, bootstrap)``.

    testcontainers-python's ``KafkaContainer`` drives the Confluent image's start scripts,
    which the ``apache/kafka`` image does not have, so this uses a generic container that
    maps a free host port 1:1 and advertises it; the broker settings mirror
    scripts/kafka-local.
    """
    from testcontainers.core.container import DockerContainer

    image = os.environ.get("KAFKA_IMAGE", f"apache/kafka:{_pom_kafka_version()}")
    port = _free_port()
    env = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://0.0.0.0:{port},CONTROLLER://localhost:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "8",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "8",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "2000",
    }
    container = DockerContainer(image)
    for k, v in env.items():
        container = container.with_env(k, v)
    container = container.with_bind_ports(port, port)
    container.start()
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_for_broker(bootstrap, timeout=120)
    except Exception:
        with contextlib.suppress(Exception):
            container.stop()
        raise
    return container, bootstrap


def _start_kafka_local() -> str:
    if not KAFKA_LOCAL.exists():
        raise RuntimeError(f"{KAFKA_LOCAL} is missing")
    try:
        res = subprocess.run(
            ["bash", str(KAFKA_LOCAL), "start"],
            capture_output=True,
            text=True,
            timeout=KAFKA_LOCAL_START_TIMEOUT_S,
            check=False,
            cwd=REPO_ROOT,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(
            f"scripts/kafka-local start timed out after {KAFKA_LOCAL_START_TIMEOUT_S}s"
        ) from exc
    lines = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    if res.returncode != 0 or not lines:
        raise RuntimeError(
            f"scripts/kafka-local start failed (exit {res.returncode}).\n"
            f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"
        )
    return lines[-1]


def find_broker(stack: contextlib.ExitStack) -> tuple[str, str]:
    """Return ``(bootstrap, how)``; containers started here are stopped by ``stack``."""
    env = os.environ.get(ENV_BOOTSTRAP, "").strip()
    if env:
        wait_for_broker(env, timeout=60)
        return env, f"${ENV_BOOTSTRAP}"

    notes: list[str] = []
    if _testcontainers_importable() and _docker_engine_answers():
        try:
            container, bootstrap = _start_testcontainer()
        except Exception as exc:
            notes.append(f"testcontainers failed: {exc!r}")
        else:
            stack.callback(container.stop)
            return bootstrap, "testcontainers apache/kafka"
    try:
        return _start_kafka_local(), "scripts/kafka-local"
    except Exception as exc:
        notes.append(str(exc))
    raise RuntimeError(
        "no Kafka broker available for integration tests. Set KAFKA_BOOTSTRAP_SERVERS, "
        "or provide Docker + testcontainers, or make `scripts/kafka-local start` work "
        "(needs java 17+ and mvn with access to Maven Central).\n" + "\n".join(notes)
    )


# --------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a real, answering Kafka broker (never skips)."""
    with contextlib.ExitStack() as stack:
        try:
            bootstrap, _how = find_broker(stack)
        except Exception as exc:
            pytest.fail(str(exc), pytrace=False)
        yield bootstrap


@pytest.fixture
def topic_prefix() -> str:
    """A unique prefix per test, e.g. ``t1a2b3c4d.``, for topics / groups / txn ids."""
    return f"t{uuid.uuid4().hex[:8]}."
