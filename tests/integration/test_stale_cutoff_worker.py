"""Per-tenant stale cutoffs on a real broker, across a worker restart (issue 30).

A worker whose count bound holds four terminal calls (``PROCESSOR_LIMITS__MAX_INERT_CALLS=4``)
reads a flood of one tenant's calls stamped 50 s ahead of the clock: the bound forgets them one
after another and moves that tenant's stale cutoff 50 s ahead. Another tenant's on-time call on
the same partition must still dispatch (before the fix, the cutoff was partition-wide and it was
dead-lettered ``stale_event``). After a ``kill -9`` and a restart from the changelog, a
byte-identical replay of the flooding tenant's first, forgotten call is still stale, and the
other tenant still dispatches.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import Runtime, call_events, dispatch_keys, turn_started, wait_until

pytestmark = pytest.mark.integration

FLOOD = 12
AHEAD = 50.0


@pytest.mark.partitions(1)
async def test_a_flood_stamped_ahead_moves_only_its_own_tenants_cutoff(runtime: Runtime) -> None:
    worker = runtime.start_worker("w1", PROCESSOR_LIMITS__MAX_INERT_CALLS="4")
    await worker.wait_ready()
    stamp = time.time() + AHEAD
    flood = [f"g-{i:02d}" for i in range(FLOOD)]
    await runtime.control(*(turn_started("globex", t) for t in flood))
    first_events = call_events("globex", flood[0], "c", '{"city": "Rome"}', ts=stamp)
    events = list(first_events)
    for i, turn in enumerate(flood[1:], start=1):
        events += call_events("globex", turn, "c", '{"city": "Rome"}', ts=stamp + i / 100)
    await runtime.publish(events)

    async def flood_dispatched() -> bool:
        return len(await runtime.dispatches()) >= FLOOD

    await wait_until(flood_dispatched, timeout=60, what="the flood dispatched")

    # acme, on time, on the same partition: not stale
    await runtime.control(turn_started("acme", "a-1"))
    await runtime.publish(call_events("acme", "a-1", "c", '{"city": "Oslo"}'))

    async def acme_dispatched() -> bool:
        return ("acme", "a-1", "c") in dispatch_keys(await runtime.dispatches())

    await wait_until(acme_dispatched, timeout=60, what="acme's on-time call dispatched")
    stale = [r for r in await runtime.read("deadletter") if r["reason"] == "stale_event"]
    assert stale == [], "an on-time call of another tenant was refused as stale"

    # a restart from the changelog keeps globex's cutoff: its forgotten call stays closed
    worker.kill()
    await worker.wait_exit()
    again = runtime.start_worker("w2", PROCESSOR_LIMITS__MAX_INERT_CALLS="4")
    await again.wait_ready()
    await runtime.publish(first_events)  # byte for byte: the same events, the same ts
    await runtime.control(turn_started("acme", "a-2"))
    await runtime.publish(call_events("acme", "a-2", "c", '{"city": "Lima"}'))

    async def settled() -> bool:
        keys = dispatch_keys(await runtime.dispatches())
        return ("acme", "a-2", "c") in keys and await runtime.caught_up()

    await wait_until(settled, timeout=90, what="acme's call after the restart dispatched")
    keys = dispatch_keys(await runtime.dispatches())
    assert keys.count(("globex", flood[0], "c")) == 1, "a forgotten call opened again"
    stale = [r for r in await runtime.read("deadletter") if r["reason"] == "stale_event"]
    assert len(stale) == len(first_events)  # the replay, every event of it, and nothing else
