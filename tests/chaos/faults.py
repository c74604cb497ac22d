"""The chaos suite's seeded fault schedule and the cluster it is applied to.

Faults (each recorded with its wall-clock time, so the checker can measure recovery):

* ``kill``: SIGKILL a worker; it is started again a second later (as a pod would be).
* ``term``: SIGTERM a worker (graceful: it leaves the group); started again once it exited.
* ``stop``: SIGSTOP a worker for longer than the session *and* the transaction timeout, then
  SIGCONT: a zombie whose open transaction times out and whose producer must be fenced.
* For the run's executors (``role="executor"``, :mod:`tests.chaos.executors`) the same three; a
  ``kill`` waits until a member is inside a handler, between its side effect and its outcome,
  and kills that one.
* ``broker``: ``kill -9`` the broker, restart it on the same data dir (only with a broker of the
  suite's own: never the shared one the other tests use).

:class:`Cluster` also supervises: a worker that exits on its own is recorded and restarted, the
way a Deployment would, so a run measures the product, not the harness.
"""

from __future__ import annotations

import asyncio
import enum
import os
import random
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.conftest import REPO_ROOT, Runtime, WorkerProcess


class FaultKind(enum.StrEnum):
    KILL = "kill"
    TERM = "term"
    STOP = "stop"
    BROKER = "broker"


@dataclass
class Fault:
    kind: FaultKind
    at: float  # seconds after the load started, planned
    target: int  # worker slot (ignored for broker)
    happened_at: float = 0.0  # time.time() when applied
    back_at: float = 0.0  # time.time() when the faulted part was running again
    worker: str = ""
    role: str = "worker"  # or "executor": a member of the run's executor group


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


@dataclass
class Broker:
    """A broker of the suite's own (``scripts/kafka-local`` with its own dir and ports)."""

    directory: Path
    port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self, command: str) -> None:
        env = dict(os.environ)
        env.update(
            KAFKA_LOCAL_DIR=str(self.directory),
            KAFKA_LOCAL_PORT=str(self.port),
            KAFKA_LOCAL_CONTROLLER_PORT=str(self.controller_port),
        )
        subprocess.run(
            [str(REPO_ROOT / "scripts" / "kafka-local"), command],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def start(self) -> None:
        libs = REPO_ROOT / ".kafka" / "libs"
        mine = self.directory / "libs"
        if libs.is_dir() and not mine.exists():  # the shared broker's jars: no second resolve
            self.directory.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(subprocess.run, ["cp", "-r", str(libs), str(mine)], check=True)
        await asyncio.to_thread(self._run, "start")

    async def kill(self) -> None:
        await asyncio.to_thread(self._run, "kill")

    async def stop(self) -> None:
        await asyncio.to_thread(self._run, "stop")


@dataclass
class Cluster:
    """N worker slots on one runtime; restarts what dies; applies faults. With ``spawner`` the
    slots hold what it starts (the run's executors) instead of workers."""

    runtime: Runtime
    size: int
    env: dict[str, str]
    broker: Broker | None = None
    spawner: Callable[[int], WorkerProcess] | None = None
    # awaited before a SIGKILL; returns the slot to kill instead of the planned one (executors:
    # the first member seen inside a handler), or None to keep it
    before_kill: Callable[[list[WorkerProcess]], Awaitable[int | None]] | None = None
    stop_seconds: float = 14.0  # > session timeout (10 s) and transaction timeout (9 s)
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
        if fault.kind is FaultKind.BROKER:
            assert self.broker is not None, "broker faults need a broker of the suite's own"
            paused.clear()
            try:
                await self.broker.kill()
                await asyncio.sleep(2)
                await self.broker.start()
            finally:
                paused.set()
            fault.back_at = time.time()
            return
        slot = fault.target % self.size
        if fault.kind is FaultKind.KILL and self.before_kill is not None:
            busy = await self.before_kill(list(self.slots))
            slot = slot if busy is None or busy in self._held else busy
        self._held.add(slot)
        try:
            worker = self.slots[slot]
            fault.worker = worker.name
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
