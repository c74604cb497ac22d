"""Response verdicts on a real broker: a validated call waits for its response's end across
batches and a worker crash, then acts exactly once (completed) or becomes inert (any other end).
"""

from __future__ import annotations

import time

import pytest

from processor.core.events import ResponseEnded, ResponseStatus
from tests.integration.conftest import (
    Runtime,
    call_events,
    dispatch_keys,
    turn_started,
    wait_until,
)

pytestmark = pytest.mark.integration


def response_ended(turn: str, status: ResponseStatus, reason: str) -> ResponseEnded:
    return ResponseEnded(
        event_id=f"acme.{turn}.resp-1.end.{status.value}",
        tenant="acme",
        turn_id=turn,
        response_id="resp-1",
        provider="test",
        ts=time.time(),
        status=status,
        reason=reason,
    )


@pytest.mark.partitions(2)
async def test_a_held_call_survives_a_crash_then_acts_once_or_goes_inert(
    runtime: Runtime,
) -> None:
    turns = {"ok": "v-ok", "refused": "v-refused", "cut": "v-cut"}
    for turn in turns.values():
        await runtime.control(turn_started("acme", turn))
        await runtime.publish(
            call_events("acme", turn, "call_0", '{"city": "Oslo"}', end_response=False)
        )
    w1 = runtime.start_worker("w1")
    await w1.wait_ready()
    await runtime.wait_caught_up()
    assert await runtime.dispatches() == []  # validated, waiting for their responses
    assert await runtime.read("ledger") == []

    w1.kill()  # the held calls live in the changelog only now
    await w1.wait_exit(10)
    w2 = runtime.start_worker("w2")
    await w2.wait_ready()
    restored = [r for r in w2.log_records() if r.get("msg") == "partition ready"]
    assert sum(r["open_buffers"] for r in restored) == 3

    await runtime.publish([response_ended(turns["ok"], ResponseStatus.COMPLETED, "stop")])
    await runtime.publish([response_ended(turns["refused"], ResponseStatus.FAILED, "refusal")])
    await runtime.publish([response_ended(turns["cut"], ResponseStatus.INCOMPLETE, "max_tokens")])
    # the provider's end redelivered (a reconnect replay): nothing changes
    await runtime.publish([response_ended(turns["ok"], ResponseStatus.COMPLETED, "stop")])

    async def settled() -> bool:
        return len(await runtime.read("ledger")) >= 3 and await runtime.caught_up()

    await wait_until(settled, timeout=60, what="three verdicts applied")
    assert dispatch_keys(await runtime.dispatches()) == [("acme", turns["ok"], "call_0")]
    ledger = {r["turn_id"]: r for r in await runtime.read("ledger")}
    assert len(ledger) == 3
    assert ledger[turns["ok"]]["state"] == "dispatched"
    refused = ledger[turns["refused"]]
    assert (refused["state"], refused["terminal_reason"]) == ("cancelled", "response_failed")
    assert refused["provider_reason"] == "refusal"
    cut = ledger[turns["cut"]]
    assert (cut["terminal_reason"], cut["provider_reason"]) == ("incomplete", "max_tokens")
    audit = [a for a in await runtime.read("audit") if a["command_type"] == "response.ended"]
    assert sorted(a["reason"] for a in audit) == ["max_tokens", "refusal"]
