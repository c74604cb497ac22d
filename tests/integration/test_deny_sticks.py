"""A denial committed before a call's terminal always wins, on a real broker (issue 38, item 1).

Denials written before the call exists and while it streams are remembered in the worker's
changelog: after a restart the calls still never dispatch, whatever their events and a
confirmation written later say, and a reconnect replay changes nothing.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from processor.core.events import CallConfirmed, CallDenied
from tests.integration.conftest import (
    Runtime,
    call_events,
    dispatch_keys,
    turn_started,
    wait_until,
)

pytestmark = pytest.mark.integration


def _call_command(cls: Any, tenant: str, turn: str, call_id: str, command_id: str) -> Any:
    return cls(
        command_id=command_id,
        issued_by="user-1",
        issued_at=time.time(),
        actor="user-1",
        tenant=tenant,
        turn_id=turn,
        response_id="resp-1",
        item_id=call_id,
        call_id=call_id,
        **({"args_digest": "sha256:" + "0" * 64} if cls is CallConfirmed else {}),
    )


@pytest.mark.partitions(3)
async def test_denials_before_the_terminal_survive_a_restart(runtime: Runtime) -> None:
    w1 = runtime.start_worker("w1")
    await w1.wait_ready()
    early = call_events("acme", "turn-A", "call_0", '{"city": "Oslo"}')  # denied before it exists
    streaming = call_events("acme", "turn-B", "call_0", '{"city": "Rome"}')  # denied mid-stream
    normal = call_events("acme", "turn-C", "call_0", '{"city": "Lima"}')
    for turn in ("turn-A", "turn-B", "turn-C"):
        await runtime.control(turn_started("acme", turn))
    await runtime.publish(streaming[:2])
    denials = [
        _call_command(CallDenied, "acme", "turn-A", "call_0", "deny-A"),
        _call_command(CallDenied, "acme", "turn-B", "call_0", "deny-B"),
    ]
    await runtime.control(*denials)

    async def audited() -> bool:
        audit = await runtime.read("audit")
        return {"deny-A", "deny-B"} <= {a["command_id"] for a in audit if a["outcome"] == "applied"}

    await wait_until(audited, timeout=60, what="the denials applied")

    w1.terminate()
    assert await w1.wait_exit(30) == 0
    w2 = runtime.start_worker("w2")
    await w2.wait_ready()

    await runtime.publish(early)
    await runtime.publish(streaming[2:])
    await runtime.publish(normal)
    await runtime.control(_call_command(CallConfirmed, "acme", "turn-A", "call_0", "conf-A"))
    await runtime.publish(early)  # a reconnect replay
    await runtime.publish(streaming)

    async def settled() -> bool:
        return len(await runtime.dispatches()) >= 1 and await runtime.caught_up()

    await wait_until(settled, timeout=60, what="dispatch of turn-C and caught up")
    assert dispatch_keys(await runtime.dispatches()) == [("acme", "turn-C", "call_0")]
    ledger = await runtime.read("ledger")
    reasons = {(r["turn_id"], r["call_id"]): r["terminal_reason"] for r in ledger}
    assert reasons[("turn-A", "call_0")] == "confirmation_denied"
    assert reasons[("turn-B", "call_0")] == "confirmation_denied"
    assert len([r for r in ledger if r["turn_id"] in ("turn-A", "turn-B")]) == 2
