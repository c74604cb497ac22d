"""Which Assembler a prepared partition starts from, and the life of its local state store.

:meth:`Recovery.restore` is the second half of a preparation (see
:mod:`processor.runtime.partition`), run once the fence holds. It returns an Assembler rebuilt,
in order of preference, from

1. ``warm``: the Assembler this worker kept when the partition was revoked (aiokafka revokes
   everything on every rebalance), given back by the next assignment: only the changelog tail
   written since its own last committed transaction is applied (``tail``). One try: a retry
   restores in full. Only an Assembler whose every change was committed is ever kept;
2. the local store (``PROCESSOR_STATE_DIR``), loaded whole and exactly, then the changelog
   tail after its checkpoint (``checkpoint``);
3. changelog partition p from its beginning (``full``; :mod:`processor.runtime.restore`).

A store found damaged is destroyed and replaced by an empty one, and the restore goes on to the
next source; a store whose write fails after a commit is dropped (:meth:`Recovery.store_committed`)
and continues from its checkpoint on the next preparation. The store is opened once per task and
closed with it. :func:`seek` and :func:`input_partitions` read the group's committed offsets (as
stable offsets, after the fence) and the inputs' partition count, the preparation's last step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiokafka.errors import KafkaTimeoutError
from aiokafka.structs import TopicPartition

from processor.core.assembler import Assembler
from processor.kafka.stable_offsets import stable_committed
from processor.observability import metrics
from processor.observability.logging import fields
from processor.runtime import collector
from processor.runtime.restore import RestoreGap, RestoreResult, restore_partition
from processor.runtime.store import RocksStore, StateStore, StoreCorrupt
from processor.settings import Settings

log = logging.getLogger(__name__)


class Recovery:
    """Partition p's local store and the choice of what its Assembler is restored from."""

    def __init__(
        self, partition: int, settings: Settings, new_assembler: Callable[[], Assembler]
    ) -> None:
        self.partition = partition
        self.settings = settings
        self.topics = settings.topics
        self._new_assembler = new_assembler
        self.warm: tuple[Assembler, int] | None = None  # (Assembler, changelog_next) to keep
        self.restore_kind = "full"
        self.store: StateStore | None = None  # the local store (PROCESSOR_STATE_DIR), if any
        self.store_records = 0  # records loaded from the local store by the last restore

    async def restore(self) -> tuple[Assembler, RestoreResult]:
        """The Assembler to continue from and how it was restored (see the module docstring)."""
        s = self.settings
        warm, self.warm = self.warm, None  # one try: a retry restores in full
        store = self.open_store()
        checkpoint: int | None = None
        if store is not None:
            try:
                checkpoint = store.checkpoint()
            except StoreCorrupt as exc:
                store = self.replace_store(store, exc)
        pending: list[tuple[str, bytes | None]] = []

        def sink(key: str, value: bytes | None) -> None:
            pending.append((key, value))
            if store is not None and len(pending) >= 10_000:
                store.apply(pending, None)  # no checkpoint yet: replaying the tail is idempotent
                pending.clear()

        result: RestoreResult | None = None
        self.store_records = 0
        if warm is not None and store is not None and checkpoint != warm[1]:
            warm = None  # the store fell behind (a failed write): continue from the store instead
        if warm is not None:
            assembler, start = warm
            with contextlib.suppress(RestoreGap):
                result = await restore_partition(
                    assembler,
                    self.topics.changelog,
                    self.partition,
                    s,
                    timeout=s.restore_timeout_seconds,
                    start=start,
                    sink=sink if store is not None else None,
                )
                self.restore_kind = "tail"
            if result is None and store is not None:
                store.clear()  # the kept Assembler and its store cannot be continued
                checkpoint = None
        if result is None and store is not None and checkpoint is not None:
            try:
                assembler, result = await self.restore_from_store(store, checkpoint, sink)
            except StoreCorrupt as exc:  # never a short load: what the scan read is dropped
                store = self.replace_store(store, exc)
                pending.clear()
                result = None
        if result is None:
            pending.clear()
            if store is not None:
                try:
                    store.clear()
                except Exception as exc:  # a store RocksDB refuses to write: start a new one
                    store = self.replace_store(store, StoreCorrupt(type(exc).__name__))
            assembler = self._new_assembler()
            result = await restore_partition(
                assembler,
                self.topics.changelog,
                self.partition,
                s,
                timeout=s.restore_timeout_seconds,
                sink=sink if store is not None else None,
            )
            self.restore_kind = "full"
        if store is not None:
            store.apply(pending, result.end_offset)
            pending.clear()
        return assembler, result

    def open_store(self) -> StateStore | None:
        """This partition's local store, opened once (None without ``PROCESSOR_STATE_DIR``)."""
        if self.store is not None or self.settings.state_dir is None:
            return self.store
        path = (
            Path(self.settings.state_dir)
            / self.settings.application_id
            / (f"{self.topics.changelog}-{self.partition}")
        )
        identity = {"changelog": self.topics.changelog, "partition": self.partition}
        cache = self.settings.state_cache_mb * 1024 * 1024
        store, rebuilt = RocksStore.open_or_rebuild(path, identity, cache_bytes=cache)
        if rebuilt is not None:
            log.warning(
                "local state store unusable; rebuilt from the changelog",
                extra=fields(partition=self.partition, reason=rebuilt),
            )
        self.store = store
        return store

    def replace_store(self, store: StateStore, exc: StoreCorrupt) -> StateStore | None:
        """A damaged store: destroy it and open an empty one (the caller restores in full)."""
        log.error(
            "local state store damaged; rebuilding in full from the changelog",
            extra=fields(partition=self.partition, reason=str(exc)),
        )
        metrics.STATE_STORE_REBUILDS.inc()
        store.destroy()
        self.store = None
        return self.open_store()

    async def restore_from_store(
        self, store: StateStore, checkpoint: int, sink: Callable[[str, bytes | None], None]
    ) -> tuple[Assembler, RestoreResult | None]:
        """Load the local store, then apply the changelog tail after its checkpoint.

        ``(assembler, None)`` when the checkpoint cannot be continued (beyond the changelog's
        end: newer than what is committed, or before its beginning): restore in full.
        ``StoreCorrupt`` when the store cannot be read whole and exactly (a read or checksum
        error, a key that does not decode, a record the Assembler cannot read back, records
        that do not add up to the store's tally): the caller restores in full.
        """
        assembler = self._new_assembler()
        loaded = 0
        for key, value in store.scan():
            loaded += 1
            problem = assembler.restore(key, value)
            if problem is not None:  # only readable records are ever written to the store
                raise StoreCorrupt(f"record {loaded}: {problem}")
            collector.restored(loaded)
            if loaded % 2000 == 0:
                await asyncio.sleep(0)  # heartbeats and other partitions go on meanwhile
        try:
            result = await restore_partition(
                assembler,
                self.topics.changelog,
                self.partition,
                self.settings,
                timeout=self.settings.restore_timeout_seconds,
                start=checkpoint,
                sink=sink,
            )
        except RestoreGap:
            log.warning(
                "local state store checkpoint outside the changelog; restoring in full",
                extra=fields(partition=self.partition, checkpoint=checkpoint),
            )
            return assembler, None
        self.store_records = loaded
        self.restore_kind = "checkpoint"
        return assembler, result

    def store_committed(self, changes: list[tuple[str, bytes | None]], checkpoint: int) -> None:
        """After the commit only: the store never holds a write of an aborted transaction."""
        if self.store is None:
            return
        try:
            self.store.apply(changes, checkpoint)
        except (
            Exception
        ) as exc:  # a full or failing disk: the batch is atomic, nothing half-written
            log.error(
                "local state store write failed; it continues from its checkpoint",
                extra=fields(partition=self.partition, error=type(exc).__name__),
            )
            store, self.store = self.store, None  # its checkpoint stays where its data is
            with contextlib.suppress(Exception):
                store.close()

    def close_store(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            store.close()


def input_partitions(consumer: Any, topic: str, partition: int) -> int:
    """The inputs' partition count, from the consumer's metadata, for the misrouting check
    (:func:`processor.runtime.intake.misplaced`). Metadata refreshed while a topic reported an
    error (a leader moving) lacks the topic: the preparation then fails and is tried again,
    rather than accept records without knowing their home partition."""
    known = consumer.partitions_for_topic(topic) or set()
    if partition not in known:
        raise KafkaTimeoutError(
            f"partition {partition}: the partitions of {topic} are not "
            "in the consumer's metadata yet"
        )
    return len(known)


async def seek(
    consumer: Any,
    tps: Sequence[TopicPartition],
    expected: dict[TopicPartition, int],
    *,
    group_id: str,
    timeout: float,
) -> None:
    """Seek the consumer to the group's committed offsets of ``tps`` (the beginning when none)
    and record the next offsets in ``expected``.

    Read after the fence, in one request, as *stable* offsets
    (:func:`~processor.kafka.stable_offsets.stable_committed`): the fence completed or aborted
    the previous owner's transaction, and the group coordinator is asked to answer only once
    that transaction's offsets are applied, never the offsets before it. Raises
    ``StableOffsetsError`` past ``timeout`` seconds, or when the broker cannot tell: the
    preparation fails and is tried again."""
    committed = await stable_committed(consumer._client, group_id, tps, timeout=timeout)
    for tp in tps:
        offset = committed[tp]
        if offset is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, offset)
        expected[tp] = await consumer.position(tp)
