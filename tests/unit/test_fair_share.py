"""Open-buffer admission: many tenants, or one, filling a partition cannot shut out another.

``max_open_buffers`` bounds a partition's open buffers and ``max_open_buffers_per_tenant`` a
tenant's. When the partition is full, a call of a tenant holding fewer open buffers than the
largest holder is admitted and that holder's least recently active buffer fails
``buffer_limit``; the largest holder itself is refused. (Before this rule, 10,000 tenants with
one idle call each refused every other tenant's call: ``docs/reliability.md``.)
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.events import Ledger
from processor.core.policy import Limits
from tests.unit.scenario import Call, Run, registry, turn_started

ARGS = '{"city": "Oslo"}'


def _run(total: int = 20, per_tenant: int = 10) -> Run:
    limits = Limits(max_open_buffers=total, max_open_buffers_per_tenant=per_tenant)
    return Run(assembler=Assembler(registry(), limits))


def _open(run: Run, tenant: str, n: int, now: float) -> list[Call]:
    """``n`` calls of ``tenant`` left open (started, one delta, no end)."""
    calls = [Call(call_id=f"c{i}", tenant=tenant, turn_id=f"t-{tenant}") for i in range(n)]
    for call in calls:
        run.feed(call.start(), call.delta(1, '{"ci'), now=now)
    return calls


def _refused(run: Run) -> list[tuple[str, str]]:
    return [(e.tenant, e.call_id) for e in run.of(Ledger) if e.terminal_reason == "buffer_limit"]


def test_many_tenants_with_one_idle_call_each_cannot_shut_out_another() -> None:
    run = _run(total=20)
    for i in range(20):
        _open(run, f"attacker{i:02d}", 1, now=100.0 + i)
    assert run.assembler.open_buffers == 20
    victim = Call(tenant="victim", turn_id="t-victim")
    run.feed(turn_started("t-victim", tenant="victim"), *victim.stream(ARGS), now=200.0)
    assert [d.tenant for d in run.dispatches] == ["victim"]
    assert _refused(run) == [("attacker00", "c0")]  # the least recently active one
    assert run.assembler.open_buffers == 19 and run.assembler.evictions == 1


def test_one_tenant_filling_the_partition_makes_room_from_its_own_buffers() -> None:
    run = _run(total=20, per_tenant=20)
    _open(run, "hog", 20, now=100.0)
    victim = Call(tenant="victim", turn_id="t-victim")
    *head, end, done = victim.stream(ARGS)
    run.feed(turn_started("t-victim", tenant="victim"), *head, now=200.0)
    assert _refused(run) == [("hog", "c0")]
    more = Call(call_id="c99", tenant="hog", turn_id="t-hog")  # the hog is the largest holder
    run.feed(more.start(), now=201.0)
    assert _refused(run) == [("hog", "c0"), ("hog", "c99")]
    run.feed(end, done, now=202.0)
    assert [d.tenant for d in run.dispatches] == ["victim"]
    assert run.assembler.open_buffers == 19


def test_an_active_call_outlives_idle_ones_of_the_same_size() -> None:
    run = _run(total=3)
    [active] = _open(run, "busy", 1, now=100.0)
    _open(run, "idle1", 1, now=101.0)
    _open(run, "idle2", 1, now=102.0)
    run.feed(active.delta(2, 'ty": "Oslo"}'), now=150.0)  # busy is now the most recent
    _open(run, "newcomer", 1, now=160.0)
    assert _refused(run) == [("idle1", "c0")]
    run.feed(active.end(3), now=170.0)
    assert run.assembler.call_state(active.key).value != "failed"


def test_the_largest_holder_is_refused_not_another() -> None:
    run = _run(total=4, per_tenant=4)
    _open(run, "a", 2, now=100.0)
    _open(run, "b", 2, now=101.0)
    extra = Call(call_id="c9", tenant="a", turn_id="t-a")
    run.feed(extra.start(), now=102.0)
    assert _refused(run) == [("a", "c9")]
    assert run.assembler.evictions == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=7), min_size=1, max_size=80))
def test_bounds_hold_and_a_tenant_below_the_largest_is_always_admitted(
    tenants: list[int],
) -> None:
    run = _run(total=10, per_tenant=6)
    for step, t in enumerate(tenants):
        tenant = f"t{t}"
        counts = dict(run.assembler.state.open_per_tenant)
        held = counts.get(tenant, 0)
        most = max(counts.values(), default=0)
        full = run.assembler.open_buffers >= 10
        call = Call(call_id=f"c{step}", tenant=tenant, turn_id=f"turn-{tenant}")
        run.feed(call.start(), now=100.0 + step)
        admitted = run.assembler.call_state(call.key).value != "failed"
        assert admitted == (held < 6 and (not full or most > held)), (counts, tenant)
        assert run.assembler.open_buffers <= 10
        assert all(n <= 6 for n in run.assembler.state.open_per_tenant.values())
