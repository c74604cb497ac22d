"""An executor that has lost its broker stops at once, even in the middle of taking a partition.

Taking a dispatch partition waits on the broker (InitProducerId, the ledger restore, bounded
only by ``restore_timeout_seconds``, 300 s by default) while holding the executor's lock, so a
stop that waits for the lock waited for the take: CI once saw an executor still running 150 s
after its broker died. ``request_stop(abandon=True)`` (what ``processor executor run`` calls
when the broker stays unreachable) cancels takes and releases in progress and commits nothing.

Here the ledger restore of every take is held open (the broker itself is fine), which is how a
take looks from the executor when the broker goes away in the middle of it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from processor.executor import ownership as executor_ownership
from tests.integration.conftest import Runtime
from tests.integration.executor_harness import Executor, Recorder, group_of

pytestmark = pytest.mark.integration


async def test_abandon_cuts_a_take_in_progress_short(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered = asyncio.Event()
    never = asyncio.Event()
    restores: list[int] = []

    async def held_restore(*args: Any, **kwargs: Any) -> dict[str, Any]:
        restores.append(args[2])
        entered.set()
        await never.wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(executor_ownership, "restore_ledger_partition", held_restore)
    executor = Executor(runtime.settings, Recorder().handlers, group=group_of(runtime))
    client = executor.client
    await client.start()
    run = asyncio.create_task(client.run())
    try:
        await asyncio.wait_for(entered.wait(), 60)
        assert client.owned_partitions() == []

        client.request_stop(abandon=True)
        # without the cancel, stop() waits for the lock the take holds: forever here
        await asyncio.wait_for(client.stop(), 30)
        await asyncio.wait_for(run, 10)
    finally:
        never.set()
        if not run.done():
            run.cancel()
    assert restores, "no take was in progress"
    assert client.owned_partitions() == []


async def test_a_graceful_stop_still_waits_for_the_take(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``abandon`` nothing is cut short: the take completes, then is released."""
    entered = asyncio.Event()
    release = asyncio.Event()
    real = executor_ownership.restore_ledger_partition

    async def slow_restore(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(executor_ownership, "restore_ledger_partition", slow_restore)
    executor = Executor(runtime.settings, Recorder().handlers, group=group_of(runtime))
    client = executor.client
    await client.start()
    run = asyncio.create_task(client.run())
    await asyncio.wait_for(entered.wait(), 60)
    client.request_stop()
    stop = asyncio.create_task(client.stop())
    await asyncio.sleep(1.0)
    assert not stop.done(), "a graceful stop must wait for the take in progress"
    release.set()
    await asyncio.wait_for(stop, 60)
    await asyncio.wait_for(run, 10)
    assert client.owned_partitions() == []
