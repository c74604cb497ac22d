"""The executor's backlog: dispatch records fetched and not decided yet, per partition, in order.

Owns :class:`Backlog`. The consumer loop adds what each poll returns; a claim round takes the
records of the partitions that may go on, decides as many as it can claim (the in-flight bound
and the claim-ahead), and puts the rest back at the front, in offset order. So a slot that frees
is filled from records already in hand, without waiting for a fetch, and the consumer never has
to be sought back for records it merely could not claim yet. A partition with ``high`` records
waiting is paused on the consumer (the back-pressure), and resumed once half of them are
decided.

A record leaves the backlog only when it is decided or dropped. Dropping is for records that
must be fetched again from the consumer's position: the partition is sought back (a failed
transaction, the executor stopping), revoked, or lost to a fence; :meth:`drop` is called with
every such seek, so that no record is decided twice and none is skipped.

Must not decide about a record, nor write anything.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

__all__ = ["Backlog"]


class Backlog:
    """Records fetched and not decided, per dispatch partition, oldest first."""

    def __init__(self, high: int) -> None:
        if high < 1:
            raise ValueError("the backlog's high mark must be at least 1")
        self.high = high
        self._queues: dict[TopicPartition, deque[ConsumerRecord]] = {}
        self.paused: set[TopicPartition] = set()  # paused here because full

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    def size(self, tp: TopicPartition) -> int:
        queue = self._queues.get(tp)
        return len(queue) if queue is not None else 0

    def add(self, batches: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """Records a poll returned (each partition's in offset order, after what is held)."""
        for tp, records in batches.items():
            if records:
                self._queues.setdefault(tp, deque()).extend(records)

    def ready(self, eligible: Callable[[TopicPartition], bool]) -> bool:
        """Whether an ``eligible`` partition has records waiting."""
        return any(queue and eligible(tp) for tp, queue in self._queues.items())

    def take(
        self, eligible: Callable[[TopicPartition], bool]
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Every waiting record of the ``eligible`` partitions, to decide now; what is not
        decided comes back with :meth:`put_back`."""
        taken = {}
        for tp, queue in self._queues.items():
            if queue and eligible(tp):
                taken[tp] = list(queue)
                queue.clear()
        return taken

    def take_one(
        self, eligible: Callable[[TopicPartition], bool]
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Every waiting record of ONE ``eligible`` partition (a claim round of its own); the
        partitions take turns: the one taken goes to the back of the line."""
        for tp, queue in self._queues.items():
            if queue and eligible(tp):
                taken = {tp: list(queue)}
                del self._queues[tp]  # back of the line (an empty queue, until records come)
                self._queues[tp] = deque()
                return taken
        return {}

    def put_back(self, leftover: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """Records taken and not decided: at the front again, in offset order."""
        for tp, records in leftover.items():
            self._queues.setdefault(tp, deque()).extendleft(reversed(records))

    def drop(self, tp: TopicPartition) -> int | None:
        """Forget the partition's records: it is sought back, revoked or lost, and what is
        decided next comes from the consumer's position. Returns the first offset it held (the
        consumer's position is past it: a partition kept must be sought back there), or None."""
        queue = self._queues.pop(tp, None)
        return queue[0].offset if queue else None

    def to_pause(self) -> list[TopicPartition]:
        """Partitions now full and not paused here yet (they are marked paused)."""
        full = [
            tp
            for tp, queue in self._queues.items()
            if len(queue) >= self.high and tp not in self.paused
        ]
        self.paused.update(full)
        return full

    def to_resume(self, assigned: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Partitions paused here that are down to half the high mark, or no longer assigned
        (those are forgotten, not resumed); the assigned ones are returned to resume."""
        assigned = set(assigned)
        resume = []
        for tp in list(self.paused):
            if tp not in assigned:
                self.paused.discard(tp)
            elif self.size(tp) <= self.high // 2:
                self.paused.discard(tp)
                resume.append(tp)
        return resume
