"""One chaos run: a broker, topics, N workers, the seeded load, the seeded faults, the verdict.

``run(options)`` is what both the short test (``test_chaos_short.py``, on the shared broker,
worker faults only) and the long runs (``python -m tests.chaos``, a broker of its own so it can
be killed) call. Workers run with the product's default timeouts (session 10 s, heartbeat 1 s,
transaction 9 s), so the recovery it measures is what a deployment gets.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from processor.core.policy import Limits
from processor.kafka import hanging
from processor.kafka.clients import admin_client
from processor.settings import Settings
from tests.chaos.checker import Verdict, check, read_topic
from tests.chaos.executors import (
    ExecutionVerdict,
    Executors,
    check_executions,
    settle_executions,
)
from tests.chaos.faults import WORKER_KINDS, Broker, Cluster, Fault, FaultKind, schedule
from tests.chaos.trail import trail
from tests.chaos.workload import BOOKING_TOOL_YAML, Driver, Expect, Plan
from tests.integration.conftest import Runtime

DEFAULT_TIMEOUTS = {
    "PROCESSOR_SESSION_TIMEOUT_MS": "10000",
    "PROCESSOR_HEARTBEAT_INTERVAL_MS": "1000",
    "PROCESSOR_TRANSACTION_TIMEOUT_MS": "9000",
    "PROCESSOR_COMMIT_TIMEOUT_SECONDS": "7",
}


@dataclass
class Options:
    seed: int
    turns: int
    duration: float  # seconds over which the load is written
    workers: int = 2
    partitions: int = 6
    faults: int = 7
    kinds: list[FaultKind] = field(default_factory=lambda: list(WORKER_KINDS))
    bootstrap: str | None = None  # the shared broker; None: start one of the run's own
    workdir: Path = Path("/tmp/chaos")
    broker_port: int = 19292  # client ports from here; controller ports after them
    brokers: int = 1  # brokers of the run's own: 1, or a cluster (scripts/kafka-local --nodes)
    settle_seconds: float = 180.0  # after the load: how long the calls may take to drain
    keep: bool = False  # keep the topics (and the broker's data dir) to inspect a failed run
    worker_env: dict[str, str] = field(default_factory=dict)  # more PROCESSOR_* for workers
    executors: int = 0  # members of one executor group running every tool (tests.chaos.executors)
    executor_faults: int = 0
    executors_mcp: bool = False  # the executors run `executor mcp` (tests.chaos.mcp_effects)
    executor_kinds: list[FaultKind] = field(
        default_factory=lambda: [FaultKind.KILL, FaultKind.STOP, FaultKind.TERM]
    )


@dataclass
class Report:
    options: Options
    verdict: Verdict
    faults: list[Fault]
    unexpected_exits: list[tuple[str, int]]
    seconds: float
    fates: dict[str, int]
    prefix: str = ""
    executions: ExecutionVerdict | None = None
    # topic → (replicas, min.insync.replicas) at the end: the run's topics and the internal ones
    replication: dict[str, tuple[int, str]] = field(default_factory=dict)
    # the load generator as a gateway: turns with a failed write, its producers' renewals
    gateway: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict.ok and (self.executions is None or self.executions.ok)

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.options.seed,
            "brokers": self.options.brokers if self.options.bootstrap is None else "shared",
            "turns": self.options.turns,
            "workers": self.options.workers,
            "partitions": self.options.partitions,
            "faults": [
                f"{f.kind}@{f.at:.0f}s"
                + ("" if f.role == "worker" else f" ({f.role})")
                + (f" [{f.worker}]" if f.kind.on_broker else "")
                for f in self.faults
            ],
            "fates": self.fates,
            "seconds": round(self.seconds, 1),
            "unexpected_exits": self.unexpected_exits,
            "prefix": self.prefix,
            "verdict": self.verdict.summary(),
            "recovery": self.verdict.recovery,
            "ledger_reasons": self.verdict.ledger_reasons,
            "executions": None if self.executions is None else self.executions.summary(),
            "replication": self.replication,
            "gateway": self.gateway,
        }


async def run(options: Options) -> Report:
    started = time.monotonic()
    options.workdir.mkdir(parents=True, exist_ok=True)
    broker: Broker | None = None
    if options.bootstrap is None:
        ports = options.broker_port, options.broker_port + options.brokers
        broker = Broker(options.workdir / "broker", *ports, nodes=options.brokers)
        await broker.start()
        bootstrap = broker.bootstrap
    else:
        bootstrap = options.bootstrap
        assert not any(k.on_broker for k in options.kinds), "never fault the shared broker"
    if options.brokers < 3:
        assert not any(k.needs_cluster for k in options.kinds), "these faults need 3 brokers"
    prefix = f"chaos{options.seed}x{uuid.uuid4().hex[:6]}."
    runtime = Runtime(bootstrap, prefix, options.workdir, options.partitions)
    with (options.workdir / "tools.yaml").open("a") as tools:
        tools.write(BOOKING_TOOL_YAML)  # the confirming fates' tool
    # with executors, a quarter of the normal turns are cancelled right after their end
    plan = Plan.generate(options.seed, options.turns, after_end=0.25 if options.executors else 0.0)
    faults = schedule(
        options.seed, options.faults, options.duration, options.kinds, options.workers
    )
    cluster = Cluster(runtime, options.workers, {**DEFAULT_TIMEOUTS, **options.worker_env}, broker)
    executors = Executors(
        runtime,
        options.workdir / f"effects-{prefix.rstrip('.')}.jsonl",
        mcp=options.executors_mcp,
    )
    members = Cluster(
        runtime,
        options.executors,
        DEFAULT_TIMEOUTS,
        spawner=lambda slot: executors.spawn(slot, DEFAULT_TIMEOUTS),
        before_signal=executors.inside_handler,
    )
    if options.executors:
        faults += schedule(
            options.seed,
            options.executor_faults,
            options.duration,
            options.executor_kinds,
            options.executors,
            role="executor",
        )
        faults.sort(key=lambda f: f.at)
    driver = Driver(runtime.settings, plan, options.duration)
    executions = None
    try:
        await runtime.create_topics()
        if options.executors and options.executors_mcp:
            await executors.prepare_mcp()
        await asyncio.gather(cluster.start(), members.start())
        load = asyncio.create_task(driver.run())
        t0 = time.monotonic()
        for fault in faults:
            await asyncio.sleep(max(0.0, t0 + fault.at - time.monotonic()))
            await (members if fault.role == "executor" else cluster).apply(fault, driver.paused)
        await load
        await _settle(runtime, plan, options.settle_seconds)
        if options.executors:
            await settle_executions(runtime.settings, executors.group, options.settle_seconds)
        exits = list(cluster.unexpected_exits) + list(members.unexpected_exits)
        # Stop every writer first: one transaction writes a call's ledger and status records,
        # but the checker reads the topics one after another, so a transaction committed
        # between two reads (an idle timeout firing at the end of a run) would show a status
        # without its ledger entry. With no worker left, the reads are one consistent cut.
        await asyncio.gather(cluster.close(), members.close())
        if options.executors:
            executions = await check_executions(
                runtime.settings, executors.effects, executors.group, faults
            )
        open_txns = await _open_transactions(runtime.settings)
        worker_faults = [f for f in faults if f.role == "worker"]
        replication = await _replication(runtime.settings)
        verdict = await check(
            runtime.settings,
            plan,
            worker_faults,
            driver.cancels,
            executions.status_ids if executions is not None else frozenset(),
            proposal_timeouts=driver.proposal_timeouts,
            binding_wait=_binding_wait(options.worker_env),
        )
        verdict.open_transactions = open_txns
        # where each lost call stopped: its inputs and changelog records, while the topics exist
        for detail, found in zip(
            verdict.lost_details, await trail(runtime.settings, plan, verdict.lost), strict=False
        ):
            detail["trail"] = found
    finally:
        await asyncio.gather(cluster.close(), members.close())
        if options.keep:
            for worker in runtime.workers:
                worker.close()
        else:
            await runtime.close()
        if broker is not None:
            # brokers of the run's own: with ``keep`` stopped cleanly (their data is inspected);
            # else no one starts them on their data again (a run starts from an empty work dir),
            # so they are ended at once: a clean stop of a cluster takes seconds per node, and
            # up to 30 s when a node waits for a quorum that is gone
            await (broker.stop() if options.keep else broker.kill())
    fates: dict[str, int] = {}
    for turn in plan.turns:
        fates[turn.fate] = fates.get(turn.fate, 0) + 1
    return Report(
        options,
        verdict,
        faults,
        exits,
        time.monotonic() - started,
        fates,
        prefix,
        executions,
        replication,
        driver.gateway(),
    )


async def _open_transactions(settings: Settings) -> list[tuple[str, int, int]]:
    """The transactions open on the run's topics (every member stopped): hanging ones. One
    still open is looked at again after a transaction timeout (and the broker's abort
    interval): a member killed shortly before leaves its transaction to the coordinator's
    timeout, and only what outlives that is reported."""
    producer = AIOKafkaProducer(**settings.kafka_client_kwargs())
    await producer.start()
    try:
        partitions = await hanging.partitions_of(producer.client, settings.topics.all().values())
        found = await hanging.describe_open_transactions(producer.client, partitions)
        if found:
            await asyncio.sleep(settings.transaction_timeout_ms / 1000 + 3)
            found = await hanging.describe_open_transactions(producer.client, partitions)
    finally:
        await producer.stop()
    return [(f"{t.topic}-{t.partition}", t.producer_id, t.start_offset) for t in found]


def _binding_wait(worker_env: dict[str, str]) -> float:
    """The workers' binding wait: the checker excuses a late binding only past it."""
    value = worker_env.get("PROCESSOR_LIMITS__BINDING_WAIT_SECONDS")
    return float(value) if value else Limits.binding_wait_seconds


async def _replication(settings: Settings) -> dict[str, tuple[int, str]]:
    """(replicas, min.insync.replicas) of the run's topics and the internal ones that exist."""
    names = [*settings.topics.all().values(), "__consumer_offsets", "__transaction_state"]
    async with admin_client(settings) as admin:
        described = [t for t in await admin.describe_topics(names) if t["partitions"]]
        key = "min.insync.replicas"
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, t["topic"], {key: None}) for t in described
        ]
        isr: dict[str, str] = {}
        for response in await admin.describe_configs(resources):
            for _code, _msg, _type, name, entries in response.resources:
                for entry in entries:
                    if entry[0] == key:
                        isr[name] = entry[1]
    return {
        t["topic"]: (min(len(p["replicas"]) for p in t["partitions"]), isr.get(t["topic"], "?"))
        for t in described
    }


async def _settle(runtime: Runtime, plan: Plan, timeout: float) -> None:
    """Wait until every call that must act was dispatched and the group caught up (or timeout:
    the checker then reports what is missing)."""
    must = {k for k, e in plan.expectations().items() if e is Expect.ONCE}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dispatched = {
            (r["tenant"], r["turn_id"], r["call_id"])
            for _, _, r in await read_topic(runtime.settings, "dispatch")
        }
        if must <= dispatched and await runtime.caught_up():
            return
        await asyncio.sleep(2)
