"""A flood of turn.started cannot grow a partition's turn records without bound, nor starve others.

``max_turns_per_tenant`` and ``max_turns`` bound the turn records. A new binding past either
forgets the oldest turn of the tenant holding the most that is neither cancelled nor has an
open call (a late call of a forgotten turn waits for a binding and fails permission_denied:
fail-safe); when none can go, the turn.started is refused and audited ``turn_limit``.
"""

from __future__ import annotations

from processor.core.assembler import Assembler
from processor.core.events import Audit
from processor.core.policy import Limits, fair_share_payers
from tests.unit.scenario import Call, Run, registry, turn_cancelled, turn_started

ARGS = '{"city": "Oslo"}'


def _run(total: int = 50, per_tenant: int = 10) -> Run:
    limits = Limits(max_turns=total, max_turns_per_tenant=per_tenant)
    return Run(assembler=Assembler(registry(), limits))


def test_a_flooding_tenant_recycles_its_own_oldest_idle_turns() -> None:
    run = _run()
    for i in range(1000):
        run.feed(turn_started(f"flood-{i}", tenant="attacker"), now=100.0 + i / 100)
    turns = run.assembler.control.turns
    assert len(turns) == 10
    assert sorted(t for _, t in turns) == sorted(f"flood-{i}" for i in range(990, 1000))
    assert run.assembler.turn_evictions == 990
    victim = Call(tenant="victim", turn_id="t-victim")
    run.feed(turn_started("t-victim", tenant="victim"), *victim.stream(ARGS), now=200.0)
    assert [d.tenant for d in run.dispatches] == ["victim"]


def test_many_flooding_tenants_are_bounded_in_all_and_a_victim_still_binds() -> None:
    run = _run(total=50, per_tenant=10)
    for i in range(2000):
        run.feed(turn_started(f"t{i}", tenant=f"attacker{i % 40}"), now=100.0 + i / 100)
    assert len(run.assembler.control.turns) == 50
    victim = Call(tenant="victim", turn_id="t-victim")
    run.feed(turn_started("t-victim", tenant="victim"), *victim.stream(ARGS), now=200.0)
    assert [d.tenant for d in run.dispatches] == ["victim"]
    assert len(run.assembler.control.turns) == 50


def test_cancelled_turns_and_turns_with_open_calls_are_never_forgotten() -> None:
    run = _run(total=50, per_tenant=2)  # the cancelled turn does not count
    run.feed(turn_started("cancelled", tenant="a"), turn_cancelled("cancelled", tenant="a"))
    open_call = Call(tenant="a", turn_id="open")
    run.feed(turn_started("open", tenant="a"), open_call.start())
    run.feed(turn_started("idle", tenant="a"))
    run.feed(turn_started("new1", tenant="a"))  # forgets "idle", the only one that may go
    assert {t for _, t in run.assembler.control.turns} == {"cancelled", "open", "new1"}
    run.feed(turn_started("new2", tenant="a"))  # forgets "new1"
    # a late call of the cancelled turn is still refused: the cancellation was kept
    late = Call(call_id="late", tenant="a", turn_id="cancelled")
    run.feed(*late.stream(ARGS))
    assert run.dispatches == []
    assert run.ledger("late").terminal_reason == "user_stop"


def test_when_nothing_can_go_the_binding_is_refused_and_audited() -> None:
    run = _run(total=50, per_tenant=2)
    for turn in ("busy1", "busy2"):  # each has an open call: neither may be forgotten
        run.feed(turn_started(turn, tenant="a"), Call(tenant="a", turn_id=turn).start())
    run.feed(turn_started("third", tenant="a"))
    [audit] = [a for a in run.of(Audit) if a.command_type == "turn.started"]
    assert (audit.outcome, audit.rejection) == ("rejected", "turn_limit")
    call = Call(call_id="late", tenant="a", turn_id="third")
    run.feed(*call.stream(ARGS))
    run.tick(run.now + 3600)
    assert run.dispatches == []
    assert run.ledger("late").terminal_reason == "permission_denied"


def test_cancelled_turns_do_not_count_a_tenant_with_many_can_still_start_turns() -> None:
    """Found by the restore test: 300,000 cancelled turns of one tenant refused every new one."""
    run = _run(total=5, per_tenant=3)
    for i in range(20):
        run.feed(turn_started(f"c{i}", tenant="a"), turn_cancelled(f"c{i}", tenant="a"))
    call = Call(tenant="a", turn_id="fresh")
    run.feed(turn_started("fresh", tenant="a"), *call.stream(ARGS))
    assert [d.turn_id for d in run.dispatches] == ["fresh"]
    assert len(run.assembler.control.turns) == 21  # every cancellation kept


def test_a_forgotten_turn_fails_safe_its_late_call_is_not_dispatched() -> None:
    run = _run(total=50, per_tenant=1)
    run.feed(turn_started("old", tenant="a"))
    run.feed(turn_started("newer", tenant="a"))  # forgets "old"
    late = Call(tenant="a", turn_id="old")
    run.feed(*late.stream(ARGS))
    run.tick(run.now + 3600)
    assert run.dispatches == []
    assert run.ledger("call_0").terminal_reason == "permission_denied"


def test_a_tie_goes_to_the_incumbent_the_newcomer_forgets_its_own_turn() -> None:
    """Issue 30, item 6: at a tie the largest holder was picked by (count, name), so tenant "a"
    holding as many turns as "b" forgot b's bound turn, whose next call failed
    permission_denied. The open-buffer bound refuses a tied newcomer; both now share one rule."""
    run = _run(total=4, per_tenant=10)
    for tenant in ("a", "b"):
        for i in range(2):
            run.feed(turn_started(f"{tenant}{i}", tenant=tenant), now=100.0 + i)
    run.feed(turn_started("a-new", tenant="a"), now=110.0)  # a holds 2, b holds 2: a pays
    assert sorted(t for _, t in run.assembler.control.turns) == ["a-new", "a1", "b0", "b1"]
    b_call = Call(call_id="b-call", tenant="b", turn_id="b0")
    run.feed(*b_call.stream(ARGS), now=120.0)
    assert [d.call_id for d in run.dispatches] == ["b-call"]
    # one holding fewer than the largest still gets in, at the largest holder's expense
    run.feed(turn_started("c0", tenant="c"), now=130.0)
    assert len(run.assembler.control.turns) == 4 and ("c", "c0") in run.assembler.control.turns


def test_both_bounds_use_one_admission_rule() -> None:
    assert fair_share_payers({"a": 2, "b": 2}, "a") == ["a"]  # a tie: the newcomer pays
    assert fair_share_payers({"a": 2, "b": 2}, "b") == ["b"]
    assert fair_share_payers({"a": 1, "b": 3, "c": 3}, "a") == ["b", "c"]
    assert fair_share_payers({"b": 3}, "new") == ["b"]
    assert fair_share_payers({}, "new") == ["new"]
    assert fair_share_payers({"a": ["t1", "t2"], "b": ["t1"]}, "b") == ["a"]
