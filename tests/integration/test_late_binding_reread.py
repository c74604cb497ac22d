"""A late-bound call read again after a restore still dispatches, on a real broker (chaos seed 5).

In the seed 5 chaos run (docs/reliability.md, issue 39) a partition rebuilt after a failed commit
resumed from input offsets behind the changelog it restored, so it read the fragments of three
calls a second time: calls committed as terminal candidates waiting for their turn's binding,
whose response had completed. The re-read refused them with the response's reason for calls
still open (``incomplete``) before the ``turn.started`` that followed could bind them.

Here the same state is made on purpose: a worker commits the call waiting for its binding, stops,
and the group's committed offset of its fragments partition is set back to the beginning (what an
operator's offset reset does too); the binding is written and a new worker restores the
partition, reads the fragments again and then the binding: the call is dispatched, once.
"""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from tests.integration.conftest import Runtime, call_events, turn_started, wait_until

pytestmark = pytest.mark.integration


async def _rewind_fragments(runtime: Runtime) -> None:
    """Commit offset 0 for every fragments partition in the (empty) worker group."""
    consumer = AIOKafkaConsumer(
        group_id=runtime.settings.group_id,
        enable_auto_commit=False,
        **runtime.settings.kafka_client_kwargs(),
    )
    await consumer.start()
    try:
        tps = [TopicPartition(runtime.topics.fragments, p) for p in range(runtime.partitions)]
        consumer.assign(tps)
        await consumer.commit({tp: OffsetAndMetadata(0, "") for tp in tps})
    finally:
        await consumer.stop()


@pytest.mark.partitions(1)
async def test_a_late_bound_call_read_again_after_a_restore_dispatches_once(
    runtime: Runtime,
) -> None:
    w1 = runtime.start_worker("w1")
    await w1.wait_ready()
    await runtime.publish(call_events("acme", "late-turn", "call_0", '{"city": "Kyiv"}'))
    await wait_until(runtime.caught_up, timeout=30, what="the call read and committed")
    statuses = [s["state"] for s in await runtime.read("status")]
    assert statuses == ["preparing"], "the call must wait for its binding, committed"
    w1.terminate()
    assert await w1.wait_exit() == 0

    await _rewind_fragments(runtime)  # the inputs' offsets now lie behind the changelog
    await runtime.control(turn_started("acme", "late-turn"))
    w2 = runtime.start_worker("w2")
    ledger = await runtime.ledger_by_turn(1)
    assert ledger["late-turn"] == [("dispatched", "dispatched")]
    assert [d["call_id"] for d in await runtime.dispatches()] == ["call_0"]
    restored = [r for r in w2.log_records() if r.get("msg") == "partition ready"]
    assert restored and restored[-1]["restored_records"] > 0, "w2 did not restore the state"
