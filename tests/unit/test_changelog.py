"""The state changelog: restoring from it continues a call exactly, and its volume is linear."""

from __future__ import annotations

from processor.core.assembler import Assembler
from processor.core.events import Dispatch
from processor.core.policy import Limits
from tests.unit.scenario import Call, registry, turn_started


def restored(store: dict[str, bytes | None]) -> Assembler:
    fresh = Assembler(registry(), Limits())
    for key, value in store.items():
        fresh.restore(key, value)
    return fresh


def drain(assembler: Assembler, store: dict[str, bytes | None], sizes: list[int]) -> None:
    for change in assembler.drain_changes():
        store[change.key] = change.value
        sizes.append(len(change.key) + len(change.value or b""))


def test_restore_mid_call_at_every_position_continues_identically() -> None:
    call = Call()
    events = [turn_started(), *call.stream('{ "city" : "Reykjav\\u00edk" }', 7)]
    for cut in range(1, len(events)):
        assembler, store = Assembler(registry(), Limits()), {}
        for event in events[:cut]:
            assembler.handle(event, 100.0)
        drain(assembler, store, [])
        assembler = restored(store)
        out = [o for e in events[cut:] for o in assembler.handle(e, 100.0)]
        dispatches = [o for o in out if isinstance(o, Dispatch)]
        assert [d.arguments["city"] for d in dispatches] == ["Reykjavík"], cut


def test_restore_keeps_out_of_order_deltas_waiting() -> None:
    call, store = Call(), {}
    assembler = Assembler(registry(), Limits())
    for event in (turn_started(), call.start(), call.delta(3, '"}'), call.delta(1, '{"city": ')):
        assembler.handle(event, 100.0)
    drain(assembler, store, [])
    assembler = restored(store)
    out = assembler.handle(call.delta(2, '"Oslo'), 100.0) + assembler.handle(call.end(4), 100.0)
    out += assembler.handle(call.done(), 100.0)
    assert [o.arguments for o in out if isinstance(o, Dispatch)] == [{"city": "Oslo"}]


def test_changelog_volume_is_linear_in_the_call_size() -> None:
    """One drain (one transaction) per delta: the worst case for snapshot-based changelogs."""
    totals = []
    for size in (200, 2000):
        call, store, sizes = Call(), {}, []
        assembler = Assembler(registry(), Limits())
        text = '{"city": "' + "x" * (size * 10) + '"}'
        for event in [turn_started(), *call.stream(text, size)]:
            assembler.handle(event, 100.0)
            drain(assembler, store, sizes)
        totals.append(sum(sizes))
    assert totals[1] / totals[0] < 12  # 10x the deltas: ~10x the bytes, not ~100x


def test_text_records_are_deleted_once_the_call_ends() -> None:
    call, store = Call(), {}
    assembler = Assembler(registry(), Limits())
    for event in [turn_started(), *call.stream('{"city": "Lima"}', 4)]:
        assembler.handle(event, 100.0)
    drain(assembler, store, [])
    texts = {k: v for k, v in store.items() if k.startswith("text:")}
    assert texts and all(v is None for v in texts.values())
