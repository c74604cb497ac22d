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

import pytest

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.policy import Limits
from processor.runtime import assignment
from processor.runtime.assignment import PartitionManager
from processor.runtime.partition import PartitionTask
from processor.settings import Settings
from tests.unit.scenario import registry

FAILURES = 8


class FailingTask(PartitionTask):
    attempts = 0

    async def prepare(self, consumer: Any) -> Any:
        FailingTask.attempts += 1
        raise ConnectionRefusedError("the partition's coordinator is not there yet")


async def test_a_failing_preparation_is_retried_at_least_every_two_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(bootstrap_servers="127.0.0.1:1", topic_prefix="t.")
    manager = PartitionManager(
        settings,
        lambda: Assembler(registry(), Limits(), verifier=AllowUnsigned()),
        on_fatal=lambda exc: None,
    )
    task = FailingTask(0, settings, manager._new_assembler)
    manager.tasks[0] = task
    waits: list[float] = []
    done = asyncio.Event()
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:  # the schedule, without the wait
        waits.append(seconds)
        if len(waits) > FAILURES:
            done.set()
            await real_sleep(3600)
        await real_sleep(0)

    monkeypatch.setattr(assignment.asyncio, "sleep", sleep)
    job = asyncio.get_running_loop().create_task(manager._prepare(task, delay=0.0))
    await asyncio.wait_for(done.wait(), 10)
    job.cancel()
    assert FailingTask.attempts == FAILURES + 1
    assert waits == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
