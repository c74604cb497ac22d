"""Any string reads back exactly from a state key, in both stores (issue 30, item 8).

docs/guarantees.md promises that state keys do not depend on the identifier alphabet: each is
``kind:`` + :func:`~processor.core.events.encode_key` of a tuple, never a joined string, so any
string (a separator, quotes, NUL, a lone surrogate, thousands of characters) reads back exactly.
Here that is a property over the key builders the Assembler uses and both stores: every key
written (by ``apply`` and by ``put``) is listed by ``scan`` exactly once under its kind, decodes
to the parts it was built from, gives back its value, and no two different tuples share a key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from processor.core.control import (
    response_state_key,
    tenant_state_key,
    turn_state_key,
)
from processor.core.events import decode_key, encode_key
from processor.runtime.store import MemoryStore, RocksStore, StateStore

ANY_CHAR = st.characters(codec=None) | st.characters(categories=["Cs"])  # lone surrogates too
ANY_TEXT = st.text(ANY_CHAR, max_size=40) | st.text(ANY_CHAR, min_size=200, max_size=3000)

KINDS: dict[str, tuple[int, Callable[..., str]]] = {
    "call:": (5, lambda *p: "call:" + encode_key(p)),
    "text:": (6, lambda *p: "text:" + encode_key(p)),
    "turn:": (2, turn_state_key),
    "resp:": (3, response_state_key),
    "tenant:": (1, tenant_state_key),
}


@st.composite
def tuples(draw: st.DrawFn) -> tuple[str, tuple[str | int, ...]]:
    kind = draw(st.sampled_from(sorted(KINDS)))
    size = KINDS[kind][0]
    parts: list[str | int] = [draw(ANY_TEXT) for _ in range(size)]
    if kind == "text:":
        parts[-1] = draw(st.integers(0, 2**40))  # a delta's position
    return kind, tuple(parts)


@pytest.fixture(scope="module")
def rocks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocksStore]:
    path: Path = tmp_path_factory.mktemp("keys") / "p0"
    store = RocksStore(path, {"changelog": "t.keys", "partition": 0}, cache_bytes=1 << 20)
    yield store
    store.close()


PROPERTY = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@PROPERTY
@given(st.lists(tuples(), min_size=1, max_size=8))
@example([("turn:", ("a\x1fb", "c")), ("turn:", ("a", "b\x1fc"))])
@example([("tenant:", ("\ud800",)), ("tenant:", ("",)), ("tenant:", ("\ufffd",))])
@example([("call:", ("\x00", '"', "\\", "]", "~"))])
@example([("tenant:", ("x" * 3000,)), ("tenant:", ("x" * 2999,))])
def test_any_strings_read_back_exactly_from_both_stores(
    rocks: RocksStore, items: list[tuple[str, tuple[str | int, ...]]]
) -> None:
    built = {(kind, parts): KINDS[kind][1](*parts) for kind, parts in items}
    by_key = {key: item for item, key in built.items()}
    assert len(by_key) == len(built), "two different tuples share a state key"
    for store in (MemoryStore(), rocks):
        _round_trip(store, built)


def _round_trip(store: StateStore, built: dict[tuple[str, tuple[str | int, ...]], str]) -> None:
    store.clear()
    keys = sorted(built.values())
    half = len(keys) // 2
    store.apply([(k, k.encode("utf-8") + b"|v") for k in keys[:half]], 1)
    for key in keys[half:]:
        store.put(key, key.encode("utf-8") + b"|v")
    for (kind, parts), key in built.items():
        key.encode("utf-8")  # a state key is always a valid Kafka key
        assert store.get(key) == key.encode("utf-8") + b"|v"
        assert key.startswith(kind)
        assert decode_key(key[len(kind) :]) == list(parts)
        listed = [k for k, _ in store.scan(kind) if k == key]
        assert listed == [key]
    assert sorted(k for k, _ in store.scan()) == keys
