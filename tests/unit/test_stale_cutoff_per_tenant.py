"""A tenant's flood moves only its own stale cutoff (issue 30, the gap left by item 3).

The count bound forgets the oldest terminal call early and makes fragment events dated up to the
latest ``ts`` that call's events carried stale, so a replay of it can never open it again. That
cutoff was one value for the partition: a tenant stamping its own flood up to the clock-skew
allowance ahead of the worker made every other tenant's on-time fragments on the partition stale
(dead-lettered, their calls lost) for up to that allowance. Now the cutoff is kept per tenant; the
old partition-wide value is only a floor (older changelogs, or too many tenants holding one).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import (
    DeadLetter,
    Dispatch,
    InputEvent,
    ResponseQuarantined,
    ResponseStatus,
)
from processor.core.policy import Limits
from tests.unit.changelog_store import drain, restored
from tests.unit.scenario import Call, registry, turn_started
from tests.unit.worker_feed import SKEW, feed


def _dispatched(out: list[object]) -> int:
    return sum(isinstance(o, Dispatch) for o in out)


def _flood(
    assembler: Assembler, now: float, count: int, ahead: float, tenant: str = "globex"
) -> int:
    """``tenant``'s calls stamped ``ahead`` of the worker's clock (each a little later than the
    one before), each dispatched at once, so the count bound forgets them one after another;
    the number dispatched."""
    dispatched = 0
    for i in range(count):
        turn = f"{tenant}-{now}-{i}"
        call = Call(tenant=tenant, turn_id=turn, response_id=f"r-{turn}", call_id="c",
                    ts=now + ahead + i / 100)  # fmt: skip
        assembler.handle(turn_started(turn, tenant=tenant), now)
        dispatched += _dispatched(feed(assembler, call.stream('{"city": "Rome"}'), now))
    assembler.tick(now)
    return dispatched


def test_a_flood_stamped_ahead_does_not_make_another_tenants_fragments_stale() -> None:
    assembler = Assembler(registry(), Limits(max_inert_calls=4), verifier=AllowUnsigned())
    assert _flood(assembler, 100.0, 12, ahead=SKEW - 1) == 12  # forgotten early, by the count bound
    assert 100.0 + SKEW - 1 <= assembler.stale_before("globex") <= 100.0 + SKEW
    assert assembler.stale_before("acme") == 0.0
    call = Call(ts=101.0)  # acme, on time
    out = feed(assembler, [turn_started(), *call.stream('{"city": "Oslo"}')], 101.0)
    assert [o.reason for o in out if isinstance(o, DeadLetter)] == []  # was: stale_event x4
    assert _dispatched(out) == 1


def test_the_flooding_tenant_still_cannot_reopen_its_own_forgotten_calls() -> None:
    assembler = Assembler(registry(), Limits(max_inert_calls=4), verifier=AllowUnsigned())
    first = Call(tenant="globex", turn_id="g1", response_id="rg1", ts=100.0 + SKEW)
    events = [turn_started("g1", tenant="globex"), *first.stream('{"city": "Oslo"}')]
    assert _dispatched(feed(assembler, events, 100.0)) == 1
    _flood(assembler, 101.0, 8, ahead=0.0)
    assert first.key.as_tuple not in assembler.inert
    again = feed(assembler, events, 150.0)
    assert _dispatched(again) == 0
    assert {o.reason for o in again if isinstance(o, DeadLetter)} == {"stale_event"}


def test_turns_and_responses_of_the_flooding_tenant_are_forgotten_with_its_calls() -> None:
    """Memory stays bounded under the flood: the flooding tenant's turns and responses go once
    every event they could have had is stale by its own cutoff; the other tenant's stay."""
    assembler = Assembler(registry(), Limits(max_inert_calls=4), verifier=AllowUnsigned())
    bystander = Call(ts=100.0)
    assert _dispatched(feed(assembler, [turn_started(), *bystander.stream("{}")], 100.0)) == 0
    for step in range(20):
        _flood(assembler, 100.0 + 10 * step, 5, ahead=SKEW - 1)
    globex_turns = [tk for tk in assembler.control.turns if tk[0] == "globex"]
    globex_responses = [rk for rk in assembler.control.responses if rk[0] == "globex"]
    # each flood step is 10 s; a record last seen at t goes once the cutoff passes t + skew
    assert 0 < len(globex_turns) <= 5 * (SKEW / 10 + 1)
    assert 0 < len(globex_responses) <= 5 * (SKEW / 10 + 1)
    assert ("acme", "turn-1") in assembler.control.turns  # never the bystander's


def test_per_tenant_cutoffs_survive_a_restore_and_are_pruned_by_retention() -> None:
    limits = Limits(max_inert_calls=4, retention_seconds=3600.0)
    assembler = Assembler(registry(), limits, verifier=AllowUnsigned())
    store: dict[str, bytes | None] = {}
    _flood(assembler, 100.0, 8, ahead=30.0)
    drain(assembler, store, [])
    assert any(k.startswith("meta:stale:") for k, v in store.items() if v is not None)
    again = restored(store, limits)
    assert again.stale_before("globex") == assembler.stale_before("globex") >= 130.0
    assert again.stale_before("acme") == 0.0
    replay = Call(tenant="globex", turn_id="globex-100.0-0", response_id="r-globex-100.0-0",
                  call_id="c", ts=130.0)  # fmt: skip
    out = feed(again, replay.stream('{"city": "Rome"}'), 200.0)
    assert {o.reason for o in out if isinstance(o, DeadLetter)} == {"stale_event"}
    # once the retention window has passed the cutoff, it says nothing more: pruned
    again.tick(130.0 + 3600.0 + 1.0)
    drain(again, store, [])
    assert not any(k.startswith("meta:stale:") for k, v in store.items() if v is not None)
    assert again.stale_before("globex") == 0.0


def test_an_old_partition_wide_cutoff_is_still_honoured_as_a_floor() -> None:
    """A changelog written before cutoffs were per tenant holds ``meta:evicted_before``: it
    applies to every tenant (the safe reading), until the retention window passes it."""
    limits = Limits(retention_seconds=3600.0)
    store: dict[str, bytes | None] = {"meta:evicted_before": b'{"evicted_before":150.0}'}
    again = restored(store, limits)
    assert again.stale_before("acme") == again.stale_before("globex") == 150.0
    out = feed(again, Call(ts=140.0).stream("{}"), 141.0)
    assert {o.reason for o in out if isinstance(o, DeadLetter)} == {"stale_event"}
    again.tick(150.0 + 3600.0 + 1.0)
    assert again.stale_before("acme") == 0.0


def test_too_many_tenants_with_a_cutoff_fold_into_the_floor() -> None:
    """The cutoffs are bounded: past ``max_inert_calls`` tenants holding one, the lowest tenth
    become the floor for all (stricter, never looser)."""
    assembler = Assembler(registry(), Limits(max_inert_calls=10), verifier=AllowUnsigned())
    for i in range(40):
        _flood(assembler, 100.0 + i, 1, ahead=0.0, tenant=f"t{i:02d}")
    assert len(assembler.state.stale_cutoffs) <= 10
    floor = assembler.state.evicted_before
    assert floor > 0.0
    for i in range(40):  # no tenant's cutoff went backwards: each is its own or the floor
        assert assembler.stale_before(f"t{i:02d}") >= min(100.0 + i, floor)


@settings(max_examples=40, deadline=None)
@given(
    ahead=st.floats(min_value=0.0, max_value=SKEW - 1),
    steps=st.integers(min_value=1, max_value=6),
    on_time=st.floats(min_value=0.0, max_value=SKEW),
)
def test_no_flood_of_one_tenant_makes_anothers_fresh_call_stale(
    ahead: float, steps: int, on_time: float
) -> None:
    assembler = Assembler(registry(), Limits(max_inert_calls=3), verifier=AllowUnsigned())
    for step in range(steps):
        _flood(assembler, 100.0 + step, 4, ahead=ahead)
    now = 100.0 + steps
    call = Call(ts=now + on_time)  # any ts the decoder accepts
    out = feed(assembler, [turn_started(), *call.stream('{"city": "Oslo"}')], now)
    assert not [o for o in out if isinstance(o, DeadLetter)]
    assert _dispatched(out) == 1


# ------------------------------------------------------------------ the response-record bound
# The same class, found while moving the cutoff: a flood of response.ended events for distinct
# responses (no calls) made one record each, kept for the whole retention window: memory grew
# without bound. Now ``max_responses`` bounds them, with the fair-share rule and a cutoff.


def _ends(tenant: str, count: int, ts: float, status: ResponseStatus) -> list[InputEvent]:
    return [
        Call(tenant=tenant, turn_id=f"{tenant}-t{i}", response_id=f"r{i}", ts=ts).response_ended(
            status
        )
        for i in range(count)
    ]


def test_a_burst_of_response_ends_is_bounded_and_spares_the_other_tenant() -> None:
    """5,000 ends in one second against a bound of 50: the first eviction forgets a response
    last seen just now, so the flooding tenant's events up to the skew ahead are stale: the
    burst is refused, memory holds, and the other tenant (holding less) never pays."""
    assembler = Assembler(registry(), Limits(max_responses=50), verifier=AllowUnsigned())
    assembler.handle(
        ResponseQuarantined(
            command_id="q1", issued_by="ops", issued_at=100.0, reason="bad output",
            tenant="acme", turn_id="q", response_id="rq",
        ),
        100.0,
    )  # fmt: skip
    feed(assembler, _ends("acme", 10, 100.0, ResponseStatus.FAILED), 100.0)
    flood = [
        Call(tenant="globex", turn_id=f"g{i}", response_id=f"r{i}", ts=100.0 + i / 1000)
        .response_ended(ResponseStatus.FAILED)
        for i in range(5_000)
    ]  # fmt: skip
    out = feed(assembler, flood, 101.0)
    responses = assembler.control.responses
    assert len(responses) <= 50
    assert assembler.response_evictions >= 1
    assert sum(isinstance(o, DeadLetter) and o.reason == "stale_event" for o in out) > 4_900
    assert responses[("acme", "q", "rq")].quarantined
    assert sum(rk[0] == "acme" for rk in responses) == 11  # acme holds less: never pays
    assert assembler.stale_before("acme") == 0.0
    # a forgotten verdict cannot be replaced: the first flood response's events are stale now
    late = Call(tenant="globex", turn_id="g0", response_id="r0", ts=100.0)
    out = feed(assembler, [late.response_ended(ResponseStatus.COMPLETED), late.start()], 102.0)
    assert [o.reason for o in out if isinstance(o, DeadLetter)] == ["stale_event"] * 2


def test_a_steady_tenant_over_the_response_bound_keeps_working() -> None:
    """One response every 2 s against a bound of 50 (100 s of records, more than the skew):
    the oldest goes each time, its cutoff stays behind the clock, every call still acts."""
    assembler = Assembler(registry(), Limits(max_responses=50), verifier=AllowUnsigned())
    dispatched = 0
    for i in range(200):
        now = 100.0 + 2 * i
        call = Call(turn_id=f"t{i}", response_id=f"r{i}", ts=now)
        events = [turn_started(f"t{i}"), *call.stream('{"city": "Oslo"}')]
        dispatched += _dispatched(feed(assembler, events, now))
        assembler.tick(now)
    assert dispatched == 200
    assert len(assembler.control.responses) <= 50
    assert assembler.response_evictions == 150
    assert assembler.stale_before("acme") < 100.0 + 2 * 199
