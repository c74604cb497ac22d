"""The in-flight bound of one executor: how many handlers run at once, and its back-pressure.

Owns :class:`InFlight`: the limit (``executor_max_in_flight``), the handler tasks running, the
signal a finished one gives (an outcome to write, a slot free), the most that ever ran at once,
and which dispatch partitions it paused on the consumer because no slot was free (resumed once
one is). The bound is the back-pressure: the consumer pauses, the loop goes on (it writes
outcomes, polls, and answers rebalances meanwhile).

Must not decide about a record, nor write anything, nor run a handler itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

__all__ = ["InFlight"]


class InFlight:
    """Handler tasks running now, at most ``limit``."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the in-flight limit must be at least 1")
        self.limit = limit
        self.tasks: set[asyncio.Task[None]] = set()
        self.peak = 0  # the most handlers that ever ran at once (tests, diagnostics)
        self.finished = asyncio.Event()  # a handler ended: an outcome to write, a slot free
        self._paused: set[TopicPartition] = set()

    @property
    def running(self) -> int:
        return len(self.tasks)

    def free(self) -> int:
        """Slots free now: how many calls may be claimed, since a claimed call starts at once."""
        return max(0, self.limit - len(self.tasks))

    def start(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``work`` (one call's handler and its outcome) in a slot of its own."""
        if not self.free():
            work.close()
            raise RuntimeError("no free in-flight slot: claim only what can start now")
        task = asyncio.create_task(work)
        self.tasks.add(task)
        self.peak = max(self.peak, len(self.tasks))
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.finished.set()

    def hold(self, consumer: AIOKafkaConsumer) -> None:
        """No slot free: pause every assigned partition not paused already (the back-pressure)."""
        paused = consumer.paused()
        for tp in consumer.assignment():
            if tp not in paused:
                consumer.pause(tp)
                self._paused.add(tp)

    def let_go(self, consumer: AIOKafkaConsumer, keep: Callable[[TopicPartition], bool]) -> None:
        """A slot is free: resume what :meth:`hold` paused, except still-assigned partitions
        that ``keep`` says stay paused for another reason (a take being retried)."""
        if not self._paused:
            return
        assigned = consumer.assignment()
        for tp in self._paused:
            if tp in assigned and not keep(tp):
                consumer.resume(tp)
        self._paused.clear()

    @property
    def holding(self) -> bool:
        return bool(self._paused)
