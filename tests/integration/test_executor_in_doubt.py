"""A commit that went through although it failed is not written twice (issue 39; chaos seed 22).

On three brokers with a leader moving, a transaction's commit can fail on the client (a
timeout, a lost connection) after the coordinator committed it. The executor retries with a new
producer; its InitProducerId settles the transaction, and the executor then reads the ledger:
when the entries it was writing are there as written, the transaction committed, and writing it
again would put a second result of the same call on ``results`` (chaos seed 22 on three brokers,
"succeeded by x0-1, succeeded by x0-1"). The commit is made to fail after it went through by
wrapping the writer's one attempt.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError

from processor.executor.client import ExecutorClient
from tests.integration.conftest import Runtime, turn_started
from tests.integration.executor_harness import (
    Executor,
    Recorder,
    group_of,
    make_dispatch,
    results,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = [pytest.mark.integration, pytest.mark.partitions(1)]


class _CommitLostOnTheWayBack(ExecutorClient):
    """The first transaction that writes a ``succeeded`` result commits, then fails as if its
    commit's answer was lost (the transaction is in doubt)."""

    done = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        attempt = self.writer.one_transaction

        async def lost(owned: Any, producer: Any, outputs: list[Any], offset: int | None) -> None:
            await attempt(owned, producer, outputs, offset)
            if not self.done and any(b'"outcome":"succeeded"' in o[2] for o in outputs):
                self.done = True
                owned.in_doubt = True  # the commit was sent; its answer never came
                raise KafkaTimeoutError("injected: the commit's answer was lost")

        self.writer.one_transaction = lost  # type: ignore[method-assign]


async def test_a_commit_that_went_through_is_not_written_again(runtime: Runtime) -> None:
    rt = runtime
    recorder = Recorder()
    executor = Executor(
        rt.settings, recorder.handlers, group=group_of(rt), client_cls=_CommitLostOnTheWayBack
    )
    dispatches = [make_dispatch("acme", f"t{i}", "c") for i in range(3)]
    await rt.control(*(turn_started("acme", d.turn_id) for d in dispatches))
    async with running(executor) as ex:
        await write_dispatch(rt, *dispatches)
        await wait_results(rt.settings, 3)
        assert isinstance(ex.client, _CommitLostOnTheWayBack) and ex.client.done
        later = make_dispatch("acme", "t-later", "c")  # the partition goes on
        await rt.control(turn_started("acme", later.turn_id))
        await write_dispatch(rt, later)
        await wait_results(rt.settings, 4)
    written = Counter(r.dispatch_id for r in await results(rt.settings))
    assert sorted(written.values()) == [1, 1, 1, 1], written
    assert sorted(recorder.dispatch_ids) == sorted(d.dispatch_id for d in [*dispatches, later])
