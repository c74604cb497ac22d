"""The chaos suite's seeded fault schedule and the cluster it is applied to.

Faults (each recorded with its wall-clock time, so the checker can measure recovery):

* ``kill``: SIGKILL a worker; it is started again a second later (as a pod would be).
* ``term``: SIGTERM a worker (graceful: it leaves the group); started again once it exited.
* ``stop``: SIGSTOP a worker for longer than the session *and* the transaction timeout, then
  SIGCONT: a zombie whose open transaction times out and whose producer must be fenced.
* For the run's executors (``role="executor"``, :mod:`tests.chaos.executors`) the same three;
  each waits until a member is inside a batch of handlers (several side effects written, their
  outcomes not), and signals that one.
* ``broker``: ``kill -9`` the broker (on a cluster: every broker at once), restart it on the
  same data dir (only with brokers of the suite's own: never the shared one the other tests use).
  The load pauses while no broker answers.

On a cluster of the suite's own (``Broker(nodes=3)``: ``scripts/kafka-local --nodes 3``) four more,
during which the load goes on (the cluster must keep serving):

* ``leader``: ``kill -9`` the broker that leads the most ``dispatch``/``fragments``/changelog
  partitions; restart it after :attr:`Cluster.broker_down_seconds`.
* ``controller``: ``kill -9`` the active controller's node (combined roles: a broker too);
  restart it the same way.
* ``zombie``: SIGSTOP the broker that leads the most of those partitions for
  :attr:`Cluster.broker_stop_seconds`, past the broker session timeout (6 s) and the replica lag
  time (10 s): its partitions move and it leaves the ISR; then SIGCONT. It must rejoin without
  serving stale data.
* ``rolling``: restart every broker in turn (SIGTERM: a controlled shutdown; start; wait until
  every replica of the run's topics and the internal topics is back in sync), as an upgrade does.

:class:`Cluster` also supervises: a worker that exits on its own is recorded and restarted, the
way a Deployment would, so a run measures the product, not the harness.
"""

from __future__ import annotations

import asyncio
import enum
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from processor.kafka.clients import admin_client
from processor.settings import Settings
from tests.integration.conftest import REPO_ROOT, Runtime, WorkerProcess


class FaultKind(enum.StrEnum):
    KILL = "kill"
    TERM = "term"
    STOP = "stop"
    BROKER = "broker"
    LEADER = "leader"
    CONTROLLER = "controller"
    ZOMBIE = "zombie"
    ROLLING = "rolling"

    @property
    def on_broker(self) -> bool:
        """A fault of the brokers (needs brokers of the suite's own), not of a worker."""
        return self not in (FaultKind.KILL, FaultKind.TERM, FaultKind.STOP)

    @property
    def needs_cluster(self) -> bool:
        """A fault that leaves a quorum standing: only on a cluster of three or more."""
        return self.on_broker and self is not FaultKind.BROKER


WORKER_KINDS: Final = [FaultKind.KILL, FaultKind.STOP, FaultKind.TERM]
CLUSTER_KINDS: Final = [
    FaultKind.LEADER,
    FaultKind.CONTROLLER,
    FaultKind.ZOMBIE,
    FaultKind.ROLLING,
    FaultKind.BROKER,
]


def default_kinds(brokers: int) -> list[FaultKind]:
    """Every fault a topology of ``brokers`` brokers of the suite's own can take."""
    return [*WORKER_KINDS, *(CLUSTER_KINDS if brokers >= 3 else [FaultKind.BROKER])]


@dataclass
class Fault:
    kind: FaultKind
    at: float  # seconds after the load started, planned
    target: int  # worker slot (ignored for broker)
    happened_at: float = 0.0  # time.time() when applied
    back_at: float = 0.0  # time.time() when the faulted part was running again
    worker: str = ""
    role: str = "worker"  # or "executor": a member of the run's executor group
    pid: int = 0  # the faulted process (worker or executor member), once applied


def schedule(
    seed: int,
    count: int,
    duration: float,
    kinds: list[FaultKind],
    workers: int,
    role: str = "worker",
) -> list[Fault]:
    """``count`` faults spread over the load, each kind at least once when count allows."""
    rng = random.Random(f"faults/{seed}" if role == "worker" else f"faults/{role}/{seed}")
    picked = list(kinds) + [rng.choice(kinds) for _ in range(max(0, count - len(kinds)))]
    picked = picked[:count]
    rng.shuffle(picked)
    # evenly spaced with jitter, leaving the first and last tenth of the load fault-free
    span = duration * 0.8 / max(1, count)
    return [
        Fault(
            kind,
            duration * 0.1 + i * span + rng.uniform(0, span * 0.3),
            rng.randrange(workers),
            role=role,
        )
        for i, kind in enumerate(picked)
    ]


# JVM flags of a test's own brokers: the client compiler only, a start in less CPU (a cluster's
# three JVMs start side by side on two cores) for throughput a test's small load does not need.
# The chaos runs (a load during broker faults; the long runs' figures are quoted) keep the JVM's
# defaults: a slower broker would change what they measure.
QUICK_START_JVM: Final = "-XX:TieredStopAtLevel=1"


def free_port_base(count: int = 6, start: int = 29300) -> int:
    """A port from which ``count`` consecutive loopback ports are free (a cluster's client and
    controller ports: ``Broker(port=base, controller_port=base + nodes, nodes=...)``)."""
    for base in range(start, start + 2000, count):
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {count} free consecutive ports")


@dataclass
class Broker:
    """Brokers of the suite's own: ``scripts/kafka-local`` with its own dir and ports; with
    ``nodes`` > 1 a cluster (``--nodes``), node i on client port ``port + i - 1`` and controller
    port ``controller_port + i - 1``."""

    directory: Path
    port: int
    controller_port: int
    nodes: int = 1
    jvm_flags: str = ""  # more JVM flags for the brokers (KAFKA_LOCAL_JVM_FLAGS)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + i}" for i in range(self.nodes))

    def _run(self, command: str, *args: str, node: int | None = None) -> str:
        env = dict(os.environ)
        env.update(
            KAFKA_LOCAL_DIR=str(self.directory),
            KAFKA_LOCAL_PORT=str(self.port),
            KAFKA_LOCAL_CONTROLLER_PORT=str(self.controller_port),
            KAFKA_LOCAL_NODES=str(self.nodes),
            KAFKA_LOCAL_JVM_FLAGS=self.jvm_flags,
        )
        # the script's python must have aiokafka (readiness, ``leaders``); a worktree has no
        # .venv of its own, and the system python3 it would fall back to has none
        env.setdefault("KAFKA_LOCAL_PYTHON", sys.executable)
        extra = [] if node is None else ["--node", str(node)]
        done = subprocess.run(
            [str(REPO_ROOT / "scripts" / "kafka-local"), command, *args, *extra],
            env=env,
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:  # say why: a harness failure must not look like the product's
            raise RuntimeError(
                f"kafka-local {command} {' '.join(args)} exited {done.returncode}: "
                f"{done.stderr.strip()[-500:]}"
            )
        return done.stdout

    async def _do(self, command: str, *args: str, node: int | None = None) -> str:
        return await asyncio.to_thread(self._run, command, *args, node=node)

    async def start(self, node: int | None = None) -> None:
        libs = REPO_ROOT / ".kafka" / "libs"
        mine = self.directory / "libs"
        if libs.is_dir() and not mine.exists():  # the shared broker's jars: no second resolve
            self.directory.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(subprocess.run, ["cp", "-r", str(libs), str(mine)], check=True)
        await self._do("start", node=node)

    async def kill(self, node: int | None = None) -> None:
        await self._do("kill", node=node)

    async def stop(self, node: int | None = None) -> None:
        await self._do("stop", node=node)

    async def pause(self, node: int) -> None:
        await self._do("pause", node=node)

    async def resume(self, node: int) -> None:
        await self._do("resume", node=node)

    async def controller(self) -> int:
        """The node id of the active controller."""
        return int((await self._do("controller")).strip())

    async def most_leaders(self, topics: list[str]) -> int:
        """The node that leads the most partitions of ``topics`` (the lowest id on a tie)."""
        lines = (await self._do("leaders", *topics)).split("\n")
        led = [tuple(int(x) for x in line.split()) for line in lines if line.strip()]
        return max(led, key=lambda pair: (pair[1], -pair[0]))[0]

    async def wait_in_sync(self, settings: Settings, timeout: float = 120.0) -> bool:
        """Until every replica of the run's topics and the internal topics is in sync."""
        names = [*settings.topics.all().values(), "__consumer_offsets", "__transaction_state"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                async with admin_client(settings) as admin:
                    described = await admin.describe_topics(names)
                if all(
                    len(p["isr"]) == len(p["replicas"]) and p["leader"] >= 0
                    for t in described
                    for p in t["partitions"]
                ):
                    return True
            except Exception:  # a broker between two states: ask again
                pass
            await asyncio.sleep(1)
        return False


@dataclass
class Cluster:
    """N worker slots on one runtime; restarts what dies; applies faults. With ``spawner`` the
    slots hold what it starts (the run's executors) instead of workers."""

    runtime: Runtime
    size: int
    env: dict[str, str]
    broker: Broker | None = None
    spawner: Callable[[int], WorkerProcess] | None = None
    # awaited before a SIGKILL, SIGSTOP or SIGTERM; returns the slot to signal instead of the
    # planned one (executors: a member seen inside a batch of handlers), or None to keep it
    before_signal: Callable[[list[WorkerProcess]], Awaitable[int | None]] | None = None
    stop_seconds: float = 14.0  # > session timeout (10 s) and transaction timeout (9 s)
    broker_down_seconds: float = 5.0  # a killed broker of a cluster restarts after this
    broker_stop_seconds: float = 16.0  # > broker session (6 s) and replica lag (10 s) timeouts
    slots: list[WorkerProcess] = field(default_factory=list)
    unexpected_exits: list[tuple[str, int]] = field(default_factory=list)
    _generation: int = 0
    _held: set[int] = field(default_factory=set)  # slots a fault is handling
    _supervisor: asyncio.Task[None] | None = None

    def _spawn(self, slot: int) -> WorkerProcess:
        if self.spawner is not None:
            return self.spawner(slot)
        self._generation += 1
        # each slot keeps its local state stores across restarts, as a pod keeps its volume
        state = {"PROCESSOR_STATE_DIR": str(self.runtime.tmp_path / f"state-{slot}")}
        return self.runtime.start_worker(f"w{slot}-{self._generation}", **{**state, **self.env})

    async def start(self) -> None:
        self.slots = [self._spawn(i) for i in range(self.size)]
        await asyncio.gather(*(w.wait_ready(timeout=120) for w in self.slots))
        self._supervisor = asyncio.create_task(self._supervise())

    async def _supervise(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            for i, worker in enumerate(self.slots):
                if i not in self._held and worker.proc.poll() is not None:
                    self.unexpected_exits.append((worker.name, worker.proc.returncode))
                    self.slots[i] = self._spawn(i)

    async def apply(self, fault: Fault, paused: asyncio.Event) -> None:
        fault.happened_at = time.time()
        if fault.kind.on_broker:
            await self._broker_fault(fault, paused)
            fault.back_at = time.time()
            return
        slot = fault.target % self.size
        if self.before_signal is not None:
            busy = await self.before_signal(list(self.slots))
            slot = slot if busy is None or busy in self._held else busy
        self._held.add(slot)
        try:
            worker = self.slots[slot]
            fault.worker = worker.name
            fault.pid = worker.proc.pid
            fault.happened_at = time.time()  # the signal's time (a kill may have waited above)
            if fault.kind is FaultKind.KILL:
                worker.kill()
                await worker.wait_exit(30)
                await asyncio.sleep(1)
                self.slots[slot] = self._spawn(slot)
            elif fault.kind is FaultKind.TERM:
                worker.terminate()
                await worker.wait_exit(60)
                self.slots[slot] = self._spawn(slot)
            elif fault.kind is FaultKind.STOP:
                worker.proc.send_signal(19)  # SIGSTOP
                await asyncio.sleep(self.stop_seconds)
                worker.proc.send_signal(18)  # SIGCONT
            fault.back_at = time.time()
        finally:
            self._held.discard(slot)

    async def _broker_fault(self, fault: Fault, paused: asyncio.Event) -> None:
        broker = self.broker
        assert broker is not None, "broker faults need brokers of the suite's own"
        assert broker.nodes >= 3 or not fault.kind.needs_cluster, f"{fault.kind} needs 3 brokers"
        topics = self.runtime.settings.topics
        busiest = [topics.output("dispatch"), topics.fragments, topics.changelog]
        if fault.kind is FaultKind.BROKER:  # every broker: the load waits for them
            fault.worker = "all brokers"
            paused.clear()
            try:
                await broker.kill()
                await asyncio.sleep(2)
                await broker.start()
            finally:
                paused.set()
        elif fault.kind in (FaultKind.LEADER, FaultKind.CONTROLLER):
            if fault.kind is FaultKind.LEADER:
                node = await broker.most_leaders(busiest)
            else:
                node = await broker.controller()
            fault.worker = f"broker-{node}"
            fault.happened_at = time.time()
            await broker.kill(node)
            await asyncio.sleep(self.broker_down_seconds)
            await broker.start(node)
        elif fault.kind is FaultKind.ZOMBIE:
            node = await broker.most_leaders(busiest)
            fault.worker = f"broker-{node}"
            fault.happened_at = time.time()
            await broker.pause(node)
            try:
                await asyncio.sleep(self.broker_stop_seconds)
            finally:
                await broker.resume(node)
            await broker.start(node)  # returns once it is registered again
        elif fault.kind is FaultKind.ROLLING:
            fault.worker = "every broker in turn"
            for node in range(1, broker.nodes + 1):
                await broker.stop(node)
                await broker.start(node)
                await broker.wait_in_sync(self.runtime.settings)

    async def close(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
        for worker in self.slots:
            worker.terminate()
        for worker in self.slots:
            try:
                await worker.wait_exit(30)
            except AssertionError:
                worker.kill()
