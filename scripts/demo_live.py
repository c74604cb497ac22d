#!/usr/bin/env python3
"""``make up`` / ``make down``: the live pipeline on Kafka in one command, then nothing left over.

``up`` (default):

1. a broker: ``KAFKA_BOOTSTRAP_SERVERS`` (or ``PROCESSOR_BOOTSTRAP_SERVERS``) when set; else the
   compose file's ``kafka`` service where a Docker engine answers; else ``scripts/kafka-local``
   (Apache Kafka from Maven Central jars). A broker this script started is stopped at the end;
   one that was already running is left alone;
2. topics with a prefix of their own (``demo-live-<run id>.``), deleted at the end;
3. an operator key pair (``processor ctl keygen``) in a temporary folder: the private key stays
   apart, the workers and the executor get the folder holding only the public keyring;
4. two workers (one consumer group) and the example executor (``examples/book_slot_executor.py``);
5. every bundled provider recording (``tests/adapters/data``) through its adapter (as
   ``processor adapt`` does) onto ``fragments``, its ``turn.started`` onto ``control``; then
   three scenarios: a turn cancelled while its calls are open (``processor ctl cancel-turn``),
   a response quarantined by a signed operator command (``processor ctl
   quarantine-response``), and a ``book_slot`` call that waits for the user's confirmation
   (``processor ctl confirm`` with the proposal's digest) and runs on the executor;
6. a per-call summary (provider, tool, outcome, reason, dispatch → result), printed once every
   call has its ledger record. It waits on what the pipeline writes (ledger, status, proposals,
   results), never on timings; a deadline only turns a stuck run into a clear failure.

Everything started is stopped on the way out, also on Ctrl-C or SIGTERM: children run in their
own sessions (so Ctrl-C reaches this script only, which then stops them in order) and their pids
are kept in ``.demo-live/`` so ``make down`` can stop what a killed run left behind, delete its
topics and stop a broker it started.

Exit codes: 0 when every call settled and the scenarios turned out as they must, 1 otherwise,
130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

from processor.adapters.base import TurnContext
from processor.cli.adapt import adapt_stream, adapter_class
from processor.core.errors import AdapterError
from processor.core.events import TurnStarted, encode, stable_id

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "adapters" / "data"
TOOLS = ROOT / "examples" / "tools.yaml"
STATE = ROOT / ".demo-live"
PROCESSOR = str(Path(sys.executable).parent / "processor")
COMPOSE_FILE = ROOT / "docker-compose.yml"
KAFKA_LOCAL = ROOT / "scripts" / "kafka-local"

TENANT = "demo"
ACTOR = "alice"
KEY_ID = "demo-ops"
OPERATOR = "demo-oncall"
PARTITIONS = 4
WORKERS = 2

# recording folder → adapter (``processor adapt --provider``)
PROVIDER_OF_FOLDER = {
    "anthropic": "anthropic",
    "bedrock-converse": "bedrock",
    "gemini": "gemini",
    "groq": "openai-chat",
    "openai-chat": "openai-chat",
    "openai-compat-chat": "openai-chat",
    "openai-responses": "openai-responses",
}
RECORDING_SUFFIXES = (".sse", ".jsonl", ".eventstream")
CANCEL_RECORDING = "openai-chat/parallel-two-tools-gpt4o.sse"
QUARANTINE_RECORDING = "anthropic/text-then-tool-use.sse"
CALL_EVENTS = ("call.started", "call.delta", "call.ended")

CallKey = tuple[str, str, str, str, str]


def call_key(record: dict[str, Any]) -> CallKey:
    return (
        record["tenant"],
        record["turn_id"],
        record["response_id"],
        record["item_id"],
        record["call_id"],
    )


def say(text: str) -> None:
    print(text, flush=True)


# ----------------------------------------------------------------------------- processes


@dataclass
class Children:
    """Processes this run started, each in its own session; their pids are kept on disk."""

    pidfile: Path
    logs: Path
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append((name, proc))
        with self.pidfile.open("a") as f:
            f.write(f"{proc.pid}\n")
        return proc

    def dead(self) -> list[str]:
        return [f"{name} (exit {p.returncode})" for name, p in self.procs if p.poll() is not None]

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM every child (graceful: workers commit or abort), SIGKILL what outlives grace."""
        for _, proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for name, proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"  {name} did not stop within {grace:.0f} s: SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.pidfile.unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def run_cli(args: list[str], env: dict[str, str], what: str) -> str:
    """Run ``processor ARGS``; return stdout, or raise with its stderr when it fails."""
    done = subprocess.run(
        [PROCESSOR, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise DemoError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    return done.stdout


class DemoError(Exception):
    """The demo cannot go on; the message says why."""


# ----------------------------------------------------------------------------- broker


@dataclass
class Broker:
    bootstrap: str
    started_by: str | None  # "compose" | "kafka-local" | None (already running)


def docker_answers() -> bool:
    if shutil.which("docker") is None or not COMPOSE_FILE.exists():
        return False
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def ensure_broker() -> Broker:
    given = os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or os.environ.get(
        "PROCESSOR_BOOTSTRAP_SERVERS"
    )
    if given:
        say(f"broker: {given} (given; left running)")
        return Broker(given, None)
    STATE.mkdir(exist_ok=True)
    if docker_answers():
        say("broker: docker compose up kafka (a Docker engine answers)")
        subprocess.run(
            ["docker", "compose", "-f", str(COMPOSE_FILE), "up", "-d", "--wait", "kafka"],
            check=True,
        )
        (STATE / "broker").write_text("compose\n")
        return Broker("127.0.0.1:9092", "compose")
    status = subprocess.run(
        [str(KAFKA_LOCAL), "status"], capture_output=True, text=True, check=False
    )
    say(
        "broker: scripts/kafka-local (no Docker engine)"
        + (" (already running)" if status.returncode == 0 else ", starting")
    )
    started = subprocess.run(
        [str(KAFKA_LOCAL), "start"], stdout=subprocess.PIPE, text=True, check=False
    )
    if started.returncode != 0:
        raise DemoError("scripts/kafka-local start failed (see above)")
    bootstrap = started.stdout.strip().splitlines()[-1]
    if status.returncode != 0:
        (STATE / "broker").write_text("kafka-local\n")
        return Broker(bootstrap, "kafka-local")
    return Broker(bootstrap, None)


def stop_broker(started_by: str | None) -> None:
    if started_by == "compose":
        say("stopping the compose broker")
        subprocess.run(["docker", "compose", "-f", str(COMPOSE_FILE), "down", "-v"], check=False)
    elif started_by == "kafka-local":
        say("stopping the broker this run started (scripts/kafka-local stop)")
        subprocess.run([str(KAFKA_LOCAL), "stop"], check=False)
    (STATE / "broker").unlink(missing_ok=True)


# ----------------------------------------------------------------------------- Kafka IO


async def delete_topics(bootstrap: str, prefix: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        names = sorted(t for t in await admin.list_topics() if t.startswith(prefix))
        if names:
            await admin.delete_topics(names)
        return names
    finally:
        await admin.close()


class Publisher:
    """Writes adapter output as a gateway would: ``turn.started`` to control, fragments to
    fragments, both keyed by the turn key (the default partitioner, murmur2)."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.prefix = prefix
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5
        )

    async def __aenter__(self) -> Publisher:
        await self.producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()

    async def publish(self, lines: Iterable[dict[str, Any]]) -> None:
        futures = []
        for event in lines:
            topic = "control" if event["type"] == "turn.started" else "fragments"
            key = f"{event['tenant']}/{event['turn_id']}".encode()
            value = json.dumps(event, separators=(",", ":")).encode()
            futures.append(await self.producer.send(self.prefix + topic, value=value, key=key))
        await asyncio.gather(*futures)


@dataclass
class Outputs:
    """What the pipeline wrote, read committed from its output topics."""

    ledger: dict[CallKey, dict[str, Any]] = field(default_factory=dict)
    status: dict[CallKey, list[str]] = field(default_factory=dict)
    proposals: dict[CallKey, dict[str, Any]] = field(default_factory=dict)
    dispatch: dict[CallKey, dict[str, Any]] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # by dispatch_id
    deadletters: int = 0

    def apply(self, role: str, record: dict[str, Any]) -> None:
        if role == "deadletter":
            self.deadletters += 1
        elif role == "results":
            self.results[record["dispatch_id"]] = record
        elif role == "status":
            self.status.setdefault(call_key(record), []).append(record["state"])
        else:
            getattr(self, role)[call_key(record)] = record


ROLES = ("ledger", "status", "proposals", "dispatch", "results", "deadletter")


async def read_outputs(bootstrap: str, prefix: str, outputs: Outputs) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        role_of: dict[str, str] = {}
        tps = []
        for role in ROLES:
            topic = prefix + role
            role_of[topic] = role
            parts = consumer.partitions_for_topic(topic)
            while not parts:
                await consumer._client.force_metadata_update()
                parts = consumer.partitions_for_topic(topic)
                if not parts:
                    await asyncio.sleep(0.5)
            tps.extend(TopicPartition(topic, p) for p in parts)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while True:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, records in batches.items():
                for record in records:
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        outputs.apply(role_of[tp.topic], json.loads(record.value))
    finally:
        await consumer.stop()


# ----------------------------------------------------------------------------- scenarios


@dataclass
class Turn:
    scenario: str  # recording | cancel | quarantine | confirm
    recording: str
    provider: str
    turn_id: str
    events: list[dict[str, Any]]

    def call_keys(self) -> list[CallKey]:
        keys: dict[CallKey, None] = {}
        for event in self.events:
            if event["type"] in CALL_EVENTS:
                keys[call_key(event)] = None
        return list(keys)

    def split_before_first_end(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Events up to (not including) the first call.ended / response.ended, and the rest."""
        for i, event in enumerate(self.events):
            if event["type"] in ("call.ended", "response.ended"):
                return self.events[:i], self.events[i:]
        return self.events, []


def recordings() -> list[Path]:
    return sorted(
        p
        for p in DATA.rglob("*")
        if p.is_file()
        and p.suffix in RECORDING_SUFFIXES
        and not p.name.endswith(".decoded.jsonl")
        and p.parent.name in PROVIDER_OF_FOLDER
    )


BOOK_SLOT_ARGS = ['{"date":', '"2026-12-24",', '"time":"19:30",', '"party_size":', "4}"]


def book_slot_stream(call_id: str) -> bytes:
    """A small OpenAI chat-completions stream calling ``book_slot`` (needs a confirmation)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {
            "id": "chatcmpl-demo-live",
            "object": "chat.completion.chunk",
            "created": 1764000000,
            "model": "demo",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return "data: " + json.dumps(body) + "\n\n"

    start = {"index": 0, "id": call_id, "type": "function"}
    parts = [
        chunk(
            {
                "role": "assistant",
                "tool_calls": [{**start, "function": {"name": "book_slot", "arguments": ""}}],
            }
        )
    ]
    parts += [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in BOOK_SLOT_ARGS
    ]
    parts += [chunk({}, "tool_calls"), "data: [DONE]\n\n"]
    return "".join(parts).encode()


def adapt(provider: str, turn_id: str, source: Path) -> list[dict[str, Any]]:
    """What ``processor adapt --emit-turn-started`` prints, in-process (one import for all the
    recordings): ``turn.started``, then the adapter's fragment events. A chunk the adapter
    rejects ends the stream's open calls inert (``abort``), as the command does."""
    ctx = TurnContext(tenant=TENANT, turn_id=turn_id, actor=ACTOR)
    adapter = adapter_class(provider)(ctx, now=time.time)
    started = TurnStarted(
        command_id=stable_id("turn.started", TENANT, turn_id),
        issued_by="demo-live",
        issued_at=time.time(),
        tenant=TENANT,
        turn_id=turn_id,
        actor=ACTOR,
    )
    events: list[Any] = [started]
    with source.open("rb") as stream:
        try:
            events.extend(adapt_stream(stream, adapter))
        except AdapterError as exc:
            events.extend(adapter.abort(exc.reason))
    decoded: list[dict[str, Any]] = [json.loads(encode(e)) for e in events]
    return decoded


def prepare_turns(run_id: str, scratch: Path) -> list[Turn]:
    plan: list[tuple[str, str, str, Path]] = []  # scenario, recording, provider, file
    for i, path in enumerate(recordings()):
        rel = path.relative_to(DATA).as_posix()
        plan.append(("recording", rel, PROVIDER_OF_FOLDER[path.parent.name], path))
        if rel == CANCEL_RECORDING:
            plan.append(("cancel", rel, "openai-chat", path))
        if rel == QUARANTINE_RECORDING:
            plan.append(("quarantine", rel, "anthropic", path))
        del i
    booking = scratch / "book-slot.sse"
    booking.write_bytes(book_slot_stream(f"call_book_{run_id}"))
    plan.append(("confirm", "(generated) book_slot", "openai-chat", booking))
    return [
        Turn(
            scenario,
            rel,
            provider,
            f"t{n:02d}-{scenario}",
            adapt(provider, f"t{n:02d}-{scenario}", path),
        )
        for n, (scenario, rel, provider, path) in enumerate(plan, 1)
    ]


# ----------------------------------------------------------------------------- waiting


class Waiter:
    """Waits for a condition on what the pipeline wrote, with a progress line."""

    def __init__(self, children: Children, timeout: float) -> None:
        self.children = children
        self.timeout = timeout
        self.tty = sys.stdout.isatty()

    async def until(self, what: str, done: Callable[[], bool], progress: Callable[[], str]) -> None:
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        last_print = 0.0
        while not done():
            dead = self.children.dead()
            if dead:
                raise DemoError(f"while waiting for {what}: stopped: {', '.join(dead)}")
            now = time.monotonic()
            if now > deadline:
                raise DemoError(f"gave up waiting for {what} ({progress()})")
            line = f"  … {what}: {progress()} ({now - t0:.0f} s)"
            if self.tty:
                print("\r" + line.ljust(100), end="", flush=True)
            elif now - last_print >= 5:
                say(line)
                last_print = now
            await asyncio.sleep(0.25)
        if self.tty:
            print("\r" + " " * 100 + "\r", end="", flush=True)
        say(f"  ✓ {what}: {progress()} ({time.monotonic() - t0:.1f} s)")


# ----------------------------------------------------------------------------- up


async def live(args: argparse.Namespace, broker: Broker, run: Run) -> int:
    env = {
        **os.environ,
        "PROCESSOR_BOOTSTRAP_SERVERS": broker.bootstrap,
        "PROCESSOR_TOPIC_PREFIX": run.prefix,
        "PROCESSOR_METRICS_HOST": "127.0.0.1",
        "PROCESSOR_LOG_LEVEL": "WARNING",
    }
    for noisy in ("KAFKA_BOOTSTRAP_SERVERS",):
        env.pop(noisy, None)
    children = run.children
    waiter = Waiter(children, args.timeout)

    say(f"topics: prefix {run.prefix} ({PARTITIONS} partitions)")
    run.topics_created = True
    run_cli(["topics", "create", "--partitions", str(PARTITIONS)], env, "processor topics create")

    keys, private = run.scratch / "keyring", run.scratch / "operator"
    run_cli(
        ["ctl", "keygen", "--key-id", KEY_ID, "--operator", OPERATOR, "--tenants", TENANT,
         "--out", str(keys)],
        env, "processor ctl keygen",
    )  # fmt: skip
    private.mkdir(mode=0o700)
    pem = private / f"{KEY_ID}.pem"
    (keys / f"{KEY_ID}.pem").rename(pem)
    say(f"operator key {KEY_ID} (processor ctl keygen): workers get the public keyring only")

    ports = []
    for n in range(1, WORKERS + 1):
        port = free_port()
        ports.append(port)
        run.worker_ports.append(port)
        children.start(
            f"worker-{n}",
            [PROCESSOR, "worker", "--tools", str(TOOLS), "--keyring", str(keys),
             "--group-id", run.prefix + "assemblers", "--application-id", run.prefix + "assembler",
             "--metrics-port", str(port)],
            env,
        )  # fmt: skip
    executor_port = free_port()
    children.start(
        "executor",
        [PROCESSOR, "executor", "run", "--handlers", "examples.book_slot_executor:handlers",
         "--app-dir", str(ROOT), "--group", run.prefix + "bookings", "--tools", str(TOOLS),
         "--keyring", str(keys), "--metrics-port", str(executor_port)],
        env,
    )  # fmt: skip
    say(f"started {WORKERS} workers and the example executor (logs in {run.logs})")

    turns = prepare_turns(run.run_id, run.scratch)
    by_scenario = {t.scenario: t for t in turns if t.scenario != "recording"}
    say(
        f"adapted {sum(t.scenario == 'recording' for t in turns)} recordings (processor's adapters)"
    )

    probes = [f"http://127.0.0.1:{p}/readyz" for p in [*ports, executor_port]]
    ready: dict[str, bool] = {}

    def all_ready() -> bool:
        for url in probes:
            if not ready.get(url):
                ready[url] = http_ok(url)
        return all(ready.values())

    await waiter.until(
        "workers and executor ready (/readyz)",
        all_ready,
        lambda: f"{sum(ready.values())}/{len(probes)} ready",
    )

    outputs = Outputs()
    reader = asyncio.create_task(read_outputs(broker.bootstrap, run.prefix, outputs))
    try:
        return await drive(
            turns=turns, by_scenario=by_scenario, outputs=outputs, waiter=waiter, env=env,
            pem=pem, broker=broker, run=run, args=args,
        )  # fmt: skip
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader


async def drive(
    *,
    turns: list[Turn],
    by_scenario: dict[str, Turn],
    outputs: Outputs,
    waiter: Waiter,
    env: dict[str, str],
    pem: Path,
    broker: Broker,
    run: Run,
    args: argparse.Namespace,
) -> int:
    expected = [k for t in turns for k in t.call_keys()]

    def settled() -> str:
        return f"{sum(k in outputs.ledger for k in expected)}/{len(expected)} calls in the ledger"

    async with Publisher(broker.bootstrap, run.prefix) as publisher:
        plain = [t for t in turns if t.scenario == "recording"]
        for turn in plain:
            await publisher.publish(turn.events)
        say(f"published {sum(len(t.events) for t in plain)} events of {len(plain)} recordings")

        # cancellation: the calls are open (their status says preparing), then the user stops
        for scenario in ("cancel", "quarantine"):
            turn = by_scenario[scenario]
            head, rest = turn.split_before_first_end()
            await publisher.publish(head)
            open_calls = [
                k
                for k in turn.call_keys()
                if any(e["type"] in CALL_EVENTS and call_key(e) == k for e in head)
            ]
            await waiter.until(
                f"{scenario}: {turn.turn_id}'s calls open",
                lambda oc=open_calls: all("preparing" in outputs.status.get(k, ()) for k in oc),
                lambda oc=open_calls: f"{sum(k in outputs.status for k in oc)}/{len(oc)} preparing",
            )
            if scenario == "cancel":
                run_cli(
                    ["ctl", "cancel-turn", "--tenant", TENANT, "--turn", turn.turn_id],
                    env, "processor ctl cancel-turn",
                )  # fmt: skip
                say(f"  processor ctl cancel-turn --turn {turn.turn_id}")
            else:
                response = open_calls[0][2]
                run_cli(
                    ["ctl", "quarantine-response", "--tenant", TENANT, "--turn", turn.turn_id,
                     "--response", response, "--reason", "demo: suspicious output",
                     "--key", str(pem), "--key-id", KEY_ID, "--operator", OPERATOR],
                    env, "processor ctl quarantine-response",
                )  # fmt: skip
                say(f"  processor ctl quarantine-response --response {response} (signed {KEY_ID})")
            await waiter.until(
                f"{scenario}: ledger",
                lambda oc=open_calls: all(k in outputs.ledger for k in oc),
                lambda oc=open_calls: f"{sum(k in outputs.ledger for k in oc)}/{len(oc)} settled",
            )
            await publisher.publish(rest)  # the stream goes on: nothing revives those calls

        # confirmation: book_slot waits for the user's yes on the exact digest
        turn = by_scenario["confirm"]
        await publisher.publish(turn.events)
        booking = turn.call_keys()[0]
        await waiter.until(
            "confirm: proposal for book_slot",
            lambda: booking in outputs.proposals,
            lambda: "proposed" if booking in outputs.proposals else "not yet",
        )
        digest = outputs.proposals[booking]["args_digest"]
        tenant, turn_id, response, item, call = booking
        run_cli(
            ["ctl", "confirm", "--tenant", tenant, "--turn", turn_id, "--response", response,
             "--item", item, "--call", call, "--actor", ACTOR, "--digest", digest],
            env, "processor ctl confirm",
        )  # fmt: skip
        say(f"  processor ctl confirm --call {call} --digest {digest[:19]}…")

    def booked() -> bool:
        d = outputs.dispatch.get(booking)
        return d is not None and d["dispatch_id"] in outputs.results

    await waiter.until(
        "every call settled and the booking ran",
        lambda: settled().startswith(f"{len(expected)}/") and booked(),
        lambda: settled() + (", booking result in" if booked() else ", booking pending"),
    )
    rows = summary_rows(turns, outputs)
    print_summary(rows, outputs)
    counters = worker_counters(run.worker_ports)
    print_counters(counters)
    if args.summary_json:
        summary = {"calls": rows, "worker_metrics": counters}
        Path(args.summary_json).write_text(json.dumps(summary, indent=1))
    return 0 if check(rows) else 1


def summary_rows(turns: list[Turn], outputs: Outputs) -> list[dict[str, Any]]:
    rows = []
    for turn in turns:
        for key in turn.call_keys():
            ledger = outputs.ledger[key]
            dispatch = outputs.dispatch.get(key)
            result = outputs.results.get(dispatch["dispatch_id"]) if dispatch else None
            rows.append(
                {
                    "scenario": turn.scenario,
                    "recording": turn.recording,
                    "provider": turn.provider,
                    "turn_id": turn.turn_id,
                    "call_id": key[4],
                    "tool": ledger.get("tool") or "?",
                    "outcome": ledger["state"],
                    "reason": ledger.get("terminal_reason") or "",
                    "dispatch_id": dispatch["dispatch_id"] if dispatch else None,
                    "result": result["outcome"] if result else None,
                    "result_reason": (result or {}).get("reason") or "",
                    "output": (result or {}).get("output"),
                }
            )
    return rows


def check(rows: list[dict[str, Any]]) -> bool:
    def has(scenario: str, test: Callable[[dict[str, Any]], bool]) -> bool:
        return any(r["scenario"] == scenario and test(r) for r in rows)

    checks = {
        "recordings dispatched calls": has("recording", lambda r: r["outcome"] == "dispatched"),
        "the cancelled turn's calls are cancelled": all(
            r["outcome"] == "cancelled" for r in rows if r["scenario"] == "cancel"
        ),
        "the quarantined response's call is cancelled": all(
            r["outcome"] == "cancelled" and r["reason"] == "quarantined"
            for r in rows
            if r["scenario"] == "quarantine"
        ),
        "the confirmed booking ran": has("confirm", lambda r: r["result"] == "succeeded"),
    }
    failed = [name for name, ok in checks.items() if not ok]
    for name in failed:
        say(f"CHECK FAILED: {name}")
    return not failed


def worker_counters(ports: list[int]) -> dict[str, dict[str, float]]:
    """The workers' own counters (``/metrics``), summed over the workers: control commands by
    ``type/outcome``, output records by topic, transactions and aborts."""
    wanted = {
        "toolcall_control_commands_total": ("type", "outcome"),
        "toolcall_output_records_total": ("topic",),
        "toolcall_transactions_total": (),
        "toolcall_transaction_aborts_total": ("cause",),
    }
    counters: dict[str, dict[str, float]] = {name: {} for name in wanted}
    for port in ports:
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted:
                    key = "/".join(sample.labels[label] for label in wanted[sample.name]) or "all"
                    bucket = counters[sample.name]
                    bucket[key] = bucket.get(key, 0.0) + sample.value
    return counters


def print_counters(counters: dict[str, dict[str, float]]) -> None:
    commands = counters["toolcall_control_commands_total"]
    applied = sum(v for k, v in commands.items() if k.endswith("/applied"))
    rejected = sum(v for k, v in commands.items() if k.endswith("/rejected"))
    outputs = counters["toolcall_output_records_total"]
    say(
        f"worker metrics: {outputs.get('dispatch', 0):.0f} dispatch records, "
        f"{sum(counters['toolcall_transactions_total'].values()):.0f} transactions "
        f"({sum(counters['toolcall_transaction_aborts_total'].values()):.0f} aborted), "
        f"control commands {applied:.0f} applied / {rejected:.0f} rejected"
    )


def print_summary(rows: list[dict[str, Any]], outputs: Outputs) -> None:
    say("")
    head = f"  {'provider':<17} {'tool':<22} {'outcome':<11} {'reason':<16} dispatch → result"
    say(head)
    say("─" * (len(head) + 40))
    last = None
    for r in rows:
        if (r["scenario"], r["recording"]) != last:
            last = (r["scenario"], r["recording"])
            label = (
                r["recording"]
                if r["scenario"] == "recording"
                else f"{r['scenario']}: {r['recording']}"
            )
            say(f"\033[1m{label}\033[0m" if sys.stdout.isatty() else f"[{label}]")
        if r["dispatch_id"]:
            if r["result"]:
                out = r["output"] or {}
                detail = ", ".join(f"{k}={v}" for k, v in out.items()) or r["result_reason"]
                tail = f"{r['dispatch_id'][:12]} → {r['result']} {detail}".rstrip()
            else:
                tail = f"{r['dispatch_id'][:12]} → (no handler for {r['tool']} in this executor)"
        else:
            tail = "—"
        tool, reason = r["tool"][:22], r["reason"][:16]
        say(f"  {r['provider']:<17} {tool:<22} {r['outcome']:<11} {reason:<16} {tail}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    say("")
    say(
        f"{len(rows)} calls: "
        + ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        + f"; {sum(1 for r in rows if r['result'])} executed; {outputs.deadletters} dead letters"
    )


# ----------------------------------------------------------------------------- run state


@dataclass
class Run:
    run_id: str
    prefix: str
    scratch: Path
    logs: Path
    children: Children
    topics_created: bool = False
    worker_ports: list[int] = field(default_factory=list)


def new_run(run_id: str | None) -> Run:
    run_id = run_id or time.strftime("%H%M%S") + secrets.token_hex(2)
    prefix = f"demo-live-{run_id}."
    STATE.mkdir(exist_ok=True)
    logs = STATE / run_id
    logs.mkdir(parents=True)
    with (STATE / "runs").open("a") as f:
        f.write(prefix + "\n")
    scratch = Path(tempfile.mkdtemp(prefix="demo-live-"))
    return Run(run_id, prefix, scratch, logs, Children(STATE / f"{run_id}.pids", logs))


def cleanup(run: Run, broker: Broker, keep_topics: bool) -> None:
    say("stopping workers and executor")
    run.children.stop()
    if run.topics_created and not keep_topics:
        try:
            names = asyncio.run(asyncio.wait_for(delete_topics(broker.bootstrap, run.prefix), 30))
            say(f"deleted {len(names)} topics {run.prefix}*")
        except Exception as exc:  # the broker may be gone: make down retries
            why = type(exc).__name__
            say(f"could not delete topics {run.prefix}* ({why}); `make down` retries")
        else:
            forget_run(run.prefix)
    else:
        forget_run(run.prefix)
    shutil.rmtree(run.scratch, ignore_errors=True)
    stop_broker(broker.started_by)


def forget_run(prefix: str) -> None:
    runs = STATE / "runs"
    if runs.exists():
        left = [line for line in runs.read_text().splitlines() if line and line != prefix]
        runs.write_text("".join(f"{line}\n" for line in left))


def up(args: argparse.Namespace) -> int:
    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # our own handlers (asyncio.run then leaves SIGINT alone): Ctrl-C or SIGTERM interrupts
    # whatever runs, a blocking CLI call included, and the finally below stops everything
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    broker = ensure_broker()
    run = new_run(args.run_id)
    code = 1
    try:
        code = asyncio.run(live(args, broker, run))
    except KeyboardInterrupt:
        say("\ninterrupted")
        code = 130
    except DemoError as exc:
        say(f"\nFAILED: {exc}")
        for name, _ in run.children.procs:
            log = run.logs / f"{name}.log"
            tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
            for line in tail:
                say(f"  {name}| {line[:200]}")
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # cleanup is not interrupted half-way
        cleanup(run, broker, keep_topics=args.keep_topics)
        if code == 0:
            shutil.rmtree(run.logs, ignore_errors=True)
        else:
            say(f"logs kept in {run.logs}")
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return code


def down(_: argparse.Namespace) -> int:
    """Stop what an interrupted ``up`` left: its children, its topics, a broker it started."""
    stopped = 0
    for pidfile in STATE.glob("*.pids") if STATE.exists() else ():
        for line in pidfile.read_text().split():
            pid = int(line)
            try:  # only our own children: a processor command with a demo-live topic prefix
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if b"processor" in cmdline and b"PROCESSOR_TOPIC_PREFIX=demo-live-" in environ:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGTERM)
                    stopped += 1
        pidfile.unlink()
    say(f"stopped {stopped} leftover processes")
    runs = STATE / "runs"
    prefixes = runs.read_text().split() if runs.exists() else []
    broker_file = STATE / "broker"
    started_by = broker_file.read_text().strip() if broker_file.exists() else None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or "127.0.0.1:9092"
    for prefix in prefixes:
        try:
            names = asyncio.run(asyncio.wait_for(delete_topics(bootstrap, prefix), 20))
            say(f"deleted {len(names)} topics {prefix}*")
            forget_run(prefix)
        except Exception as exc:
            say(f"could not delete topics {prefix}* on {bootstrap} ({type(exc).__name__})")
    stop_broker(started_by)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", nargs="?", choices=["up", "down"], default="up")
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds any one wait may take before giving up",
    )
    parser.add_argument("--summary-json", help="also write the summary rows to this file")
    parser.add_argument("--run-id", help="names the topics demo-live-<run id>. (default: random)")
    parser.add_argument("--keep-topics", action="store_true", help="leave the run's topics")
    args = parser.parse_args(argv)
    return up(args) if args.action == "up" else down(args)


if __name__ == "__main__":
    sys.exit(main())
