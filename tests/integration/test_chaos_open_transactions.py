"""The chaos run's hanging-transaction detector, given real open transactions (issue 41, item 5).

``tests/unit/test_chaos_checker.py`` shows that a reported open transaction fails the run; this
shows that the detector in ``tests/chaos/run.py`` reports one: a transaction left open past the
recheck (a transaction timeout longer than the workers') is named with its partition and
first offset, and one that ends during the recheck is not.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from tests.chaos.run import _open_transactions
from tests.integration.conftest import Runtime

pytestmark = pytest.mark.integration


async def _open(runtime: Runtime, partition: int) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        **runtime.settings.kafka_client_kwargs(),
        transactional_id=f"{runtime.prefix}planted-{uuid.uuid4().hex[:6]}",
        transaction_timeout_ms=60_000,  # outlives the detector's recheck
    )
    await producer.start()
    await producer.begin_transaction()
    await producer.send_and_wait(runtime.topics.dispatch, b"planted", partition=partition)
    return producer


@pytest.mark.partitions(2)
async def test_the_detector_names_a_transaction_left_open_and_not_one_that_ended(
    runtime: Runtime,
) -> None:
    hanging = await _open(runtime, 0)
    ending = await _open(runtime, 1)
    try:

        async def commit_soon() -> None:
            await asyncio.sleep(2.0)  # within the recheck's wait (a transaction timeout + 3 s)
            await ending.commit_transaction()

        found, _ = await asyncio.gather(_open_transactions(runtime.settings), commit_soon())
        assert [(name, offset) for name, _, offset in found] == [
            (f"{runtime.topics.dispatch}-0", 0)
        ]
    finally:
        await hanging.abort_transaction()
        await asyncio.gather(hanging.stop(), ending.stop())
