"""Takeover time: a partition holding N retained calls, restored in full vs from a checkpoint.

Needs a broker (``KAFKA_BOOTSTRAP_SERVERS``, default 127.0.0.1:9092). The bench creates a
one-partition changelog topic of its own, writes N terminal calls (their compact changelog
records, as the Assembler writes them) in committed transactions, then measures:

* ``full``: :func:`~processor.runtime.restore.restore_partition` from the beginning into a fresh
  Assembler, writing every record to a new local store (what a worker without a usable store
  does, and how the store is first built);
* ``checkpoint``: a fresh Assembler loaded from that local store (RocksDB), then the changelog
  tail after its checkpoint (empty here: a clean restart);
* the store's size on disk per retained call (after a flush and a full compaction).

Run: ``python bench/bench_state_restore.py --calls 1000000`` (the topic is deleted afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def run(calls: int) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    from processor.core.assembler import Assembler  # noqa: PLC0415
    from processor.core.events import encode_key  # noqa: PLC0415
    from processor.core.inert import InertCall  # noqa: PLC0415
    from processor.core.registry import Registry  # noqa: PLC0415
    from processor.core.states import CallState, TerminalReason  # noqa: PLC0415
    from processor.kafka.clients import admin_client  # noqa: PLC0415
    from processor.kafka.topics import create_topics  # noqa: PLC0415
    from processor.runtime.restore import restore_partition  # noqa: PLC0415
    from processor.runtime.store import RocksStore  # noqa: PLC0415
    from processor.settings import Settings  # noqa: PLC0415

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    prefix = f"bench-restore-{uuid.uuid4().hex[:8]}."
    settings = Settings(bootstrap_servers=bootstrap, topic_prefix=prefix, partitions=1)
    changelog = settings.topics.changelog
    registry = Registry.from_document({"tools": [{"name": "t", "parameters": {"type": "object"}}]})
    async with admin_client(settings) as admin:
        await create_topics(settings, admin)
    try:
        producer = AIOKafkaProducer(
            transactional_id=f"{prefix}load", linger_ms=50, max_batch_size=512 * 1024,
            **settings.kafka_client_kwargs(),
        )  # fmt: skip
        await producer.start()
        t0 = time.perf_counter()
        try:
            for base in range(0, calls, 50_000):
                async with producer.transaction():
                    for i in range(base, min(calls, base + 50_000)):
                        key = (f"tenant-{i % 50:02d}", f"turn-{i:09d}", f"resp-{i:09d}",
                               f"item-{i:09d}", f"call_{i:09d}")  # fmt: skip
                        fact = InertCall(CallState.DISPATCHED, TerminalReason.DISPATCHED,
                                         f"term-{i:09d}", 1_000_000.0 + i)  # fmt: skip
                        value = json.dumps(fact.snapshot(key)).encode()
                        await producer.send(changelog, value, key=("call:" + encode_key(key)).encode(),
                                            partition=0)  # fmt: skip
        finally:
            await producer.stop()
        load_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "p0"
            store = RocksStore(path, {"changelog": changelog, "partition": 0}, cache_bytes=16 << 20)
            pending: list[tuple[str, bytes | None]] = []

            def sink(key: str, value: bytes | None) -> None:
                pending.append((key, value))
                if len(pending) >= 10_000:
                    store.apply(pending, None)
                    pending.clear()

            full = Assembler(registry)
            t0 = time.perf_counter()
            result = await restore_partition(full, changelog, 0, settings, timeout=3600, sink=sink)
            store.apply(pending, result.end_offset)
            full_s = time.perf_counter() - t0
            assert full.inert_calls == calls, full.inert_calls
            store.flush()
            store.db.compact_range(None, None)
            disk = _dir_bytes(path)
            store.close()

            t0 = time.perf_counter()
            store = RocksStore(path, {"changelog": changelog, "partition": 0}, cache_bytes=16 << 20)
            warm = Assembler(registry)
            loaded = sum(1 for k, v in store.scan() if warm.restore(k, v) is None)
            checkpoint = store.checkpoint()
            tail = await restore_partition(warm, changelog, 0, settings, timeout=3600,
                                           start=checkpoint)  # fmt: skip
            checkpoint_s = time.perf_counter() - t0
            store.close()
            assert warm.inert == full.inert
        return {
            "calls": calls,
            "load_seconds": round(load_s, 1),
            "full_restore_seconds": round(full_s, 2),
            "full_restore_records": result.records,
            "checkpoint_restore_seconds": round(checkpoint_s, 2),
            "checkpoint_store_records": loaded,
            "checkpoint_tail_records": tail.records,
            "store_bytes_on_disk": disk,
            "store_bytes_per_call": round(disk / calls, 1),
        }
    finally:
        async with admin_client(settings) as admin:
            await admin.delete_topics(list(settings.topics.all().values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(run(args.calls))))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main())
