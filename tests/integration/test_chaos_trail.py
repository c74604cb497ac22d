"""The chaos report's trail of a lost call (``tests.chaos.trail``), read from a real worker's
topics: where a call stopped, from its inputs and its changelog records, without its arguments.

A call whose turn is never bound stays a terminal candidate: the trail shows its fragments, no
``turn.started`` on control, and its changelog record waiting for a binding. A bound call beside
it shows its ``turn.started`` and the turn's record with its actor.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.trail import trail
from tests.chaos.workload import Fate, Plan, Turn
from tests.integration.conftest import Runtime, call_events, turn_started, wait_until

pytestmark = pytest.mark.integration


def _turn(turn_id: str, fate: Fate) -> Turn:
    return Turn("acme", turn_id, fate, arguments=[{}], cut=0, binding_delay=0.0)


async def test_the_trail_says_where_a_call_stopped_and_never_its_arguments(
    runtime: Runtime,
) -> None:
    runtime.start_worker("w1")
    await runtime.control(turn_started("acme", "t-bound"))
    await runtime.publish(call_events("acme", "t-bound", "c1", '{"city": "Trondheim"}'))
    await runtime.publish(call_events("acme", "t-unbound", "c2", '{"city": "Narvik"}'))
    plan = Plan(
        seed=0, turns=[_turn("t-bound", Fate.NORMAL), _turn("t-unbound", Fate.LATE_BINDING)]
    )
    keys = [("acme", "t-bound", "c1"), ("acme", "t-unbound", "c2")]

    async def settled() -> list[dict[str, Any]] | None:
        found = await trail(runtime.settings, plan, keys)
        unbound = [c for c in found[1]["changelog"] if c[3] == "call"]
        bound = [c for c in found[0]["changelog"] if c[3] == "call"]
        if unbound and bound and bound[-1][4] and bound[-1][4]["state"] == "dispatched":
            return found
        return None

    found = await wait_until(settled, timeout=60, what="both calls in the changelog")
    bound, unbound = found
    assert "Trondheim" not in str(found) and "Narvik" not in str(found)  # no argument text

    assert [entry[3] for entry in bound["control"]] == ["turn.started", "fragments:response.ended"]
    assert bound["fragments"]["count"] == 6  # started, four deltas, ended
    assert bound["fragments"]["types"]["call.delta"] == 4
    turn_records = [c[4] for c in bound["changelog"] if c[3] == "turn"]
    assert turn_records and turn_records[-1]["actor"] == "user-1"

    # no binding on control, only the response's end (on fragments); the call waits for it
    assert [entry[3] for entry in unbound["control"]] == ["fragments:response.ended"]
    calls = [c[4] for c in unbound["changelog"] if c[3] == "call"]
    assert calls[-1]["state"] == "terminal_candidate"
    assert calls[-1]["awaiting_binding_since"] is not None
    assert calls[-1]["call_id"] == "c2"
    assert unbound["plan"]["fate"] == str(Fate.LATE_BINDING)
    assert all(c[4]["actor"] is None for c in unbound["changelog"] if c[3] == "turn" and c[4])
