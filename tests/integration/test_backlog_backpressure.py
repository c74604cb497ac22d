"""A single tenant's backlog must not run into the per-tenant open-buffer bound (issue 11).

A call read from a backlog acts only once ``control`` is applied up to the barrier of its
terminal (issue 8's causal rule). When a worker starts on a large backlog it reads fragments
faster than the turn bindings on ``control``, so before back-pressure every call read ahead of
control stayed open, and a tenant with more calls in the backlog than
``max_open_buffers_per_tenant`` lost the rest to ``buffer_limit``: the bench's 20,000-call
backlog of one tenant lost 7,078 calls. The worker now pauses a partition's fragments while
that many calls wait for control, reads control up to their barriers, and resumes.

Written here, as a gateway writes them: per turn its ``turn.started`` on control, then its
call's fragments, 1,500 turns of one tenant on one partition; the bound is 20 open buffers per
tenant. Every call must be dispatched, none may fail ``buffer_limit``, and the worker must
really have paused (its metric says how often).
"""

from __future__ import annotations

import re

import pytest

from tests.integration.conftest import (
    Runtime,
    call_events,
    dispatch_keys,
    turn_started,
    wait_until,
)

pytestmark = pytest.mark.integration

TURNS = 1500
BOUND = 20


@pytest.mark.partitions(1)
async def test_a_single_tenant_backlog_larger_than_its_bound_is_dispatched_whole(
    runtime: Runtime,
) -> None:
    turns = [f"turn-{i:04d}" for i in range(TURNS)]
    for start in range(0, TURNS, 50):  # a gateway's order: the binding, then the call
        chunk = turns[start : start + 50]
        await runtime.control(*(turn_started("acme", t) for t in chunk))
        batch = []
        for t in chunk:
            batch += call_events("acme", t, "call_0", '{"city": "Oslo"}')
        await runtime.publish(batch)

    worker = runtime.start_worker(
        "w1",
        PROCESSOR_LIMITS__MAX_OPEN_BUFFERS_PER_TENANT=str(BOUND),
        PROCESSOR_BATCH_MAX_RECORDS="200",
    )
    await worker.wait_ready()

    async def settled() -> bool:
        return len(await runtime.read("ledger")) >= TURNS and await runtime.caught_up()

    await wait_until(settled, timeout=120, what="the backlog processed")
    ledger = await runtime.read("ledger")
    reasons = sorted(str(r["terminal_reason"]) for r in ledger if r["state"] != "dispatched")
    assert reasons == [], f"{len(reasons)} calls lost on the backlog: {set(reasons)}"
    keys = dispatch_keys(await runtime.dispatches())
    assert sorted(keys) == sorted(("acme", t, "call_0") for t in turns)
    paused = re.search(
        r"^toolcall_fragments_paused_total\{[^}]*\} ([0-9.e+]+)$", await worker.metrics(), re.M
    )
    assert paused is not None and float(paused.group(1)) >= 1, "the worker never paused"
