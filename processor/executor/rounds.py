"""The executor's rounds in flight: claims and flushes of disjoint partitions, side by side.

Owns :class:`RoundGate` and :class:`Rounds`. A *round* is what the loop does with some dispatch
partitions and then awaits: a claim round (their records in hand through the fence, one claim
transaction each, their calls started) or a flush (the ends of finished calls, kept ends,
offsets, sweeps). Rounds of different partitions run side by side: each partition has its own
transactional producer and ledger partition, so one partition's transaction no longer holds up
the others' (issue 39: a no-op backlog ran in rounds of ~64 calls one after the other, each a
barrier read, a transaction and a second barrier read, while the other partitions waited).

- A partition is in at most one round at a time (:attr:`Rounds.busy`): its transactions stay
  one after the other on its producer, in order (a claimed call's kept end before the next
  claims), and no two rounds decide its records.
- A rebalance (a take, a release, a retake after a fence, the release of every partition on
  stop) runs alone (:meth:`RoundGate.alone`): it waits for the rounds in flight, and no round
  starts while it waits or runs. So a round never sees a partition taken or released under it.
- The stall watchdog counts the oldest round in flight: a round that waits on the broker for
  ever stalls the executor as a loop that did so used to, even while the loop goes on polling.

Must not decide about a record nor write anything: the loop (``client.py``) says what each round
does, and its round applies its own results before it ends (so a rebalance that was waiting
for it sees them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

from processor.observability.logging import fields

__all__ = ["RoundGate", "Rounds"]

log = logging.getLogger("processor.executor.client")  # one logger for all the client's parts


class RoundGate:
    """Rounds side by side, or one rebalance alone (a shared/exclusive lock that lets a
    waiting rebalance in before any new round)."""

    def __init__(self) -> None:
        self._rounds = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._alone = asyncio.Lock()
        self._waiting = 0  # rebalances waiting for the gate

    @property
    def rounds(self) -> int:
        return self._rounds

    def open(self) -> bool:
        """Whether a round may start now: no rebalance runs or waits."""
        return not self._waiting and not self._alone.locked()

    def enter(self) -> None:
        """A round starts (synchronously, so that no rebalance can come in between the check
        and the start)."""
        if not self.open():
            raise RuntimeError("a rebalance runs or waits: no round may start")
        self._rounds += 1
        self._idle.clear()

    def leave(self) -> None:
        self._rounds -= 1
        if not self._rounds:
            self._idle.set()

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """Run a rebalance alone: after the rounds in flight, before any new one."""
        self._waiting += 1
        try:
            await self._alone.acquire()
        finally:
            self._waiting -= 1
        try:
            await self._idle.wait()
            yield
        finally:
            self._alone.release()


@dataclass
class _Round:
    partitions: frozenset[int]
    what: str
    started: float


class Rounds:
    """The rounds in flight: their tasks, the partitions each holds, their results."""

    def __init__(self, gate: RoundGate) -> None:
        self.gate = gate
        self.busy: set[int] = set()  # partitions in a round now
        self._rounds: dict[asyncio.Task[bool], _Round] = {}

    def __len__(self) -> int:
        return len(self._rounds)

    @property
    def tasks(self) -> set[asyncio.Task[bool]]:
        return set(self._rounds)

    def start(self, partitions: set[int], work: Coroutine[Any, Any, bool], what: str) -> None:
        """Run ``work`` on ``partitions`` (none of them busy; the gate open). Its result, True
        when the executor is to stop, comes back from :meth:`reap`."""
        if partitions & self.busy:
            work.close()
            raise RuntimeError(f"partitions {sorted(partitions & self.busy)} are in a round")
        try:
            self.gate.enter()
        except RuntimeError:
            work.close()
            raise
        self.busy |= partitions
        held = frozenset(partitions)
        task = asyncio.create_task(work)
        # when it ends, however: a task cancelled before its first step never runs its body
        task.add_done_callback(lambda _task: self._ended(held, work))
        self._rounds[task] = _Round(held, what, time.monotonic())

    def _ended(self, partitions: frozenset[int], work: Coroutine[Any, Any, bool]) -> None:
        work.close()  # a round cancelled before it began was never awaited
        self.busy -= partitions
        self.gate.leave()

    def reap(self) -> bool:
        """Forget the rounds that ended; True when one of them says the executor is to stop.
        A round that raised raises here (the loop ends with it)."""
        stop = False
        for task in [t for t in self._rounds if t.done()]:
            del self._rounds[task]
            if task.cancelled():
                continue
            stop = task.result() or stop
        return stop

    def oldest(self) -> tuple[float, str] | None:
        """The seconds the oldest round in flight has run, and what it does."""
        if not self._rounds:
            return None
        first = min(self._rounds.values(), key=lambda r: r.started)
        return time.monotonic() - first.started, first.what

    def cancel(self) -> None:
        """Cancel every round in flight (the loop is cancelled, a stall, or failed)."""
        for task in self._rounds:
            task.cancel()

    async def settle(self) -> None:
        """Wait for every round in flight (the loop is ending); if that wait is cancelled (a
        stall, or the executor abandoned), cancel them."""
        tasks = set(self._rounds)
        if not tasks:
            return
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=10.0)
            raise
        finally:
            for task in tasks:
                info = self._rounds.pop(task, None)
                if task.done() and not task.cancelled() and task.exception() is not None:
                    log.error(
                        "a round failed while the executor stopped",
                        extra=fields(
                            round=info.what if info else "",
                            error=type(task.exception()).__name__,
                        ),
                    )
