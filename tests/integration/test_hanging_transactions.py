"""DescribeProducers and WriteTxnMarkers on the real broker (:mod:`processor.runtime.hanging`),
and ``processor doctor transactions``.

A transaction left open on purpose: a transactional producer writes two records to partition 0
of a topic and is discarded without ending its transaction (the coordinator would abort it only
at its timeout, 60 s here). Its partition then reports the open transaction with the producer's
id, epoch and the first offset, and its last stable offset stays there. An ABORT marker written
with those values ends it: ``read_committed`` readers get past it and never see its records.
(The seed-19 state itself, a transaction the coordinator completed without a marker, is built in
``test_seed19_hanging.py`` on a broker of its own.)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from processor import cli
from processor.runtime import hanging
from processor.runtime.clients import discard_producer
from processor.settings import Settings
from tests.kafka_broker import create_topics, delete_topics, read_partition

pytestmark = pytest.mark.integration


class Open:
    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.settings = Settings(bootstrap_servers=bootstrap, topic_prefix=prefix, partitions=2)
        self.tp = TopicPartition(self.settings.topics.dispatch, 0)
        self.producer_id = -1
        self.epoch = -1


@pytest.fixture
async def left_open(kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[Open]:
    case = Open(kafka_bootstrap, topic_prefix)
    names = list(case.settings.topics.all().values())
    await create_topics(kafka_bootstrap, dict.fromkeys(names, 2))
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        transactional_id=f"{topic_prefix}left-open",
        transaction_timeout_ms=60_000,
    )
    await producer.start()
    try:
        case.producer_id = producer._txn_manager.producer_id
        case.epoch = producer._txn_manager.producer_epoch
        await producer.begin_transaction()
        for value in (b"aborted-1", b"aborted-2"):
            await (await producer.send(case.tp.topic, value, partition=0))
    finally:
        await discard_producer(producer)  # no EndTxn: the transaction stays open
    yield case
    await delete_topics(kafka_bootstrap, names)


async def _client(settings: Settings) -> AsyncIterator[object]:
    producer = AIOKafkaProducer(**settings.kafka_client_kwargs())
    await producer.start()
    try:
        yield producer.client
    finally:
        await producer.stop()


async def test_an_open_transaction_is_described_and_aborted(left_open: Open) -> None:
    case = left_open
    async for client in _client(case.settings):
        other = TopicPartition(case.tp.topic, 1)
        [found] = await hanging.describe_open_transactions(client, [case.tp, other])
        assert (found.topic, found.partition) == (case.tp.topic, 0)
        assert (found.producer_id, found.producer_epoch) == (case.producer_id, case.epoch)
        assert found.start_offset == 0
        assert 0 <= (found.age_seconds(time.time()) or -1) < 60

        # another producer id's open transactions are not ours to abort
        mine = await hanging.end_own_hanging(
            client,
            producer_id=case.producer_id + 1000,
            transactional_id="someone-else",
            partitions=[case.tp, other],
            owner="worker",
            bootstrap=case.settings.bootstrap_servers,
        )
        assert mine == []
        assert await hanging.describe_open_transactions(client, [case.tp]) == [found]

        aborted = await hanging.end_own_hanging(
            client,
            producer_id=case.producer_id,
            transactional_id="left-open",
            partitions=[case.tp, other],
            owner="worker",
            bootstrap=case.settings.bootstrap_servers,
        )
        assert aborted == [found]
        assert await hanging.describe_open_transactions(client, [case.tp, other]) == []
    # the last stable offset moved past the records, which stay aborted
    kwargs = case.settings.kafka_client_kwargs()
    assert await read_partition(case.tp, **kwargs) == []
    values = [
        r.value for r in await read_partition(case.tp, isolation="read_uncommitted", **kwargs)
    ]
    assert values == [b"aborted-1", b"aborted-2"]


def test_doctor_lists_then_aborts_a_hanging_transaction(
    left_open: Open, capsys: pytest.CaptureFixture[str]
) -> None:
    case = left_open
    connection = [
        "--bootstrap-servers",
        case.settings.bootstrap_servers,
        "--topic-prefix",
        case.settings.topic_prefix,
    ]
    base = ["doctor", "transactions", *connection]

    # idle less than the default 60 s: open, not hanging
    assert cli.main(base) == 0
    out = capsys.readouterr().out
    assert f"open     {case.tp.topic}-0 producer {case.producer_id}" in out
    assert out.endswith("1 open transactions on 22 partitions, 0 hanging\n")

    assert cli.main([*base, "--older-than", "0", "--json"]) == 1
    [row] = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["topic"] == case.tp.topic and row["partition"] == 0
    assert (row["hanging"], row["aborted"], row["start_offset"]) == (True, False, 0)
    assert cli.main([*base, "--older-than", "0"]) == 1
    out = capsys.readouterr().out
    assert "HANGING" in out
    assert (
        f"kafka-transactions.sh --bootstrap-server {case.settings.bootstrap_servers} abort" in out
    )
    assert f"--topic {case.tp.topic} --partition 0 --start-offset 0" in out

    assert cli.main([*base, "--older-than", "0", "--abort"]) == 0
    assert "1 hanging, aborted" in capsys.readouterr().out
    assert cli.main([*base, "--older-than", "0"]) == 0
    assert capsys.readouterr().out.endswith("0 open transactions on 22 partitions, 0 hanging\n")
