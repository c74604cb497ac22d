"""A worker whose output topics take less than its batch size still commits every step.

The commit step sends a step's records for one partition as one batch of up to
``producer_batch_bytes`` (1 MiB by default). A topic made outside ``processor topics create``
may accept less (``max.message.bytes``), and a batch above that is refused: the transaction
would fail on every step and the partition would never move. The worker reads the limits of
the topics it writes at start-up and keeps its batches within the smallest one.

Here the changelog takes 16 KiB, and a backlog of 300 calls makes steps whose changelog records
come to several times that. Every call must be dispatched, and the worker says it capped its
batches.
"""

from __future__ import annotations

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import TopicPartition

from processor.kafka.clients import admin_client
from tests.integration.conftest import (
    Runtime,
    call_events,
    dispatch_keys,
    turn_started,
    wait_until,
)
from tests.kafka_broker import read_partition

pytestmark = pytest.mark.integration

TURNS = 300
LIMIT = 16 * 1024
ARGUMENTS = '{"city": "Oslo", "location": "%s"}' % ("harbour road " * 16)  # ~250 bytes


async def _changelog_bytes(runtime: Runtime) -> int:
    tp = TopicPartition(runtime.topics.changelog, 0)
    records = await read_partition(tp, **runtime.settings.kafka_client_kwargs())
    return sum(len(r.value or b"") + len(r.key or b"") for r in records)


@pytest.mark.partitions(1)
async def test_batches_fit_the_smallest_output_topic_limit(runtime: Runtime) -> None:
    async with admin_client(runtime.settings) as admin:
        await admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    runtime.topics.changelog,
                    {"max.message.bytes": str(LIMIT)},
                )
            ]
        )
    turns = [f"turn-{i:04d}" for i in range(TURNS)]
    for start in range(0, TURNS, 50):
        chunk = turns[start : start + 50]
        await runtime.control(*(turn_started("acme", t) for t in chunk))
        batch = []
        for t in chunk:
            batch += call_events("acme", t, "call_0", ARGUMENTS)
        await runtime.publish(batch)

    worker = runtime.start_worker("w1")
    await worker.wait_ready()

    async def settled() -> bool:
        return len(await runtime.read("ledger")) >= TURNS and await runtime.caught_up()

    await wait_until(settled, timeout=90, what="the backlog processed")
    keys = dispatch_keys(await runtime.dispatches())
    assert sorted(keys) == sorted(("acme", t, "call_0") for t in turns)
    # about five steps of 500 records: their changelog records come to several times the limit
    assert await _changelog_bytes(runtime) > 10 * LIMIT
    capped = [
        r
        for r in worker.log_records()
        if r.get("msg") == "record batches capped at the output topics' max.message.bytes"
    ]
    assert capped and capped[0]["max_message_bytes"] == LIMIT
    assert "transaction failed" not in worker.log()
