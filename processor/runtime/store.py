"""Local state stores: one partition's changelog state on this machine, with its checkpoint.

The changelog topic stays the source of truth; a store is a local copy of it that lets a
restarted worker restore only the changelog *tail*. Each store holds the state records (the
changelog's keys and last values) and a checkpoint: the changelog offset the records reflect.
The worker writes a transaction's changelog records to the store, with the new checkpoint, in
one atomic batch, and only after the transaction committed (:meth:`StateStore.apply`), so a
store never holds a write of an aborted transaction, and a crash between a commit and the store
write only leaves the store behind (its tail is read again from the changelog).

* :class:`MemoryStore`: a dict (replay, unit tests).
* :class:`RocksStore`: RocksDB through ``rocksdict``, one database per changelog partition under
  ``PROCESSOR_STATE_DIR``, its block cache bounded (``PROCESSOR_STATE_CACHE_MB``).

The interface is get / put / delete / prefix scan / flush, plus the checkpoint. Reserved keys
start with NUL (no state key does): the checkpoint and the store's identity (changelog topic,
partition, format), checked on open so a store is never read for another partition.

Design: the Assembler keeps its facts in memory (open calls, and terminal calls as compact
facts bounded by ``max_inert_calls``) and does not read through the store: every event would
otherwise cost a disk read on the hot path. The store's job is the restart: restoring from it
is a local scan, and from the changelog only the tail after its checkpoint.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import orjson

_CHECKPOINT = b"\x00checkpoint"
_IDENTITY = b"\x00identity"
FORMAT = 1


class StoreCorrupt(Exception):
    """The local store cannot be used (unreadable, or another partition's): rebuild it."""


class StoreLocked(Exception):
    """Another process holds the store (two workers on one state directory): retried."""


class StateStore(Protocol):
    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> None: ...

    def scan(self, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        """The state records whose key starts with ``prefix``, in key order."""
        ...

    def checkpoint(self) -> int | None:
        """The changelog offset the records reflect (None: unknown, restore in full)."""
        ...

    def apply(self, changes: Iterable[tuple[str, bytes | None]], checkpoint: int | None) -> None:
        """Write records (None deletes) and, when given, the new checkpoint, atomically."""
        ...

    def clear(self) -> None:
        """Forget every record and the checkpoint (before a full rebuild)."""
        ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class MemoryStore:
    """A store in a dict (nothing survives the process)."""

    def __init__(self) -> None:
        self.records: dict[str, bytes] = {}
        self._checkpoint: int | None = None

    def get(self, key: str) -> bytes | None:
        return self.records.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.records[key] = value

    def delete(self, key: str) -> None:
        self.records.pop(key, None)

    def scan(self, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        for key in sorted(k for k in self.records if k.startswith(prefix)):
            yield key, self.records[key]

    def checkpoint(self) -> int | None:
        return self._checkpoint

    def apply(self, changes: Iterable[tuple[str, bytes | None]], checkpoint: int | None) -> None:
        for key, value in changes:
            if value is None:
                self.records.pop(key, None)
            else:
                self.records[key] = value
        if checkpoint is not None:
            self._checkpoint = checkpoint

    def clear(self) -> None:
        self.records.clear()
        self._checkpoint = None

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class RocksStore:
    """One changelog partition's state in RocksDB (``rocksdict``), with a bounded block cache."""

    def __init__(self, path: Path, identity: dict[str, Any], *, cache_bytes: int) -> None:
        from rocksdict import (  # noqa: PLC0415  (the worker only)
            BlockBasedOptions,
            Cache,
            Options,
            Rdict,
        )

        self.path = path
        self._identity = orjson.dumps({**identity, "format": FORMAT})
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(cache_bytes))
        options.set_block_based_table_factory(table)
        options.set_write_buffer_size(max(1 << 20, min(cache_bytes // 2, 64 << 20)))
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = Rdict(str(path), options)
        except Exception as exc:
            if "lock" in str(exc).lower():  # held by another process: never destroy it
                raise StoreLocked(f"{path} is in use by another process") from exc
            raise StoreCorrupt(f"cannot open {path}: {type(exc).__name__}") from exc
        found = self.db.get(_IDENTITY)
        if found is None:
            if self.db.get(_CHECKPOINT) is not None:
                self.db.close()
                raise StoreCorrupt(f"{path} has a checkpoint but no identity")
            self.db.put(_IDENTITY, self._identity)
        elif found != self._identity:
            self.db.close()
            raise StoreCorrupt(f"{path} belongs to another partition or format")

    @classmethod
    def open_or_rebuild(
        cls, path: Path, identity: dict[str, Any], *, cache_bytes: int
    ) -> tuple[RocksStore, str | None]:
        """Open the store, or destroy an unusable one and start empty; (store, why rebuilt)."""
        try:
            return cls(path, identity, cache_bytes=cache_bytes), None
        except StoreCorrupt as exc:
            shutil.rmtree(path, ignore_errors=True)
            return cls(path, identity, cache_bytes=cache_bytes), str(exc)

    def get(self, key: str) -> bytes | None:
        value: bytes | None = self.db.get(key.encode())
        return value

    def put(self, key: str, value: bytes) -> None:
        self.db.put(key.encode(), value)

    def delete(self, key: str) -> None:
        self.db.delete(key.encode())

    def scan(self, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        start = prefix.encode()
        it = self.db.iter()
        it.seek(start if start else b"\x01")  # past the reserved NUL keys
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(start):
                break
            if not key.startswith(b"\x00"):
                yield key.decode(), it.value()
            it.next()

    def checkpoint(self) -> int | None:
        raw = self.db.get(_CHECKPOINT)
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            return None
        return value if value >= 0 else None

    def apply(self, changes: Iterable[tuple[str, bytes | None]], checkpoint: int | None) -> None:
        from rocksdict import WriteBatch  # noqa: PLC0415

        batch = WriteBatch(raw_mode=True)
        for key, value in changes:
            raw = key.encode()
            if value is None:
                batch.delete(raw)
            else:
                batch.put(raw, value)
        if checkpoint is not None:
            batch.put(_CHECKPOINT, str(checkpoint).encode())
        self.db.write(batch)

    def clear(self) -> None:
        self.db.delete(_CHECKPOINT)  # first: a crash mid-clear leaves no checkpoint
        self.db.delete_range(b"\x01", b"\xff")  # every state key (UTF-8 has no 0xff byte)

    def flush(self) -> None:
        self.db.flush()

    def close(self) -> None:
        self.db.close()
