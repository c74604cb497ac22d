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
start with NUL (no state key does): the checkpoint, the store's identity (changelog topic,
partition, format), checked on open so a store is never read for another partition, and the
store's integrity record (:class:`Tally`).

Integrity. A damaged store must never load as a short one (it would forget, say, a tenant stop
held in the lost part). RocksDB runs with ``paranoid_checks`` and verified reads (every block's
checksum is checked when read); :meth:`RocksStore.scan` checks the iterator's status when it
stops, and every key must decode; and each write batch also updates a :class:`Tally` (the number
of records and an order-independent digest of them) in the same atomic batch, which a full scan
recomputes and compares at its end. Any of these failing raises :class:`StoreCorrupt`, and the
caller rebuilds the partition in full from the changelog (never from what the scan read).

Design: the Assembler keeps its facts in memory (open calls, and terminal calls as compact
facts bounded by ``max_inert_calls``) and does not read through the store: every event would
otherwise cost a disk read on the hot path. The store's job is the restart: restoring from it
is a local scan, and from the changelog only the tail after its checkpoint.
"""

from __future__ import annotations

import contextlib
import shutil
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from processor.core.errors import StateStoreError

_CHECKPOINT = b"\x00checkpoint"
_IDENTITY = b"\x00identity"
_TALLY = b"\x00tally"
FORMAT = 2  # 2: the tally (a store of format 1 has none: it is rebuilt)
_MOD = 1 << 64


def _record_digest(key: bytes, value: bytes) -> int:
    """One record's share of the tally's digest: CRC-32 and Adler-32 of the length-prefixed
    record (no two records collide by moving bytes between key and value). It detects damage,
    alongside RocksDB's own block checksums; it is no defence against a forger, who could
    write the tally too."""
    data = b"%d:%b%b" % (len(key), key, value)
    return (zlib.crc32(data) << 32) | zlib.adler32(data)


@dataclass
class Tally:
    """What a store holds: its record count and the sum (mod 2**64) of each record's digest.

    Order-independent, so each write batch updates it from the records it replaces, and a full
    scan recomputes it; a record lost, added, truncated or altered shows as a mismatch."""

    count: int = 0
    digest: int = 0

    def add(self, key: bytes, value: bytes) -> None:
        self.count += 1
        self.digest = (self.digest + _record_digest(key, value)) % _MOD

    def remove(self, key: bytes, value: bytes) -> None:
        self.count -= 1
        self.digest = (self.digest - _record_digest(key, value)) % _MOD

    def encode(self) -> bytes:
        return f"{self.count}:{self.digest}".encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Tally | None:
        if raw is None:
            return None
        try:
            count, digest = raw.decode("ascii").split(":")
            return cls(int(count), int(digest))
        except ValueError:  # UnicodeDecodeError included
            return None


class StoreCorrupt(StateStoreError):
    """The local store cannot be used (unreadable, damaged, or another partition's): destroy it
    and rebuild the partition in full from the changelog."""


class StoreLocked(StateStoreError):
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

    def destroy(self) -> None:
        """Close the store and delete what it holds (a damaged store, before a full rebuild)."""
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

    def destroy(self) -> None:
        self.clear()

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
            ReadOptions,
        )

        self.path = path
        self._identity = orjson.dumps({**identity, "format": FORMAT})
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_paranoid_checks(True)  # a damaged file fails the open, not a later read
        table = BlockBasedOptions()
        table.set_block_cache(Cache(cache_bytes))
        table.set_bloom_filter(10, False)  # the tally reads what a write replaces: cheap misses
        options.set_block_based_table_factory(table)
        options.set_write_buffer_size(max(1 << 20, min(cache_bytes // 2, 64 << 20)))
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = Rdict(str(path), options)
        except Exception as exc:
            if "lock" in str(exc).lower():  # held by another process: never destroy it
                raise StoreLocked(f"{path} is in use by another process") from exc
            raise StoreCorrupt(f"cannot open {path}: {type(exc).__name__}") from exc
        verified = ReadOptions()
        verified.set_verify_checksums(True)
        self.db.set_read_options(verified)
        try:
            found = self.db.get(_IDENTITY)
            if found is None:
                if self.db.get(_CHECKPOINT) is not None:
                    raise StoreCorrupt(f"{path} has a checkpoint but no identity")
                self.db.put(_IDENTITY, self._identity)
                self.db.put(_TALLY, Tally().encode())
            elif found != self._identity:
                raise StoreCorrupt(f"{path} belongs to another partition or format")
            tally = Tally.decode(self.db.get(_TALLY))
            if tally is None:
                raise StoreCorrupt(f"{path} has no readable tally")
            self._tally = tally
            # while a rebuild fills an empty store (until its first checkpoint), each record's
            # digest, so the tally needs no read of the record a write replaces
            self._rebuilding: dict[bytes, int] | None = {} if found is None else None
        except Exception as exc:
            self.db.close()
            if isinstance(exc, StoreCorrupt):
                raise
            raise StoreCorrupt(f"cannot read {path}: {type(exc).__name__}") from exc

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

    def destroy(self) -> None:
        """Close the store and delete its files (a damaged store, before a full rebuild)."""
        with contextlib.suppress(Exception):
            self.db.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def get(self, key: str) -> bytes | None:
        value: bytes | None = self.db.get(key.encode())
        return value

    def put(self, key: str, value: bytes) -> None:
        self.apply([(key, value)], None)  # through the batch: the tally stays exact

    def delete(self, key: str) -> None:
        self.apply([(key, None)], None)

    def scan(self, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        """Records in key order; ``StoreCorrupt`` when the store cannot be read whole: a read or
        checksum error (the iterator's status), a key that is not UTF-8, and, for a full scan
        (no prefix), records that do not add up to the tally written with them. A full scan
        raises only at its end: its reader must discard what it read when it does."""
        start = prefix.encode()
        seen = Tally()
        it: Any = None
        try:
            it = self.db.iter()
            it.seek(start if start else b"\x01")  # past the reserved NUL keys
            while it.valid():
                key: bytes = it.key()
                if not key.startswith(start):
                    break
                if not key.startswith(b"\x00"):
                    value: bytes = it.value()
                    seen.add(key, value)
                    yield key.decode(), value
                it.next()
            it.status()  # raises when the iteration stopped on an error, not at the end
        except StoreCorrupt:
            raise
        except Exception as exc:  # UnicodeDecodeError, or RocksDB's corruption / IO errors
            raise StoreCorrupt(f"{self.path}: unreadable ({type(exc).__name__})") from exc
        finally:
            # the iterator holds the database, and its lock, for as long as it lives: released
            # here, not by the garbage collector (the traceback of a failed scan keeps this
            # frame, so a replacement store at the same path would stay StoreLocked until then)
            it = None
        if not prefix and seen != self._tally:
            raise StoreCorrupt(f"{self.path}: {seen.count} records read, tally says otherwise")

    def checkpoint(self) -> int | None:
        try:
            raw = self.db.get(_CHECKPOINT)
        except Exception as exc:  # a checksum or read error
            raise StoreCorrupt(
                f"{self.path}: checkpoint unreadable ({type(exc).__name__})"
            ) from exc
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
        latest: dict[bytes, bytes | None] = {}
        for key, value in changes:
            raw = key.encode()
            if value is None:
                batch.delete(raw)
            else:
                batch.put(raw, value)
            latest[raw] = value
        tally = Tally(self._tally.count, self._tally.digest)
        mirror = self._rebuilding
        if mirror is not None:  # filled since clear(): every record's digest is known here
            for raw, new in latest.items():
                old_digest = mirror.pop(raw, None)
                if old_digest is not None:
                    tally.count -= 1
                    tally.digest = (tally.digest - old_digest) % _MOD
                if new is not None:
                    mirror[raw] = digest = _record_digest(raw, new)
                    tally.count += 1
                    tally.digest = (tally.digest + digest) % _MOD
        else:  # the records replaced: one multi-get
            keys: list[str | int | float | bytes | bool] = list(latest)
            found = self.db.get(keys) if keys else []
            before: list[bytes | None] = found if isinstance(found, list) else []
            for raw, old in zip(latest, before, strict=True):
                if old is not None:
                    tally.remove(raw, old)
                new = latest[raw]
                if new is not None:
                    tally.add(raw, new)
        batch.put(_TALLY, tally.encode())
        if checkpoint is not None:
            batch.put(_CHECKPOINT, str(checkpoint).encode())
        self.db.write(batch)
        self._tally = tally
        if checkpoint is not None:
            self._rebuilding = None  # the rebuild is done: reads from now on

    def clear(self) -> None:
        self.db.delete(_CHECKPOINT)  # first: a crash mid-clear leaves no checkpoint
        self.db.delete_range(b"\x01", b"\xff")  # every state key (UTF-8 has no 0xff byte)
        self._tally = Tally()
        self.db.put(_TALLY, self._tally.encode())
        self._rebuilding = {}

    def flush(self) -> None:
        self.db.flush()

    def close(self) -> None:
        self.db.close()
