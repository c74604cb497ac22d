"""The worker's garbage collection policy (processor.runtime.collector): what it freezes, what it
still reclaims, and when."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from processor.runtime.collector import Collector


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
