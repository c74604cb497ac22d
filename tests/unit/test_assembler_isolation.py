"""Every named scenario, checked for the two cross-cutting rules of ARCHITECTURE.md:

1. nothing is dispatched before its terminal event has been validated: a dispatch is only ever
   produced by its response's normal end (``response.ended`` completed), its ``call.ended``,
   its turn binding or its confirmation, and never for a call whose ``call.ended`` has not
   arrived;
2. an old tuple cannot affect a newer turn: replaying the scenario interleaved with a newer
   turn's call that reuses the same response, item and call ids changes neither side's outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from processor.core.assembler import Assembler
from processor.core.events import (
    CallConfirmed,
    CallEnded,
    Dispatch,
    InputEvent,
    Proposal,
    ResponseEnded,
    TenantStopped,
    ToolDisabled,
    TurnStarted,
)
from processor.core.policy import Limits
from tests.unit.scenario import Call, registry, turn_cancelled, turn_started

WEATHER = '{"city": "Paris"}'
BOOKING = '{"date": "2026-12-24", "party_size": 2}'


def _op(kind: type[Any], cid: str, **target: Any) -> Any:
    return kind(command_id=cid, issued_by="ops", issued_at=100.0, reason="r", **target)


def interleaved() -> list[InputEvent]:
    a, b = Call(call_id="a", item_id="0"), Call(call_id="b", item_id="1")
    ea, eb = a.stream('{"city": "Oslo"}', 3), b.stream('{"city": "Lima"}', 3)
    return [turn_started(), *[e for pair in zip(ea, eb, strict=True) for e in pair]]


def duplicates() -> list[InputEvent]:
    c = Call()
    return [turn_started(), c.start(), c.delta(1, '{"city":'), c.delta(1, '{"city":'),
            c.delta(2, '"Bern"}'), c.end(3), c.done()]  # fmt: skip


def conflicting_duplicate() -> list[InputEvent]:
    c = Call()
    return [turn_started(), c.start(), c.delta(1, WEATHER), c.delta(1, '{"city": "X"}'), c.end(2),
            c.done()]  # fmt: skip


def terminal_before_missing_fragment() -> list[InputEvent]:
    c = Call()
    return [turn_started(), c.start(), c.delta(1, '{"city": '), c.end(3), c.delta(2, '"B"}'),
            c.done()]  # fmt: skip


def malformed() -> list[InputEvent]:
    return [turn_started(), *Call().stream('{"city": ]}')]


def cancellation_before_terminal() -> list[InputEvent]:
    events = Call().stream(WEATHER)
    return [turn_started(), *events[:-1], turn_cancelled(), events[-1]]


def reconnection_replay() -> list[InputEvent]:
    events = Call().stream(WEATHER)
    return [turn_started(), *events, *events]


def renamed_tool() -> list[InputEvent]:
    return [turn_started(), *Call().stream(WEATHER, tool="getWeather")]


def new_turn_while_old_fragments_arrive() -> list[InputEvent]:
    old, new = Call(turn_id="turn-1"), Call(turn_id="turn-2", call_id="n")
    eo = old.stream('{"city": "Old"}')
    return [turn_started(), *eo[:2], turn_started("turn-2"), turn_cancelled(reason="superseded"),
            *new.stream('{"city": "New"}'), *eo[2:]]  # fmt: skip


def stop_during_collecting() -> list[InputEvent]:
    events = Call().stream(WEATHER)
    return [turn_started(), *events[:-1], _op(TenantStopped, "s1", tenant="acme"), events[-1]]


def stop_during_terminal_validation() -> list[InputEvent]:
    waiting = Call(call_id="w")
    return [*waiting.stream(WEATHER), _op(TenantStopped, "s2", tenant="acme"), turn_started()]


def late_terminal_for_cancelled_turn() -> list[InputEvent]:
    return [turn_started(), turn_cancelled(reason="connection_lost"), *Call().stream(WEATHER)]


def stale_digest() -> list[InputEvent]:
    c = Call(call_id="p")
    return [turn_started(), *c.stream(BOOKING, tool="book_slot"), c.confirm("sha256:" + "0" * 64)]


def confirmed() -> list[InputEvent]:
    c = Call(call_id="p")
    return [turn_started(), *c.stream(BOOKING, tool="book_slot"), ("confirm", c)]  # type: ignore[list-item]


def tool_disabled_mid_call() -> list[InputEvent]:
    events = Call().stream(WEATHER)
    return [turn_started(), *events[:2], _op(ToolDisabled, "d1", tool="get_weather"), *events[2:]]


SCENARIOS: dict[str, Callable[[], list[InputEvent]]] = {
    f.__name__: f
    for f in (
        interleaved,
        duplicates,
        conflicting_duplicate,
        terminal_before_missing_fragment,
        malformed,
        cancellation_before_terminal,
        reconnection_replay,
        renamed_tool,
        new_turn_while_old_fragments_arrive,
        stop_during_collecting,
        stop_during_terminal_validation,
        late_terminal_for_cancelled_turn,
        stale_digest,
        confirmed,
        tool_disabled_mid_call,
    )
}

# Commands that legitimately reach every turn of a tenant (or every call of a tool).
WIDE = (TenantStopped, ToolDisabled)


def run(events: list[Any]) -> dict[tuple[str, ...], dict[str, Any]]:
    """Feed the events, enforcing rule 1 on every step; return dispatches by call key."""
    assembler = Assembler(registry(), Limits())
    ended: set[tuple[str, ...]] = set()
    proposals: dict[tuple[str, ...], Proposal] = {}
    dispatched: dict[tuple[str, ...], dict[str, Any]] = {}
    for item in events:
        if isinstance(item, tuple):  # ("confirm", call): confirm with the proposed digest
            call = item[1]
            event: Any = call.confirm(proposals[call.key.as_tuple].args_digest)
        else:
            event = item
        if isinstance(event, CallEnded):
            ended.add(event.key.as_tuple)
        for out in assembler.handle(event, 100.0):
            if isinstance(out, Proposal):
                proposals[out.key.as_tuple] = out
            if isinstance(out, Dispatch):
                key = out.key.as_tuple
                assert key in ended, "dispatched before its terminal event"
                assert isinstance(event, ResponseEnded | CallEnded | TurnStarted | CallConfirmed)
                assert key not in dispatched, "dispatched twice"
                dispatched[key] = out.arguments
    return dispatched


def with_newer_turn(events: list[Any]) -> list[Any]:
    """Interleave a newer turn's call that reuses the scenario's ids (resp-1/item-0/call_0)."""
    newer = Call(turn_id="turn-newer")
    extra = [turn_started("turn-newer"), *newer.stream('{"city": "Newer"}', 4)]
    mixed: list[Any] = []
    for i in range(max(len(events), len(extra))):
        mixed += events[i : i + 1] + extra[i : i + 1]
    return mixed


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_no_dispatch_before_terminal_validation(name: str) -> None:
    run(SCENARIOS[name]())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_an_old_tuple_cannot_affect_a_newer_turn(name: str) -> None:
    events = SCENARIOS[name]()
    alone = run(events)
    together = run(with_newer_turn(events))
    newer_key = ("acme", "turn-newer", "resp-1", "item-0", "call_0")
    newer = together.pop(newer_key, None)
    assert together == alone  # the newer turn changed nothing of the scenario
    if any(isinstance(e, WIDE) for e in events):
        assert newer in (None, {"city": "Newer"})  # a tenant/tool-wide stop may reach it too
    else:
        assert newer == {"city": "Newer"}  # and the scenario changed nothing of the newer turn


def test_the_scenarios_are_not_vacuous() -> None:
    outcomes = {name: len(run(make())) for name, make in SCENARIOS.items()}
    assert outcomes["interleaved"] == 2 and outcomes["confirmed"] == 1
    assert outcomes["cancellation_before_terminal"] == 0 and outcomes["stale_digest"] == 0
