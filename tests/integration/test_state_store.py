"""Local state stores on a real broker: a restart restores only the changelog tail, and a
worker killed (SIGKILL) while it processes leaves its store at a committed state.

The worker runs with ``PROCESSOR_STATE_DIR``; each store holds the changelog records of the
transactions that committed and the changelog offset they reflect (its checkpoint).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from processor.kafka.clients import committed_reader, read_to_end
from processor.runtime.store import RocksStore
from tests.integration.conftest import Runtime, call_events, turn_started, wait_until

pytestmark = pytest.mark.integration


def _ready(worker: object) -> list[dict[str, object]]:
    return [r for r in worker.log_records() if r.get("msg") == "partition ready"]  # type: ignore[attr-defined]


async def _committed_changelog(runtime: Runtime, partition: int, end: int) -> dict[str, bytes]:
    """The last committed value of each key in changelog ``partition`` below offset ``end``."""
    from aiokafka.structs import TopicPartition

    tp = TopicPartition(runtime.topics.changelog, partition)
    consumer = committed_reader(runtime.settings)
    state: dict[str, bytes] = {}

    def apply(record: object) -> None:
        if record.offset < end:  # type: ignore[attr-defined]
            key = record.key.decode()  # type: ignore[attr-defined]
            if record.value is None:  # type: ignore[attr-defined]
                state.pop(key, None)
            else:
                state[key] = record.value  # type: ignore[attr-defined]

    await consumer.start()
    try:
        consumer.assign([tp])
        last = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        await read_to_end(consumer, tp, last, apply, deadline=float("inf"), max_records=5000)
    finally:
        await consumer.stop()
    return state


def _store(runtime: Runtime, state_dir: Path, partition: int) -> RocksStore:
    s = runtime.settings
    path = state_dir / s.application_id / f"{s.topics.changelog}-{partition}"
    identity = {"changelog": s.topics.changelog, "partition": partition}
    return RocksStore(path, identity, cache_bytes=1 << 20)


@pytest.mark.partitions(1)
async def test_a_restarted_worker_restores_only_the_tail(runtime: Runtime, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    env = {"PROCESSOR_STATE_DIR": str(state_dir)}
    w1 = runtime.start_worker("w1", **env)
    await w1.wait_ready()
    turns = [f"turn-{i}" for i in range(40)]
    for turn in turns:
        await runtime.control(turn_started("acme", turn))
        await runtime.publish(call_events("acme", turn, "call_0", '{"city": "Oslo"}'))

    async def all_dispatched() -> bool:
        return len(await runtime.dispatches()) == len(turns) and await runtime.caught_up()

    await wait_until(all_dispatched, timeout=60, what="every call dispatched")
    assert _ready(w1)[-1]["restore"] == "full"
    w1.terminate()
    assert await w1.wait_exit() == 0

    w2 = runtime.start_worker("w2", **env)
    await w2.wait_ready()
    ready = _ready(w2)[-1]
    # the store holds every turn, call and response; the changelog tail after it is empty
    assert ready["restore"] == "checkpoint"
    assert ready["restored_records"] == 0
    assert int(ready["store_records"]) >= 3 * len(turns)  # type: ignore[call-overload]
    # the state is in force: a replay of a dispatched call is absorbed, not dispatched again
    await runtime.publish(call_events("acme", turns[0], "call_0", '{"city": "Oslo"}'))
    await runtime.control(turn_started("acme", "after"))
    await runtime.publish(call_events("acme", "after", "call_0", '{"city": "Rome"}'))

    async def settled() -> bool:
        return len(await runtime.dispatches()) == len(turns) + 1 and await runtime.caught_up()

    await wait_until(settled, timeout=60, what="the new call dispatched")
    assert [d["turn_id"] for d in await runtime.dispatches()].count(turns[0]) == 1
    w2.terminate()
    assert await w2.wait_exit() == 0

    # a store newer than what is committed (a restored disk image, another cluster) is rebuilt
    store = _store(runtime, state_dir, 0)
    store.apply([("turn:" + '["acme","ghost"]', b"{}")], 10**9)
    store.close()
    w3 = runtime.start_worker("w3", **env)
    await w3.wait_ready()
    ready = _ready(w3)[-1]
    assert ready["restore"] == "full" and int(ready["restored_records"]) > 0  # type: ignore[call-overload]
    w3.terminate()
    assert await w3.wait_exit() == 0
    store = _store(runtime, state_dir, 0)
    try:
        assert store.get('turn:["acme","ghost"]') is None  # the rebuild started from empty
        assert store.checkpoint() == ready["changelog_end_offset"]
    finally:
        store.close()


class _OpenTransactionProbe:
    """Two started readers of changelog partition 0 (read_uncommitted, read_committed)."""

    def __init__(self, runtime: Runtime) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition

        self.tp = TopicPartition(runtime.topics.changelog, 0)
        self.readers = [
            AIOKafkaConsumer(isolation_level=iso, **runtime.settings.kafka_client_kwargs())
            for iso in ("read_uncommitted", "read_committed")
        ]

    async def __aenter__(self) -> _OpenTransactionProbe:
        for reader in self.readers:
            await reader.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for reader in self.readers:
            await reader.stop()

    async def open(self) -> bool:
        high, stable = [(await r.end_offsets([self.tp]))[self.tp] for r in self.readers]
        return bool(high > stable)


async def _open_changelog_transaction(runtime: Runtime) -> bool:
    """Whether changelog partition 0 holds records of a transaction still open (HW > LSO)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    tp = TopicPartition(runtime.topics.changelog, 0)
    ends = []
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = AIOKafkaConsumer(
            isolation_level=isolation, **runtime.settings.kafka_client_kwargs()
        )
        await consumer.start()
        try:
            ends.append((await consumer.end_offsets([tp]))[tp])
        finally:
            await consumer.stop()
    return ends[0] > ends[1]


@pytest.mark.partitions(1)
async def test_a_worker_killed_inside_a_transaction_leaves_only_committed_state_in_its_store(
    runtime: Runtime, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"

    async def traffic() -> None:
        for i in range(100_000):
            await runtime.control(turn_started("acme", f"turn-{i}"))
            await runtime.publish(call_events("acme", f"turn-{i}", "c", '{"city": "Oslo"}'))

    feeding = asyncio.create_task(traffic())
    inside = False
    try:
        for attempt in range(15):  # until a SIGKILL lands while a transaction is open
            worker = runtime.start_worker(f"w{attempt}", PROCESSOR_STATE_DIR=str(state_dir))
            await worker.wait_ready()
            seen = len(await runtime.dispatches())

            async def progressing(seen: int = seen) -> bool:
                return len(await runtime.dispatches()) >= seen + 20

            await wait_until(progressing, timeout=60, what="the worker processing calls")
            # kill the moment the changelog shows an open transaction (two readers kept open,
            # so the check is one ListOffsets round trip each), then check it stayed open
            async with _OpenTransactionProbe(runtime) as probe:
                for _ in range(300):
                    if await probe.open():
                        break
            worker.kill()
            await worker.wait_exit()
            inside = await _open_changelog_transaction(runtime)
            if inside:
                break
    finally:
        feeding.cancel()
    assert inside, "no SIGKILL landed inside a transaction"
    store = _store(runtime, state_dir, 0)
    try:
        checkpoint = store.checkpoint()
        assert checkpoint is not None
        held = dict(store.scan())
    finally:
        store.close()
    # the store is exactly the committed changelog up to its checkpoint: nothing uncommitted
    assert held and held == await _committed_changelog(runtime, 0, checkpoint)
