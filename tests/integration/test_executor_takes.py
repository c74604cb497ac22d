"""Fast takes, on a real broker (issue 39, item 4).

Taking a dispatch partition whose ``executions`` partition is empty cost about half a second,
twice: the take asked the transaction coordinator on the group consumer's connection and the
ledger's end offset on the reader's own, each waiting behind a long-polled fetch (a broker
answers a connection's requests in order). And the takes of an assignment ran one after the
other. Now an empty ledger partition is known from its offsets alone (no reader of its own),
the coordinator is asked on a client with no fetch of its own, and the partitions of an
assignment are taken side by side. Asserted by what the take does, not by its time.

A take also reads the group's committed offset after its fence as a stable offset (KIP-447) and
seeks there (the last test): aiokafka's own read at the assignment, before the fence, answers
the offset before a transaction whose offsets are still pending. The ledger makes such a stale
offset safe; the seek saves reading those records again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client import REGISTRY

from processor.executor import ledger as ledger_module
from processor.executor.client import ExecutorClient
from tests.integration.conftest import Runtime, turn_started, wait_until
from tests.integration.executor_harness import (
    Executor,
    Recorder,
    group_of,
    make_dispatch,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = pytest.mark.integration


class _CountingTakes(ExecutorClient):
    """Records how many takes ran at once (its partition table's ``take``, wrapped)."""

    taking = 0
    most = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        take = self.ownership.take
        counts = type(self)

        async def counted(partition: int) -> Any:
            counts.taking += 1
            counts.most = max(counts.most, counts.taking)
            try:
                await asyncio.sleep(0.05)  # a take's broker round trips, at least
                return await take(partition)
            finally:
                counts.taking -= 1

        self.ownership.take = counted  # type: ignore[method-assign]


@pytest.mark.partitions(4)
async def test_partitions_are_taken_side_by_side_and_empty_ledgers_need_no_reader(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = runtime
    readers: list[dict[str, Any]] = []
    real_reader = ledger_module.committed_reader

    def counting_reader(settings: Any, **extra: Any) -> Any:
        readers.append(extra)
        return real_reader(settings, **extra)

    monkeypatch.setattr(ledger_module, "committed_reader", counting_reader)
    recorder = Recorder()
    executor = Executor(
        rt.settings, recorder.handlers, group=group_of(rt), client_cls=_CountingTakes
    )
    async with running(executor) as ex:
        await _wait_owned(ex.client, 4)
        assert readers == []  # four empty ledger partitions: their offsets said so
        assert _CountingTakes.most >= 2, _CountingTakes.most  # one after the other before

    # with entries in the ledger, a take still reads them: the call is not run again
    dispatch = make_dispatch("acme", "t-again", "call_0")
    await rt.control(turn_started("acme", "t-again"))
    await write_dispatch(rt, dispatch)
    async with running(Executor(rt.settings, recorder.handlers, group=group_of(rt))):
        await wait_results(rt.settings, 1)
    assert recorder.dispatch_ids == [dispatch.dispatch_id]
    readers.clear()
    await write_dispatch(rt, dispatch)  # the same dispatch again, for a new member
    again = Recorder()
    async with running(Executor(rt.settings, again.handlers, group=group_of(rt))) as ex:
        await _wait_owned(ex.client, 4)
        assert len(readers) == 1  # the one ledger partition with an entry was read

        async def skipped() -> bool:
            return ex.client.stats.duplicates >= 1

        await _until(skipped)
    assert again.calls == []


def _unstable_answers() -> float:
    return REGISTRY.get_sample_value("toolcall_unstable_offset_answers_total") or 0.0


@pytest.mark.partitions(1)
async def test_a_take_resumes_from_the_stable_committed_offset(runtime: Runtime) -> None:
    """Six dispatch records; the group committed 2, and another transactional id's open
    transaction holds 5 for it. The take waits for that transaction (where aiokafka's read at
    the assignment answered 2); once it commits, the executor reads from 5: the records at 2-4
    are not read, so not run (here they are not in the ledger, which would otherwise keep
    them from running again)."""
    rt = runtime
    group = group_of(rt)
    dispatches = [make_dispatch("acme", "t-stable", f"call_{i}") for i in range(6)]
    await rt.control(turn_started("acme", "t-stable"))
    await write_dispatch(rt, *dispatches)
    tp = TopicPartition(rt.topics.dispatch, 0)
    member = AIOKafkaConsumer(
        group_id=group, enable_auto_commit=False, **rt.settings.kafka_client_kwargs()
    )
    other = AIOKafkaProducer(
        transactional_id=f"{rt.prefix}elsewhere", **rt.settings.kafka_client_kwargs()
    )
    await member.start()
    await other.start()
    recorder = Recorder()
    executor = Executor(rt.settings, recorder.handlers, group=group)
    try:
        member.assign([tp])
        await member.commit({tp: 2})
        await member.stop()  # out of the group's way
        await other.begin_transaction()
        await other.send_offsets_to_transaction({tp: OffsetAndMetadata(5, "")}, group)
        before = _unstable_answers()
        await executor.client.start()
        executor.task = asyncio.create_task(executor.client.run())

        async def taking_or_ran() -> bool:
            return bool(recorder.calls) or _unstable_answers() > before

        await _until(taking_or_ran)
        assert recorder.dispatch_ids == []  # before: the calls at 2-4 ran
        await other.commit_transaction()
        await wait_results(rt.settings, 1)
        assert recorder.dispatch_ids == [dispatches[5].dispatch_id]
    finally:
        await executor.stop()
        await other.stop()
        await member.stop()


async def _wait_owned(client: ExecutorClient, n: int) -> None:
    async def owned() -> bool:
        return len(client.owned_partitions()) >= n

    await _until(owned)


async def _until(check: Any, timeout: float = 60.0) -> None:
    await wait_until(check, timeout=timeout, what=getattr(check, "__name__", "condition"))
