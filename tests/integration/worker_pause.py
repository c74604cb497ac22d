"""A worker stopped (SIGSTOP) once the fetch it had pending is answered: the stale answer it
reads first when it resumes, before anything written after the stop.

A worker paused between two fetches (or starved of CPU) reads, when it runs again, the answer
to the fetch it sent before the pause: records written during the pause are not in it, and its
ends (high watermark, last stable offset) predate them. The tests of what the worker must not
do on such an answer (expire a call whose awaited record is in the log: test_binding_wait.py,
test_idle_fence.py) need that answer to be in the worker's socket before they write the awaited
record. A fixed pause after the SIGSTOP does not make sure of it: a fetch still held by a slow
broker when the record is written is answered with the record, which hides the bug.

So the answer is forced and observed. Once the worker is stopped, a *decoy* is written to
``control`` (``turn.started`` of a turn with no calls, its ids at their longest); the broker
answers a pending fetch as soon as a record arrives, so the answer carries the decoy, and the
kernel queues it on the stopped worker's socket to the broker (:mod:`tests.socket_queues`). No
other answer the worker may be owed (a heartbeat, a ListOffsets) is as large as the decoy record
alone. If none comes, the fetch was answered empty just before the decoy, or none was pending
(between an answer and the next fetch): the worker is resumed, reads the decoy, and is stopped
again, a bounded number of times. Each try costs the caller's clock about
``ANSWER_WITHIN_S`` plus one catch-up: a test whose waits run from before the stop keeps room
for one.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from processor.core.events import encode
from tests.integration.conftest import Runtime, WorkerProcess, turn_started, wait_until
from tests.socket_queues import unread_bytes

ATTEMPTS = 3
# a pending fetch is answered as the decoy is appended, before it is acknowledged: its answer
# is on the socket within milliseconds (past this bound the stop is tried again)
ANSWER_WITHIN_S = 1.0
POLL_S = 0.005


def _broker_ports(runtime: Runtime) -> set[int]:
    return {int(a.rsplit(":", 1)[1]) for a in runtime.settings.bootstrap_servers.split(",")}


async def stop_after_a_fetch_answered(runtime: Runtime, worker: WorkerProcess) -> None:
    """SIGSTOP ``worker`` (caught up and idle) so that the fetch it had pending is answered, and
    the answer queued on its socket, before this returns: nothing written afterwards is in the
    answer it reads first on SIGCONT. The caller sends SIGCONT. Fails after ``ATTEMPTS``
    stops without an answer."""
    pid = worker.proc.pid
    ports = _broker_ports(runtime)
    await runtime.producer()  # connected before the stop: the decoy follows it closely
    for attempt in range(ATTEMPTS):
        turn = f"decoy-{attempt}-".ljust(240, "x")  # its command id "ts-acme-<turn>": 248
        decoy = turn_started("acme", turn, actor="a" * 256)
        size = len(encode(decoy))
        os.kill(pid, signal.SIGSTOP)
        await runtime.control(decoy)  # acknowledged: appended, a pending fetch answered
        deadline = time.monotonic() + ANSWER_WITHIN_S
        while time.monotonic() < deadline:
            if any(n >= size for n in unread_bytes(pid, ports).values()):
                return
            await asyncio.sleep(POLL_S)
        os.kill(pid, signal.SIGCONT)  # no fetch was pending: let it read the decoy, try again
        await wait_until(runtime.caught_up, timeout=30, interval=0.1, what="the decoy read")
    raise AssertionError(
        f"the stopped worker's socket held no answer to a fetch in {ATTEMPTS} stops: none "
        f"pending at any of them, or the broker took over {ANSWER_WITHIN_S:.0f} s to answer"
    )
