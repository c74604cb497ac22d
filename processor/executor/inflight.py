"""The in-flight bound of one executor: how many handlers run at once, and how many may be claimed.

Owns :class:`InFlight`: the limit (``executor_max_in_flight``), the claim-ahead
(``executor_claim_ahead``: claimed calls that may wait for a slot, so that a slot that frees is
taken at once instead of after a claim transaction), how many claimed calls wait now, the
handler tasks running, the signal a finished one gives (an outcome to write, a slot free) and
the most that ever ran at once. The bound is the back-pressure: with nothing claimable the
records stay in the backlog (:mod:`processor.executor.backlog`), whose full partitions are
paused on the consumer; the loop goes on (it writes outcomes, polls, and answers rebalances).

Must not decide about a record, nor write anything, nor run a handler itself."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

__all__ = ["InFlight"]


class InFlight:
    """Handler tasks running now, at most ``limit``."""

    def __init__(self, limit: int, ahead: int = 0) -> None:
        if limit < 1:
            raise ValueError("the in-flight limit must be at least 1")
        if ahead < 0:
            raise ValueError("the claim-ahead must not be negative")
        self.limit = limit
        self.ahead = ahead
        self.waiting = 0  # claimed calls waiting for a slot (the runner's queue)
        self.reserved = 0  # calls a claim round in flight is claiming (rounds side by side)
        self.tasks: set[asyncio.Task[None]] = set()
        self.peak = 0  # the most handlers that ever ran at once (tests, diagnostics)
        self.finished = asyncio.Event()  # a handler ended: an outcome to write, a slot free

    @property
    def running(self) -> int:
        return len(self.tasks)

    def free(self) -> int:
        """Slots free now: how many handlers may start."""
        return max(0, self.limit - len(self.tasks))

    def claimable(self) -> int:
        """How many more calls may be claimed: the free slots, plus the claim-ahead, less the
        claimed calls already waiting for a slot and those other claim rounds are claiming."""
        return max(0, self.limit + self.ahead - len(self.tasks) - self.waiting - self.reserved)

    def worth_claiming(self) -> bool:
        """Whether a claim round should start now: calls may be claimed, and either none waits
        for a slot (a slot could go idle) or a quarter of the claim-ahead may be claimed at
        once. While claimed calls wait, a slot that frees is filled from them, so claiming can
        wait for a batch: fewer, larger claim transactions (with 100 ms handlers, a claim round
        for every slot that freed made a transaction of one or two calls)."""
        claimable = self.claimable()
        return claimable > 0 and (not self.waiting or claimable >= max(1, self.ahead // 4))

    def start(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``work`` (one call's handler and its outcome) in a slot of its own."""
        if not self.free():
            work.close()
            raise RuntimeError("no free in-flight slot: a claimed call waits for one (Runner)")
        task = asyncio.create_task(work)
        self.tasks.add(task)
        self.peak = max(self.peak, len(self.tasks))
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.finished.set()
