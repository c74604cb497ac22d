"""The causal rule (issue 8): a call acts only once every control record committed before its
terminal events were read has been applied, whatever the batches.

The runtime gives each fragment record a *barrier* (control's committed end offset, read after
the fetch) and reports how far control is applied with ``advance_control``. These tests drive
the Assembler the way the worker does, with control offsets as positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import Dispatch, InputEvent, OutputRecord, TenantStopped
from processor.core.policy import Limits
from processor.core.states import CallState
from tests.unit.scenario import Call, registry, turn_cancelled, turn_started

WEATHER = '{"city": "Paris"}'


@dataclass
class Partition:
    """One partition as the worker drives it: control offsets count from 0."""

    assembler: Assembler

    def __post_init__(self) -> None:
        self.out: list[OutputRecord] = []
        self.control_applied = 0

    def control(self, event: InputEvent, offset: int) -> None:
        self.out += self.assembler.handle(event, 100.0)
        self.control_applied = offset + 1
        self.out += self.assembler.advance_control(offset + 1, 100.0)

    def fragment(self, event: InputEvent, barrier: int) -> None:
        self.out += self.assembler.handle(event, 100.0, barrier=barrier)

    def position(self, position: int) -> None:
        self.out += self.assembler.advance_control(position, 100.0)

    @property
    def dispatches(self) -> list[Dispatch]:
        return [o for o in self.out if isinstance(o, Dispatch)]


def fresh() -> Partition:
    return Partition(Assembler(registry(), Limits(), verifier=AllowUnsigned()))


def test_a_cancel_committed_before_the_terminal_wins_when_read_later() -> None:
    """Issue 8's backlog case: the terminal is read in an earlier batch than the cancel."""
    p, call = fresh(), Call()
    p.control(turn_started(), 0)
    events = call.stream(WEATHER)
    # control holds turn.started (0) and turn.cancelled (1): its committed end is 2
    for event in events:
        p.fragment(event, barrier=2)
    assert p.dispatches == []
    assert p.assembler.call_state(call.key) is CallState.AWAITING_RESPONSE
    assert p.assembler.holds_for_control
    p.control(turn_cancelled(), 1)
    assert p.dispatches == []
    assert p.assembler.call_state(call.key) is CallState.CANCELLED


def test_without_a_cancel_the_call_acts_once_control_is_applied() -> None:
    p, call = fresh(), Call()
    p.control(turn_started(), 0)
    for event in call.stream(WEATHER):
        p.fragment(event, barrier=3)  # two unrelated control records follow
    assert p.dispatches == []
    p.control(turn_started("other-turn"), 1)
    assert p.dispatches == []
    p.position(3)  # e.g. a transaction marker stepped over: the consumer's position
    assert len(p.dispatches) == 1
    assert not p.assembler.holds_for_control


def test_a_barrier_already_applied_holds_nothing() -> None:
    p, call = fresh(), Call()
    p.control(turn_started(), 0)
    for event in call.stream(WEATHER):
        p.fragment(event, barrier=1)
    assert len(p.dispatches) == 1


def test_the_response_ends_barrier_counts_too() -> None:
    """A stop committed between call.ended and response.ended must also win."""
    p, call = fresh(), Call()
    p.control(turn_started(), 0)
    *body, done = call.stream(WEATHER)
    for event in body:
        p.fragment(event, barrier=1)
    stop = TenantStopped(tenant="acme", command_id="s", issued_by="ops", issued_at=100.0)
    p.fragment(done, barrier=2)  # the stop (offset 1) was committed before response.ended
    assert p.dispatches == []
    p.control(stop, 1)
    assert p.dispatches == []
    assert p.assembler.call_state(call.key) is CallState.CANCELLED


def test_a_held_call_keeps_its_barrier_across_a_restore() -> None:
    p, call = fresh(), Call()
    p.control(turn_started(), 0)
    for event in call.stream(WEATHER):
        p.fragment(event, barrier=2)
    restored = fresh()
    for change in p.assembler.drain_changes():
        restored.assembler.restore(change.key, change.value)
    restored.position(1)  # the committed control offset after the restart
    assert restored.dispatches == []
    restored.control(turn_cancelled(), 1)
    assert restored.dispatches == []
    assert restored.assembler.call_state(call.key) is CallState.CANCELLED


def test_a_restored_held_call_acts_when_control_is_caught_up() -> None:
    p, call = fresh(), Call()
    p.control(turn_started(), 0)
    for event in call.stream(WEATHER):
        p.fragment(event, barrier=2)
    restored = fresh()
    for change in p.assembler.drain_changes():
        restored.assembler.restore(change.key, change.value)
    restored.position(2)
    assert len(restored.dispatches) == 1


# ----------------------------------------------------------------------------- property

# A world of one turn: control and fragments written in some global order. Each fragment's
# barrier is the number of control records written before the worker read it (at least those
# written before the fragment itself). The worker reads the two topics in any interleaving
# that keeps each topic's order, in any batching.

Write = tuple[str, Any]  # ("control", event) | ("fragment", event)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Write], list[int], bool, bool]:
    call = Call()
    fragments: list[Write] = [("fragment", e) for e in call.stream(WEATHER)]
    cancel = draw(st.booleans())
    control: list[Write] = [("control", turn_started())]
    if cancel:
        control.append(("control", turn_cancelled()))
    # global write order: a random merge of the two sequences
    order = draw(st.permutations([0] * len(control) + [1] * len(fragments)))
    writes: list[Write] = []
    ci = fi = 0
    for which in order:
        if which == 0:
            writes.append(control[ci])
            ci += 1
        else:
            writes.append(fragments[fi])
            fi += 1
    # the read order: another merge, constrained by nothing but each topic's own order
    read = draw(st.permutations([w[0] == "control" for w in writes]))
    extra = draw(st.lists(st.integers(0, 2), min_size=len(writes), max_size=len(writes)))
    cancel_before_terminal = False
    if cancel:
        seen_cancel = False
        for kind, event in writes:
            if kind == "control" and event.type == "turn.cancelled":
                seen_cancel = True
            if kind == "fragment" and event.type in ("call.ended", "response.ended"):
                cancel_before_terminal = cancel_before_terminal or seen_cancel
    return writes, [int(r) for r in read] + extra, cancel, cancel_before_terminal


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_no_batching_lets_a_call_overtake_a_cancel_committed_before_its_terminal(
    world: tuple[list[Write], list[int], bool, bool],
) -> None:
    writes, plan, cancel, cancel_before_terminal = world
    n = len(writes)
    read_control_first, extra = plan[:n], plan[n:]
    control = [(i, e) for i, (k, e) in enumerate(writes) if k == "control"]
    fragments = [(i, e) for i, (k, e) in enumerate(writes) if k == "fragment"]
    written_before = {i: sum(1 for j, _ in control if j < i) for i, _ in fragments}
    p = fresh()
    ci = fi = 0
    for step, prefer_control in enumerate(read_control_first):
        take_control = (prefer_control and ci < len(control)) or fi >= len(fragments)
        if take_control:
            p.control(control[ci][1], ci)
            ci += 1
        else:
            index, event = fragments[fi]
            # the barrier is read after the fetch: at least what was committed before the
            # fragment was written, at most everything (plus markers, modelled by ``extra``)
            barrier = min(len(control), written_before[index] + extra[step])
            p.fragment(event, barrier=barrier)
            fi += 1
    p.position(len(control))  # caught up
    if cancel_before_terminal:
        assert p.dispatches == []
    elif not cancel:
        assert len(p.dispatches) == 1
    else:  # cancelled after both terminals were written: either outcome is causal
        assert len(p.dispatches) <= 1


# -- what the runtime's back-pressure counts (issue 11): calls that wait for control --------


def test_calls_read_ahead_of_their_binding_wait_for_control_until_it_is_applied() -> None:
    """A backlog read fragments-first: the calls wait for their turn's binding, which control
    holds before their barrier; once control is applied that far none waits any more."""
    p = fresh()
    calls = [Call(call_id=f"c{i}", turn_id=f"turn-{i}") for i in range(5)]
    for call in calls:
        for event in call.stream(WEATHER):
            p.fragment(event, barrier=5)  # control: the five turn.started, offsets 0-4
    assert p.assembler.waiting_for_control == 5
    assert p.assembler.holds_for_control
    for i in range(5):
        p.control(turn_started(f"turn-{i}"), i)
    assert p.assembler.waiting_for_control == 0
    assert not p.assembler.holds_for_control
    assert len(p.dispatches) == 5


def test_an_unbound_call_past_its_barrier_does_not_wait_for_control() -> None:
    """Control applied up to the barrier without the binding: the call waits for the binding
    (and its expiry), not for control, so it must not keep a partition's fragments paused."""
    p, call = fresh(), Call()
    for event in call.stream(WEATHER):
        p.fragment(event, barrier=2)
    assert p.assembler.waiting_for_control == 1
    p.control(turn_started("another-turn"), 0)
    p.position(2)
    assert p.assembler.waiting_for_control == 0
    assert p.assembler.call_state(call.key) is CallState.TERMINAL_CANDIDATE
    late = fresh()
    late.position(2)
    for event in call.stream(WEATHER):
        late.fragment(event, barrier=2)  # its barrier is already applied: it waits for nothing
    assert late.assembler.waiting_for_control == 0


def test_a_call_held_by_the_barrier_counts_and_a_cancelled_one_does_not() -> None:
    p = fresh()
    held, cancelled = Call(call_id="held"), Call(call_id="gone", turn_id="turn-2")
    p.control(turn_started(), 0)
    p.control(turn_started("turn-2"), 1)
    for event in held.stream(WEATHER) + cancelled.stream(WEATHER):
        p.fragment(event, barrier=4)
    assert p.assembler.waiting_for_control == 2
    p.control(turn_cancelled("turn-2"), 2)
    assert p.assembler.waiting_for_control == 1
    p.position(4)
    assert p.assembler.waiting_for_control == 0
    assert [d.call_id for d in p.dispatches] == ["held"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 9), st.integers(1, 12), st.booleans()), min_size=1, max_size=40
    ),
    st.randoms(use_true_random=False),
)
def test_waiting_for_control_reaches_zero_once_control_is_applied_to_every_barrier(
    writes: list[tuple[int, int, bool]], rnd: Any
) -> None:
    """Whatever the order, once control is applied up to the highest barrier no call waits for
    it: so a partition paused until then always resumes (the runtime's progress argument)."""
    p = fresh()
    top = 0
    for n, (turn, barrier, bound_first) in enumerate(writes):
        call = Call(call_id=f"c{n}", turn_id=f"turn-{turn}")
        if bound_first:
            p.control(turn_started(f"turn-{turn}"), p.control_applied)
        events = call.stream(WEATHER)
        if rnd.random() < 0.5:
            events = events[:-1]  # the response has not ended yet
        for event in events:
            p.fragment(event, barrier=p.control_applied + barrier)
        top = max(top, p.control_applied + barrier)
        assert p.assembler.waiting_for_control <= n + 1
    p.position(top)
    assert p.assembler.waiting_for_control == 0


@settings(max_examples=60, deadline=None)
@given(
    barriers=st.lists(st.integers(min_value=2, max_value=12), min_size=1, max_size=12),
    steps=st.lists(st.integers(min_value=1, max_value=13), min_size=1, max_size=6),
)
def test_advancing_control_frees_exactly_the_calls_it_passes_in_their_order_of_entry(
    barriers: list[int], steps: list[int]
) -> None:
    """Calls held with barriers in any order: each advance frees those at or below it, in the
    order they were held (the held set is a heap; the order is the one a scan would give)."""
    p = fresh()
    p.control(turn_started(), 0)
    calls = [
        Call(call_id=f"call_{i}", item_id=f"item-{i}", response_id=f"resp-{i}")
        for i in range(len(barriers))
    ]
    for call, barrier in zip(calls, barriers, strict=True):
        for event in call.stream(WEATHER):
            p.fragment(event, barrier=barrier)
    assert p.dispatches == []
    freed: list[str] = []
    position = 1
    for step in [*steps, 13]:
        before = len(p.dispatches)
        if step > position:
            position = step
            p.position(position)
        now_freed = [d.call_id for d in p.dispatches[before:]]
        expected = [
            c.call_id
            for c, b in zip(calls, barriers, strict=True)
            if b <= position and c.call_id not in freed
        ]
        assert now_freed == expected
        freed += now_freed
    assert sorted(freed) == sorted(c.call_id for c in calls)
    assert p.assembler.waiting_for_control == 0 and not p.assembler.holds_for_control
