"""The idle wait on a real broker: a call whose next fragment is in ``fragments`` before its idle
time runs out is not expired, however late the worker gets to read it.

The binding wait had this hole first (tests/integration/test_binding_wait.py): the worker
judged itself caught up by the end offsets of its last fetch response, which say nothing of the
records written since. The idle (and response, and confirmation) waits kept it (issue 31): a
worker paused, or starved of CPU, between two fetches expired an idle call whose next fragments
were already in the log. Every tick now takes a fence, both inputs' committed ends read at its
time, and runs only once they are applied (``processor.runtime.step_plan.TickFence``). Here the
worker is stopped (SIGSTOP, within its session) once the fetch it had pending is answered
(observed in its socket: tests/integration/worker_pause.py), the rest of the call is written,
and the worker resumes after the idle time ran out: the call dispatches, and a call abandoned
beside it still fails ``idle_timeout``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from aiokafka import AIOKafkaProducer

from processor.core.events import encode, turn_key
from tests.integration.conftest import Runtime, call_events, turn_started, wait_until
from tests.integration.worker_pause import stop_after_a_fetch_answered

pytestmark = pytest.mark.integration

IDLE_S = 5.0  # room for the stop to be tried twice (worker_pause.py)


async def test_a_fragment_written_before_the_idle_time_ran_out_is_read_before_any_expiry(
    runtime: Runtime,
) -> None:
    worker = runtime.start_worker(
        "w1",
        PROCESSOR_LIMITS__IDLE_TIMEOUT_SECONDS=str(IDLE_S),
        PROCESSOR_TICK_INTERVAL_SECONDS="0.2",
        PROCESSOR_SESSION_TIMEOUT_MS="15000",  # the pause below stays within the session
    )
    await worker.wait_ready()
    await runtime.control(turn_started("acme", "slow-turn"))
    await runtime.control(turn_started("acme", "abandoned-turn"))
    slow = call_events("acme", "slow-turn", "call_0", '{"city": "Kyiv"}')
    abandoned = call_events("acme", "abandoned-turn", "call_0", '{"city": "Oslo"}')
    # each call's start and first deltas; the rest of the slow one comes while the worker sleeps
    published = time.monotonic()  # the idle times start after this, once the worker reads them
    await runtime.publish(slow[:3] + abandoned[:3])
    await wait_until(runtime.caught_up, timeout=30, what="the first fragments read and committed")
    read = time.monotonic()  # and before this

    await stop_after_a_fetch_answered(runtime, worker)  # it reads next an answer from before
    try:
        await runtime.publish(slow[3:])  # in the log, acknowledged
        assert time.monotonic() < published + IDLE_S, "the stop outlasted the idle time"
        # the idle time runs out while the worker sleeps
        await asyncio.sleep(read + IDLE_S + 1.0 - time.monotonic())
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)

    ledger = await runtime.ledger_by_turn(2)
    assert ledger["slow-turn"] == [("dispatched", "dispatched")]
    # idle expiry still works: the abandoned call fails once its idle time ran out in the log
    assert ledger["abandoned-turn"] == [("failed", "idle_timeout")]
    assert [d["turn_id"] for d in await runtime.dispatches()] == ["slow-turn"]
    assert worker.proc.poll() is None
    revoked = [r for r in worker.log_records() if r.get("msg") == "partitions revoked"]
    assert not any(r.get("partitions") for r in revoked), "the pause cost the worker its session"


@pytest.mark.partitions(1)
async def test_an_input_written_in_transactions_still_reaches_its_end(runtime: Runtime) -> None:
    """A transactional producer writes control (a gateway with exactly-once of its own): each
    commit marker holds an offset, so the end offset lies one past the last record. The tick's
    fence is reached through the consumer's position, which steps over the marker; judged by
    the last record's offset, the partition never caught up and nothing ever expired. The
    committed offset passes the marker too (else the lag stays at one for ever)."""
    worker = runtime.start_worker("w1", PROCESSOR_LIMITS__BINDING_WAIT_SECONDS="2")
    await worker.wait_ready()
    await runtime.publish(call_events("acme", "unbound-turn", "call_0", '{"city": "Oslo"}'))
    producer = AIOKafkaProducer(
        transactional_id=f"{runtime.settings.topic_prefix}gateway",
        **runtime.settings.kafka_client_kwargs(),
    )
    await producer.start()
    try:
        async with producer.transaction():  # control's last offset is now a commit marker
            key = turn_key("acme", "other-turn").encode()
            event = encode(turn_started("acme", "other-turn"))
            await producer.send_and_wait(runtime.topics.control, event, key=key)
    finally:
        await producer.stop()

    async def decided() -> list[tuple[str, str]] | None:
        ledger = [(r["state"], r["terminal_reason"]) for r in await runtime.read("ledger")]
        return ledger or None

    assert await wait_until(decided, timeout=30, what="the unbound call's end") == [
        ("failed", "permission_denied")
    ]
    assert await runtime.dispatches() == []
    await wait_until(runtime.caught_up, timeout=30, what="committed offsets past the marker")
