"""The state changelog: restoring from it continues a call exactly, and its volume is linear."""

from __future__ import annotations

from processor.core.assembler import Assembler
from processor.core.events import Dispatch, encode
from processor.core.outputs import RecordSource
from processor.core.policy import Limits
from tests.unit.changelog_store import drain, restored
from tests.unit.scenario import Call, registry, turn_started


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
        drain(assembler, store, [])  # one transaction per event: each text is written
    texts = {k: v for k, v in store.items() if k.startswith("text:")}
    assert texts and all(v is None for v in texts.values())


def test_a_text_written_and_dropped_within_one_transaction_is_never_logged() -> None:
    call = Call()
    assembler = Assembler(registry(), Limits())
    for event in [turn_started(), *call.stream('{"city": "Lima"}', 4)]:
        assembler.handle(event, 100.0)
    changes = assembler.drain_changes()
    assert changes and not [c for c in changes if c.key.startswith("text:")]
    call_records = [c for c in changes if c.key.startswith("call:")]
    assert len(call_records) == 1 and len(call_records[0].value or b"") < 200


def test_a_text_logged_before_is_deleted_even_if_rewritten_in_the_last_batch() -> None:
    """A text first written in an earlier transaction keeps its tombstone."""
    call, store = Call(), {}
    assembler = Assembler(registry(), Limits())
    events = [turn_started(), *call.stream('{"city": "Lima"}', 4)]
    for event in events[:3]:
        assembler.handle(event, 100.0)
    drain(assembler, store, [])
    written = {k for k, v in store.items() if k.startswith("text:") and v is not None}
    assert written
    for event in events[3:]:
        assembler.handle(event, 100.0)
    drain(assembler, store, [])
    assert all(store[k] is None for k in written)
    assert restored(store).inert == assembler.inert


def test_terminal_calls_restore_exactly_and_absorb_their_replays() -> None:
    call, store = Call(), {}
    assembler = Assembler(registry(), Limits())
    events = [turn_started(), *call.stream('{"city": "Lima"}', 4)]
    out = [o for e in events for o in assembler.handle(e, 100.0)]
    assert [o for o in out if isinstance(o, Dispatch)]
    drain(assembler, store, [])
    again = restored(store)
    assert again.inert == assembler.inert and again.calls == {}
    replay = [o for e in events[1:] for o in again.handle(e, 101.0)]
    assert replay == [] and again.late_events == len(events) - 2  # not turn or response end


def test_the_count_bound_forgets_the_oldest_and_makes_its_events_stale() -> None:
    limits = Limits(max_inert_calls=3)
    assembler, store = Assembler(registry(), limits), {}
    calls = [
        Call(call_id=f"call_{i}", turn_id=f"turn-{i}", response_id=f"resp-{i}", ts=100.0 + i)
        for i in range(5)
    ]
    for i, call in enumerate(calls):
        for event in [turn_started(f"turn-{i}"), *call.stream('{"city": "Lima"}', 2)]:
            assembler.handle(event, 100.0 + i)
    drain(assembler, store, [])
    assert sorted(k[4] for k in assembler.inert) == ["call_2", "call_3", "call_4"]
    assert assembler.stale_before("acme") == 101.0
    again = restored(store)
    assert again.inert == assembler.inert and again.stale_before("acme") == 101.0
    # a replay of a forgotten call is stale, it does not open the call again
    source = RecordSource("fragments", 0, 0)
    out = again.handle(encode(calls[0].start()), 200.0, source=source)
    assert [o.reason for o in out] == ["stale_event"]  # type: ignore[union-attr]
    assert again.calls == {}


def test_a_malformed_changelog_record_is_skipped_with_its_reason() -> None:
    call, store = Call(), {}
    assembler = Assembler(registry(), Limits())
    for event in [turn_started(), call.start(), call.delta(1, '{"city": ')]:
        assembler.handle(event, 100.0)
    drain(assembler, store, [])
    fresh = Assembler(registry(), Limits())
    damaged = [
        ("call:not-a-key", b"{}"),
        ("text:" + "x", b'"a"'),
        ("turn:[]", b"{}"),
        ("nonsense", b"1"),
        (next(k for k in store if k.startswith("call:")), b"\xff not json"),
        (next(k for k in store if k.startswith("call:")), b'{"key": [1], "state": "x"}'),
        (next(k for k in store if k.startswith("turn:")), b"[1, 2]"),
        (next(k for k in store if k.startswith("text:")), b"{}"),
    ]
    reasons = [fresh.restore(k, v) for k, v in damaged]
    assert all(reasons), reasons
    assert fresh.calls == {} and fresh.inert == {} and fresh.control.turns == {}
    for key, value in store.items():  # the good records still restore the call exactly
        assert fresh.restore(key, value) is None
    out = fresh.handle(call.delta(2, '"Oslo"}'), 100.0) + fresh.handle(call.end(3), 100.0)
    out += fresh.handle(call.done(), 100.0)
    assert [o.arguments for o in out if isinstance(o, Dispatch)] == [{"city": "Oslo"}]
