"""A state changelog kept in a dict, for unit tests: what an Assembler drains into it, and a fresh
Assembler restored from it (as a worker restores a partition from its changelog topic)."""

from __future__ import annotations

from processor.core.assembler import Assembler
from processor.core.policy import Limits
from tests.unit.scenario import registry


def restored(store: dict[str, bytes | None], limits: Limits | None = None) -> Assembler:
    fresh = Assembler(registry(), limits or Limits())
    for key, value in store.items():
        fresh.restore(key, value)
    return fresh


def drain(assembler: Assembler, store: dict[str, bytes | None], sizes: list[int]) -> None:
    for change in assembler.drain_changes():
        store[change.key] = change.value
        sizes.append(len(change.key) + len(change.value or b""))
