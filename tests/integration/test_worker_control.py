"""Control on a real broker: cancellation, quarantine and tenant stops prevent dispatch, and stay
in force after a restart even when the adapter replays the same events.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import (
    Runtime,
    call_events,
    dispatch_keys,
    quarantine,
    tenant_stopped,
    turn_cancelled,
    turn_started,
    wait_until,
)

pytestmark = pytest.mark.integration


async def _audited(runtime: Runtime, *command_ids: str) -> None:
    async def applied() -> bool:
        audit = await runtime.read("audit")
        done = {a["command_id"] for a in audit if a["outcome"] == "applied"}
        return set(command_ids) <= done

    await wait_until(applied, timeout=60, what=f"audit of {command_ids}")


def _ledger_by_call(ledger: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[tuple]]:
    out: dict[tuple[str, str, str], list[tuple]] = {}
    for r in ledger:
        key = (r["tenant"], r["turn_id"], r["call_id"])
        out.setdefault(key, []).append((r["state"], r["terminal_reason"]))
    return out


@pytest.mark.partitions(3)
async def test_control_prevents_dispatch_and_survives_restart(runtime: Runtime) -> None:
    w1 = runtime.start_worker("w1")
    await w1.wait_ready()

    cancelled = call_events("acme", "turn-A", "call_0", '{"city": "Oslo"}')
    quarantined = call_events("acme", "turn-B", "call_0", '{"city": "Rome"}', response="resp-B")
    normal = call_events("acme", "turn-C", "call_0", '{"city": "Lima"}')
    for turn in ("turn-A", "turn-B", "turn-C"):
        await runtime.control(turn_started("acme", turn))

    # both calls are collecting (everything but their terminal event) when control arrives
    await runtime.publish(cancelled[:-2])
    await runtime.publish(quarantined[:-2])
    cancel = turn_cancelled("acme", "turn-A")
    hold = quarantine("acme", "turn-B", "resp-B")
    await runtime.control(cancel, hold)
    await _audited(runtime, cancel.command_id, hold.command_id)
    await runtime.publish(cancelled[-2:])
    await runtime.publish(quarantined[-2:])
    await runtime.publish(normal)

    # a tenant stop is copied to every control partition and stops that tenant's turns everywhere
    stop = tenant_stopped("globex")
    await runtime.broadcast(stop)
    await _audited(runtime, stop.command_id)
    stopped_turns = [f"g-{i}" for i in range(6)]
    for turn in stopped_turns:
        await runtime.control(turn_started("globex", turn))
        await runtime.publish(call_events("globex", turn, "call_0", '{"city": "Bern"}'))

    async def settled() -> bool:
        return len(await runtime.dispatches()) >= 1 and await runtime.caught_up()

    await wait_until(settled, timeout=60, what="dispatch of turn-C and caught up")
    assert dispatch_keys(await runtime.dispatches()) == [("acme", "turn-C", "call_0")]
    ledger = await runtime.read("ledger")
    calls = _ledger_by_call(ledger)
    assert calls[("acme", "turn-A", "call_0")] == [("cancelled", "user_stop")]
    assert calls[("acme", "turn-B", "call_0")] == [("cancelled", "quarantined")]
    assert calls[("acme", "turn-C", "call_0")] == [("dispatched", "dispatched")]
    for turn in stopped_turns:
        assert calls[("globex", turn, "call_0")] == [("cancelled", "tenant_stopped")]
    stopped_partitions = {r["_partition"] for r in ledger if r["tenant"] == "globex"}
    assert len(stopped_partitions) >= 2  # the stop reached several partitions
    ledger_before = len(ledger)

    # graceful restart; the new worker restores terminal calls, cancelled turns, quarantines,
    # stops and seen command ids from the changelog
    w1.terminate()
    assert await w1.wait_exit(30) == 0
    w2 = runtime.start_worker("w2")
    await w2.wait_ready()
    restored = [r for r in w2.log_records() if r.get("msg") == "partition ready"]
    assert sum(r["restored_records"] for r in restored) > 0

    # the adapter reconnects and replays everything; plus new calls in the cancelled turn and in
    # the quarantined response, and the same commands again
    await runtime.publish(cancelled)
    await runtime.publish(quarantined)
    await runtime.publish(normal)
    await runtime.publish(call_events("acme", "turn-A", "call_1", '{"city": "Oslo"}'))
    await runtime.publish(
        call_events("acme", "turn-B", "call_1", '{"city": "Rome"}', response="resp-B")
    )
    for turn in stopped_turns:
        await runtime.publish(call_events("globex", turn, "call_0", '{"city": "Bern"}'))
    await runtime.control(cancel)  # an identical repeat of a safety command is a no-op

    await runtime.wait_caught_up()
    assert dispatch_keys(await runtime.dispatches()) == [("acme", "turn-C", "call_0")]
    ledger = await runtime.read("ledger")
    calls = _ledger_by_call(ledger)
    assert calls[("acme", "turn-A", "call_1")] == [("cancelled", "user_stop")]
    assert calls[("acme", "turn-B", "call_1")] == [("cancelled", "quarantined")]
    assert len(ledger) == ledger_before + 2  # replays added nothing
    audit = await runtime.read("audit")
    replays = [a for a in audit if a["command_id"] == cancel.command_id]
    assert [(a["outcome"], a["rejection"]) for a in replays] == [
        ("applied", None),
        ("duplicate", None),
    ]
