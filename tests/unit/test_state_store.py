"""Local state stores: the interface, the checkpoint, and what makes a store unusable."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.core.assembler import Assembler
from processor.core.events import Dispatch
from processor.core.policy import Limits
from processor.runtime.store import MemoryStore, RocksStore, StateStore
from tests.unit.scenario import Call, registry, turn_started

IDENTITY = {"changelog": "t.assembler-changelog", "partition": 0}


@pytest.fixture(params=["memory", "rocks"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    if request.param == "memory":
        return MemoryStore()
    return RocksStore(tmp_path / "p0", IDENTITY, cache_bytes=1 << 20)


def test_get_put_delete_scan_and_checkpoint(store: StateStore) -> None:
    assert store.checkpoint() is None
    store.apply([("turn:a", b"1"), ("call:b", b"2"), ("call:a", b"3"), ("text:x", None)], 7)
    store.put("cmd:z", b"4")
    store.delete("turn:a")
    assert store.get("call:a") == b"3" and store.get("turn:a") is None
    assert list(store.scan("call:")) == [("call:a", b"3"), ("call:b", b"2")]
    assert [k for k, _ in store.scan()] == ["call:a", "call:b", "cmd:z"]
    assert store.checkpoint() == 7
    store.apply([("call:a", None)], None)  # records without a checkpoint keep the old one
    assert store.checkpoint() == 7 and store.get("call:a") is None
    store.flush()
    store.clear()
    assert store.checkpoint() is None and list(store.scan()) == []
    store.close()


def test_a_store_survives_reopening_and_refuses_another_partition(tmp_path: Path) -> None:
    store = RocksStore(tmp_path / "p0", IDENTITY, cache_bytes=1 << 20)
    store.apply([("turn:a", b"1")], 42)
    store.close()
    again = RocksStore(tmp_path / "p0", IDENTITY, cache_bytes=1 << 20)
    assert again.checkpoint() == 42 and again.get("turn:a") == b"1"
    again.close()
    other, why = RocksStore.open_or_rebuild(
        tmp_path / "p0", {**IDENTITY, "partition": 1}, cache_bytes=1 << 20
    )
    assert why is not None and other.checkpoint() is None and list(other.scan()) == []
    other.close()


def test_a_corrupt_store_is_rebuilt_empty(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    store = RocksStore(path, IDENTITY, cache_bytes=1 << 20)
    store.apply([("turn:a", b"1")], 3)
    store.close()
    for file in path.iterdir():
        if file.name.startswith(("CURRENT", "MANIFEST")):
            file.write_bytes(b"garbage")
    rebuilt, why = RocksStore.open_or_rebuild(path, IDENTITY, cache_bytes=1 << 20)
    assert why is not None and rebuilt.checkpoint() is None
    rebuilt.close()


def test_an_assembler_restored_from_a_store_continues_the_call(store: StateStore) -> None:
    call = Call()
    first = Assembler(registry(), Limits())
    for event in [turn_started(), call.start(), call.delta(1, '{"city": ')]:
        first.handle(event, 100.0)
    store.apply([(c.key, c.value) for c in first.drain_changes()], 5)
    second = Assembler(registry(), Limits())
    assert all(second.restore(k, v) is None for k, v in store.scan())
    out = second.handle(call.delta(2, '"Oslo"}'), 100.0) + second.handle(call.end(3), 100.0)
    out += second.handle(call.done(), 100.0)
    assert [o.arguments for o in out if isinstance(o, Dispatch)] == [{"city": "Oslo"}]
    store.close()
