"""A partition whose preparation fails is retried at least every 2 s (issue 31, recovery).

A preparation fails while a broker's leaders or coordinators move, or while a whole cluster
restarts; the retry backoff doubled up to 30 s, so a partition could sit idle for many seconds
after the cluster was back. Only the retry schedule is under test: the task's preparation is
made to fail (no Kafka is involved in that decision; the preparation itself runs against a real
broker in the integration tests).
"""

from __future__ import annotations

import asyncio
from typing import Any

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.policy import Limits
from processor.runtime.assignment import PartitionManager
from processor.runtime.partition import PartitionTask
from processor.settings import Settings
from tests.unit.scenario import registry

FAILURES = 8


class FailingTask(PartitionTask):
    """A task whose preparation always fails, counting its own attempts."""

    attempts = 0  # per instance (set in prepare), never shared across tests

    async def prepare(self, consumer: Any) -> Any:
        self.attempts += 1
        raise ConnectionRefusedError("the partition's coordinator is not there yet")


async def test_a_failing_preparation_is_retried_at_least_every_two_seconds() -> None:
    waits: list[float] = []
    done = asyncio.Event()

    async def sleep(seconds: float) -> None:  # the schedule, without the wait
        waits.append(seconds)
        if len(waits) > FAILURES:
            done.set()
            await asyncio.Event().wait()  # until cancelled
        await asyncio.sleep(0)

    settings = Settings(bootstrap_servers="127.0.0.1:1", topic_prefix="t.")
    manager = PartitionManager(
        settings,
        lambda: Assembler(registry(), Limits(), verifier=AllowUnsigned()),
        on_fatal=lambda exc: None,
        sleep=sleep,
    )
    task = FailingTask(0, settings, manager.new_assembler)
    manager.tasks[0] = task
    job = asyncio.get_running_loop().create_task(manager.prepare_until_ready(task, delay=0.0))
    await asyncio.wait_for(done.wait(), 10)
    job.cancel()
    assert task.attempts == FAILURES + 1
    assert waits == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
