"""An end whose commit timed out but reached the coordinator is not written again (issue 39).

Chaos seed 22 on three brokers (a broker down while ends were being committed): a member's
transaction of ends timed out on its side (``TimeoutError``, "executor transaction failed;
retrying with a new producer") after its commit had reached the coordinator. The new producer's
fence waited for the coordinator's decision (committed), and the retry wrote the same ends
again: each call reported twice, ``succeeded`` by the same member. Now the retry reads the ledger
again after its new producer (as it does to tell whether another member owned the partition)
and, finding every entry of the attempt there as written, does not write it again.

The attempt is made to commit and then fail as a timed-out commit would (the response lost).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError

from processor.executor.client import ExecutorClient
from processor.executor.handlers import Call, Handlers
from tests.integration.conftest import Runtime, turn_started, wait_until
from tests.integration.executor_harness import (
    Executor,
    group_of,
    make_dispatch,
    results,
    write_dispatch,
)

pytestmark = [pytest.mark.integration, pytest.mark.partitions(1)]


class _CommitLost(ExecutorClient):
    """The first transaction writing a result after ``lose_next`` is set commits, then fails
    as if its commit's answer was lost: the writer retries with a new producer."""

    lose_next = False
    lost = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        attempt = self.writer.one_transaction
        results_topic = self.settings.topics.results

        async def once(owned: Any, producer: Any, outputs: list[Any], offset: int | None) -> None:
            await attempt(owned, producer, outputs, offset)
            if self.lose_next and any(out[0] == results_topic for out in outputs):
                self.lose_next = False
                self.lost += 1
                owned.in_doubt = True  # as when the commit's answer never came
                raise KafkaTimeoutError("injected: the commit's answer was lost")

        self.writer.one_transaction = once  # type: ignore[method-assign]


async def test_an_end_committed_despite_a_timeout_is_reported_once(runtime: Runtime) -> None:
    rt = runtime
    group = group_of(rt)
    client_box: list[_CommitLost] = []

    async def handler(call: Call) -> Mapping[str, Any]:
        if call.arguments.get("city") == "first":
            client_box[0].lose_next = True  # its claim is committed: the next is its end
        return {"ok": True}

    handlers = Handlers()
    handlers.register("get_weather", handler, requires_confirmation=False)
    executor = Executor(rt.settings, handlers, group=group, client_cls=_CommitLost)
    client = executor.client
    assert isinstance(client, _CommitLost)
    client_box.append(client)
    first = make_dispatch("acme", "doubt", "c1", arguments={"city": "first"})
    second = make_dispatch("acme", "doubt", "c2", arguments={"city": "second"})
    await rt.control(turn_started("acme", "doubt"))
    await executor.start()
    try:
        await write_dispatch(rt, first)

        async def lost() -> bool:
            return client.lost == 1

        await wait_until(lost, timeout=60, what="the first end's commit answer lost")
        # the partition's transactions follow one another: the second call's end is written
        # after the first end's retry has ended
        await write_dispatch(rt, second)

        async def second_reported() -> bool:
            return any(r.dispatch_id == second.dispatch_id for r in await results(rt.settings))

        await wait_until(second_reported, timeout=60, what="the second call reported")
    finally:
        await executor.stop()
    got = sorted((r.dispatch_id, r.outcome.value) for r in await results(rt.settings))
    assert got == sorted([(first.dispatch_id, "succeeded"), (second.dispatch_id, "succeeded")]), got
