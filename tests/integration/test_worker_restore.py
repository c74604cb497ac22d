"""State restore on a real broker: a large changelog, and a rebalance in the middle of a restore.

Changelog partition 0 is preloaded with many committed state records (cancelled turns), so the
first worker is still restoring it when a second worker joins. The rebalance cancels that
restore; the worker neither crashes nor loops, and whoever owns partition 0 afterwards restores
it completely (up to the end offset, past the final commit marker) and applies its state: a call
of a cancelled turn is not dispatched, a call of another turn is.
"""

from __future__ import annotations

import time

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from processor.core.control import turn_state_key
from tests.integration.conftest import Runtime, call_events, turn_started, wait_until

pytestmark = pytest.mark.integration

RECORDS = 300_000
BATCH = 20_000


async def _preload(runtime: Runtime, partition: int, turns: list[str]) -> None:
    producer = AIOKafkaProducer(
        transactional_id=f"{runtime.prefix}preload",
        linger_ms=50,
        max_batch_size=256 * 1024,
        **runtime.settings.kafka_client_kwargs(),
    )
    await producer.start()
    now = time.time()
    try:
        for base in range(0, len(turns), BATCH):
            async with producer.transaction():
                for turn in turns[base : base + BATCH]:
                    value = {
                        "tenant": "acme",
                        "turn_id": turn,
                        "actor": "user-1",
                        "session": None,
                        "cancelled": "user_stop",
                        "last_seen": now,
                    }
                    await producer.send(
                        runtime.topics.changelog,
                        orjson.dumps(value),
                        key=turn_state_key("acme", turn).encode(),
                        partition=partition,
                    )
    finally:
        await producer.stop()


def _partition_of(runtime: Runtime, turn: str) -> int:
    from aiokafka.partitioner import DefaultPartitioner

    key = f"acme/{turn}".encode()
    return int(
        DefaultPartitioner()(key, list(range(runtime.partitions)), list(range(runtime.partitions)))
    )


@pytest.mark.partitions(2)
async def test_rebalance_during_restore_then_complete_restore(runtime: Runtime) -> None:
    turns = [f"pre-{i}" for i in range(RECORDS)]
    target = next(t for t in turns if _partition_of(runtime, t) == 0)
    await _preload(runtime, 0, turns)

    # A member learns of a rebalance from a heartbeat: short heartbeats and a restore of a few
    # seconds keep w2's join (a process start) inside w1's restore of partition 0.
    fast_heartbeat = {"PROCESSOR_HEARTBEAT_INTERVAL_MS": "200"}
    w1 = runtime.start_worker("w1", **fast_heartbeat)

    async def w1_assigned() -> bool:
        return any(r.get("msg") == "partitions assigned" for r in w1.log_records())

    await wait_until(w1_assigned, timeout=60, interval=0.1, what="w1 assigned")
    w2 = runtime.start_worker("w2", **fast_heartbeat)

    async def all_ready() -> bool:
        owned = []
        for w in (w1, w2):
            r = await w.readiness()
            owned += r.get("ready", []) if r.get("ready") == r.get("assigned") else []
        return sorted(owned) == [0, 1]

    await wait_until(all_ready, timeout=120, what="both workers ready")
    assert w1.proc.poll() is None and w2.proc.poll() is None

    w1_log = w1.log_records()
    ready_p0 = [
        r
        for w in (w1, w2)
        for r in w.log_records()
        if r.get("msg") == "partition ready" and r["partition"] == 0
    ]
    assert ready_p0 and ready_p0[-1]["restored_records"] == RECORDS
    assert ready_p0[-1]["changelog_end_offset"] > RECORDS  # past the commit markers
    first_p0_ready = next(
        (
            i
            for i, r in enumerate(w1_log)
            if r.get("msg") == "partition ready" and r["partition"] == 0
        ),
        len(w1_log),
    )
    revoked = [
        i for i, r in enumerate(w1_log) if r.get("msg") == "partitions revoked" and r["partitions"]
    ]
    assert revoked and revoked[0] < first_p0_ready, "the rebalance did not interrupt the restore"
    print(
        "restore of partition 0: "
        + ", ".join(f"{r['restored_records']} records in {r['restore_seconds']}s" for r in ready_p0)
    )

    # the restored state is in force: the cancelled turn refuses its call, another turn dispatches
    other = next(f"new-{i}" for i in range(100) if _partition_of(runtime, f"new-{i}") == 0)
    for turn in (target, other):
        await runtime.control(turn_started("acme", turn))
        await runtime.publish(call_events("acme", turn, "call_0", '{"city": "Kyiv"}'))

    async def settled() -> bool:
        return bool(await runtime.dispatches()) and await runtime.caught_up()

    await wait_until(settled, timeout=60, what="the new call dispatched")
    assert [d["turn_id"] for d in await runtime.dispatches()] == [other]
    ledger = {
        r["turn_id"]: (r["state"], r["terminal_reason"]) for r in await runtime.read("ledger")
    }
    assert ledger[target] == ("cancelled", "user_stop")
