"""The binding wait on a real broker: a call whose ``turn.started`` is in ``control`` before its
wait runs out is bound and dispatched, however late the worker gets to read it.

Found by the three-broker chaos run (seed 2, docs/reliability.md, issue 31): a late-bound turn
whose binding was in ``control`` before a whole-cluster kill lost its calls to
``permission_denied`` after the restart. The worker expired the unbound call on the clock as
soon as it believed itself caught up, and it judged "caught up" by the end offsets of its last
fetch response, which said nothing of the binding written since. Here the worker is stopped
(SIGSTOP, within its session) once the fetch it had pending is answered, observed in its
socket's receive queue (tests/integration/worker_pause.py; a fixed pause let a slow broker answer
that fetch with the binding, which hid the bug), the binding is written, and the worker resumes
after the wait ran out: it must read the binding before it expires anything.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from tests.integration.conftest import Runtime, call_events, turn_started, wait_until
from tests.integration.worker_pause import stop_after_a_fetch_answered

pytestmark = pytest.mark.integration

BINDING_WAIT_S = 5.0  # room for the stop to be tried twice (worker_pause.py)


async def test_a_binding_written_before_the_wait_ran_out_binds_a_worker_that_read_it_late(
    runtime: Runtime,
) -> None:
    worker = runtime.start_worker(
        "w1",
        PROCESSOR_LIMITS__BINDING_WAIT_SECONDS=str(BINDING_WAIT_S),
        PROCESSOR_SESSION_TIMEOUT_MS="12000",  # the pause below stays within the session
    )
    await worker.wait_ready()
    # the calls arrive before their turns' bindings: terminal candidates wait for them; one
    # turn's binding comes while the worker sleeps, the other's never
    published = time.monotonic()  # the waits start after this, once the worker reads the calls
    await runtime.publish(call_events("acme", "late-turn", "call_0", '{"city": "Kyiv"}'))
    await runtime.publish(call_events("acme", "unbound-turn", "call_0", '{"city": "Oslo"}'))
    await wait_until(runtime.caught_up, timeout=30, what="the unbound call read and committed")
    read = time.monotonic()  # and before this

    await stop_after_a_fetch_answered(runtime, worker)  # it reads next an answer from before
    try:
        await runtime.control(turn_started("acme", "late-turn"))  # in the log, acknowledged
        assert time.monotonic() < published + BINDING_WAIT_S, "the stop outlasted the wait"
        # the wait runs out while the worker sleeps
        await asyncio.sleep(read + BINDING_WAIT_S + 1.0 - time.monotonic())
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)

    ledger = await runtime.ledger_by_turn(2)
    assert ledger["late-turn"] == [("dispatched", "dispatched")]
    # the wait still ends once control is read to its end without the binding
    assert ledger["unbound-turn"] == [("failed", "permission_denied")]
    assert [d["turn_id"] for d in await runtime.dispatches()] == ["late-turn"]
    assert worker.proc.poll() is None
    revoked = [r for r in worker.log_records() if r.get("msg") == "partitions revoked"]
    assert not any(r.get("partitions") for r in revoked), "the pause cost the worker its session"
