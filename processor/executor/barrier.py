"""The control barrier: read a turn's ``control`` partition up to "now" before a call runs.

ARCHITECTURE.md §7: before running a dispatched call, the executor reads ``control`` up to the
end offsets observed when the dispatch record arrived, so a cancellation (or quarantine, tool
disable, tenant stop, denial) committed to ``control`` before execution starts is always seen.

Which partition. Turn-scoped control events are keyed by the turn key ``tenant/turn_id`` and land
on the partition Kafka's default partitioner picks for it (murmur2 of the key bytes, positive,
modulo the partition count, as the Java client and aiokafka do); tenant-wide and tool-wide operator
commands are copied by ``processor ctl`` to every partition. So the control partition of the
call's turn alone holds every fact that can stop the call: :func:`partition_for` computes it from
the dispatch's tenant and turn id.

How. :class:`ControlBarrier` owns one ``read_committed`` consumer without a group, assigned to every
``control`` partition from the beginning, one :class:`~processor.executor.fence.FenceState` per
partition, and a second consumer that only asks for end offsets: on the reader's own connection a
ListOffsets waits behind its pending long-polled fetch (a broker answers a connection's requests in
order), ~450 ms a sync. :meth:`ControlBarrier.sync` asks the broker for the partition's end offset
(under ``read_committed`` that is the last stable offset, so an open transaction's records are not
waited for and aborted ones never applied), then consumes until the consumer's *position* reaches
it: the last offsets of a partition can be transaction markers, so waiting for
"last record = end - 1" would never finish. :meth:`ControlBarrier.sync_many` does the same for
the control partitions of many calls (an executor's fetch) with ONE ListOffsets request. The
state and the position are kept between calls, so a sync costs one ListOffsets round trip when
nothing new arrived.

A barrier that cannot complete in time raises :class:`BarrierTimeout`; the call is then not run
(and not acknowledged), and the executor tries again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from processor.core.errors import ConfigurationError, KafkaStepError
from processor.executor.fence import ApplyOutcome, FenceState
from processor.kafka.clients import committed_reader, end_offsets, read_to_end, stop_consumer
from processor.kafka.partitioner import partition_for
from processor.kafka.topics import partition_count
from processor.observability import metrics
from processor.settings import Settings

__all__ = ["BarrierTimeout", "ControlBarrier"]


class BarrierTimeout(KafkaStepError):
    """Control (or the ledger) could not be read up to its end in time: retried."""

    reason = "barrier_timeout"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)


class ControlBarrier:
    """Reads ``control`` for the fence: one read_committed consumer, a state per partition."""

    def __init__(
        self,
        settings: Settings,
        new_state: Callable[[], FenceState],
        *,
        consumer_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.settings = settings
        self.topic = settings.topics.control
        self._new_state = new_state
        self._extra = consumer_kwargs or {}
        self._consumer: AIOKafkaConsumer | None = None
        # end offsets on connections of their own: on the reader's, a ListOffsets queues behind
        # its pending long-polled fetch (a broker answers a connection in order): ~450 ms a sync
        self._offsets: AIOKafkaConsumer | None = None
        self._states: dict[int, FenceState] = {}
        self._partitions = 0
        self._lock = asyncio.Lock()
        self._next = _Read()  # the read the syncs asked now will share
        self.applied: dict[ApplyOutcome, int] = dict.fromkeys(ApplyOutcome, 0)

    @property
    def partitions(self) -> int:
        return self._partitions

    async def start(self) -> None:
        consumer = committed_reader(self.settings, **self._extra)
        offsets = committed_reader(
            self.settings, **{**self._extra, "client_id": f"{self.settings.client_id}-barrier"}
        )
        await consumer.start()
        try:
            await offsets.start()
            partitions = await partition_count(self.settings, self.topic)
            if not partitions:
                raise ConfigurationError("missing_topic", f"topic {self.topic!r} does not exist")
            consumer.assign([TopicPartition(self.topic, p) for p in range(partitions)])
            await consumer.seek_to_beginning()
        except BaseException:
            await consumer.stop()
            await offsets.stop()
            raise
        self._consumer = consumer
        self._offsets = offsets
        self._partitions = partitions
        self._states = {p: self._new_state() for p in range(partitions)}

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        offsets, self._offsets = self._offsets, None
        if consumer is not None:
            await stop_consumer(consumer)
        if offsets is not None:
            await stop_consumer(offsets)

    def partition_for_turn(self, tenant: str, turn_id: str) -> int:
        """The control partition of a turn (the one its turn-scoped events are keyed to)."""
        if not self._partitions:
            raise RuntimeError("ControlBarrier.start() was not awaited")
        return partition_for(f"{tenant}/{turn_id}".encode(), self._partitions)

    def state(self, partition: int) -> FenceState:
        return self._states[partition]

    def states(self) -> dict[int, FenceState]:
        return dict(self._states)

    async def sync(self, partition: int, timeout: float) -> FenceState:
        """Apply ``control[partition]`` up to its current end offset; return its fence state."""
        return (await self.sync_many([partition], timeout))[partition]

    async def sync_many(self, partitions: list[int], timeout: float) -> dict[int, FenceState]:
        """Apply each of ``partitions`` up to its current end offset, the end offsets asked in
        ONE ListOffsets request (the calls of a fetch share it); their fence states.

        Syncs asked while a read is in flight share the next read (a group commit): each joins
        the read that has not started yet, and a read starts only after every sync it serves
        was asked, so its end offsets are never older than any of them. Claim rounds side by
        side, the starts and the stop watch ask at once; each used to wait for the others'
        reads and then make its own.

        Records the reader holds for the other partitions are applied too, before and after:
        while any partition's records wait unread in the reader, aiokafka sends its broker no
        new fetch for up to 100 ms (its prefetch back-off), so a partition read on demand
        waited for that every time another one had records: ~90 ms a sync under a steady
        trickle of calls, the executor's bound below 100 calls/s."""
        if self._consumer is None or self._offsets is None:
            raise RuntimeError("ControlBarrier.start() was not awaited")
        wanted = dict.fromkeys(partitions)
        deadline = time.monotonic() + timeout
        while True:
            read = self._next
            read.join(wanted, deadline)
            async with self._lock:
                if not read.started:  # the first of its syncs here: the read starts now
                    self._next = _Read()  # syncs asked from now on wait for the next one
                    read.started = True
                    try:
                        await self._read(read)
                    except BaseException as exc:
                        read.failed = exc
                        raise
            if read.failed is None:
                return {p: self._states[p] for p in wanted}
            if isinstance(read.failed, Exception):  # the shared read failed: this sync too
                raise read.failed
            # the sync that made the read was cancelled, not this one: ask again

    async def _read(self, read: _Read) -> None:
        consumer, offsets = self._consumer, self._offsets
        if consumer is None or offsets is None:
            raise RuntimeError("the barrier stopped")
        tps = [TopicPartition(self.topic, p) for p in read.partitions]
        await self._apply_held(consumer)
        ends = await end_offsets(offsets, tps)
        for tp in tps:
            done = await read_to_end(
                consumer,
                tp,
                ends[tp],
                self._applier(tp.partition),
                deadline=read.deadline,
                max_records=1000,
            )
            if not done:
                position = await consumer.position(tp)
                raise BarrierTimeout(
                    detail=f"{self.topic}[{tp.partition}] at {position}, end {ends[tp]}"
                )
        await self._apply_held(consumer)

    async def _apply_held(self, consumer: AIOKafkaConsumer) -> None:
        """Apply, in order, whatever records the reader already holds, of any partition."""
        while batches := await consumer.getmany(timeout_ms=0, max_records=1000):
            for tp, records in batches.items():
                apply = self._applier(tp.partition)
                for record in records:
                    apply(record)

    def _applier(self, partition: int) -> Callable[[ConsumerRecord], None]:
        state = self._states[partition]

        def apply(record: ConsumerRecord) -> None:
            if record.value is None:
                return
            # the broker's append time: control uses LogAppendTime (processor.kafka.topics)
            outcome = state.apply_record(record.value, record.timestamp / 1000.0)
            self.applied[outcome] += 1
            metrics.EXECUTOR_CONTROL_RECORDS.labels(outcome.value).inc()

        return apply

    def forget(self, horizon: float) -> int:
        return sum(state.forget(horizon) for state in self._states.values())


class _Read:
    """One barrier read shared by the syncs that joined it before it started: the union of
    their partitions, the earliest of their deadlines, and how it ended."""

    __slots__ = ("deadline", "failed", "partitions", "started")

    def __init__(self) -> None:
        self.partitions: dict[int, None] = {}
        self.deadline = float("inf")
        self.started = False
        self.failed: BaseException | None = None

    def join(self, partitions: dict[int, None], deadline: float) -> None:
        if self.started:
            raise RuntimeError("a sync joined a read that had started")
        self.partitions.update(partitions)
        self.deadline = min(self.deadline, deadline)
