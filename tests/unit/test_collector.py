"""The worker's garbage collection policy (processor.runtime.collector): what it freezes, what it
still reclaims, and when."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from processor.runtime import collector
from processor.runtime.collector import RESTORE_STRIDE, Collector


class Node:
    """A container the cyclic collector tracks (and that can be weakly referenced)."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


def scanned(obj: object) -> bool:
    """Whether the collector's generations (not the permanent one) hold ``obj``."""
    return any(o is obj for o in gc.get_objects())


@pytest.fixture(autouse=True)
def _clean_generations() -> Iterator[None]:
    gc.collect()
    gc.disable()  # only the collections a test makes: an automatic one could promote a cycle
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()  # no test leaves its frozen objects to the others
        gc.collect()


def test_settle_freezes_what_survives_a_full_collection() -> None:
    kept = Node()
    collector = Collector(1.0)
    assert scanned(kept)
    collector.settle(now=0.0)
    assert not scanned(kept)
    assert collector.frozen() > 0 and collector.settles == 1


def test_settle_reclaims_a_frozen_cycle_that_died_since() -> None:
    collector = Collector(1.0)
    node, ref = cycle()
    collector.settle(now=0.0)  # frozen while alive
    del node
    gc.collect()
    assert ref() is not None  # a full collection no longer sees it: frozen garbage is kept
    collector.settle(now=10.0)  # unfreezes first, so the dead cycle is reclaimed
    assert ref() is None


def test_age_freezes_survivors_once_per_interval() -> None:
    collector = Collector(1.0)
    collector.settle(now=100.0)
    kept = Node()
    assert collector.age(now=100.5) is False  # within the interval: nothing happens
    assert scanned(kept)
    assert collector.age(now=101.0) is True
    assert not scanned(kept)
    later = Node()
    assert collector.age(now=101.9) is False and scanned(later)
    assert collector.age(now=102.0) is True and not scanned(later)


def test_age_collects_young_garbage_cycles_before_freezing() -> None:
    collector = Collector(1.0)
    node, ref = cycle()
    del node  # garbage, not yet collected
    assert collector.age(now=5.0) is True
    assert ref() is None  # reclaimed by the young collection, not frozen with the survivors


def test_interval_zero_leaves_cpython_default() -> None:
    collector = Collector(0.0)
    kept = Node()
    before = gc.get_freeze_count()
    assert collector.settle(now=0.0) == 0.0
    assert collector.age(now=1e9) is False
    assert gc.get_freeze_count() == before and scanned(kept) and collector.settles == 0


def test_a_restore_freezes_its_state_every_stride_under_the_installed_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(collector, "_installed", None)
    kept = Node()
    collector.restored(RESTORE_STRIDE)  # no policy installed (offline tools, tests): nothing
    assert scanned(kept)
    policy = collector.install(1.0)
    assert collector.installed() is policy
    collector.restored(RESTORE_STRIDE - 1)
    assert scanned(kept)
    collector.restored(RESTORE_STRIDE)
    assert not scanned(kept)
    later = Node()
    collector.restored(2 * RESTORE_STRIDE)
    assert not scanned(later)
    monkeypatch.setattr(collector, "_installed", Collector(0.0))  # PROCESSOR_GC_..._SECONDS=0
    newest = Node()
    collector.restored(3 * RESTORE_STRIDE)
    assert scanned(newest)
