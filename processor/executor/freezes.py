"""Pauses of the whole executor process, seen on the monotonic clock.

Owns :class:`FreezeWatch`: a tick every 0.1 s, and the longest gap between ticks (a SIGSTOP, a
frozen VM, a long garbage-collector pause, a blocking call in the event loop) since a moment.
A member paused past its session timeout has, by the group's reckoning, left: its partitions may
belong to another member now, whose take fenced this one's producers. Such a member must not
take a partition's transactional id again on its own (a new producer's ``InitProducerId``
would fence the rightful owner, whose finished calls would then be reported ``unknown``: chaos
seed 27): :class:`~processor.executor.transactions.PartitionWriter` gives the partition up
instead, and a take after the group's rebalance decides it.

The watch is fed by :meth:`FreezeWatch.run` (the client starts it); :meth:`tick` and
:meth:`longest_since` take the time, so they are tested without a clock. Must not decide
anything itself.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Final

__all__ = ["FreezeWatch"]

_TICK_SECONDS: Final = 0.1
_NOTED_SECONDS: Final = 0.5  # gaps longer than this are kept (a few; the newest)
_KEPT: Final = 32


class FreezeWatch:
    """The gaps between the ticks of one process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()
        self._gaps: deque[tuple[float, float]] = deque(maxlen=_KEPT)  # (ended at, seconds)

    def tick(self, now: float) -> None:
        gap = now - self._last
        if gap > _NOTED_SECONDS:
            self._gaps.append((now, gap))
        self._last = now

    def longest_since(self, since: float, now: float) -> float:
        """The longest pause that ended after ``since`` or goes on at ``now`` (the gap since
        the last tick: after a wake-up, the tick may not have run yet)."""
        ended = [gap for at, gap in self._gaps if at > since]
        return max([now - self._last, *ended])

    def paused_since(self, since: float) -> float:
        """:meth:`longest_since` now."""
        return self.longest_since(since, self._clock())

    async def run(self) -> None:
        """Tick until cancelled."""
        self._last = self._clock()  # not a pause: the time before the executor started
        while True:
            await asyncio.sleep(_TICK_SECONDS)
            self.tick(self._clock())
