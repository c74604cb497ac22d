"""DescribeProducers and WriteTxnMarkers on the real broker (:mod:`processor.kafka.hanging`),
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

import asyncio
import time
from collections.abc import AsyncIterator

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from processor import cli
from processor.kafka import hanging
from processor.kafka.clients import discard_producer
from processor.settings import Settings
from tests.kafka_broker import create_topics, delete_topics, read_partition
from tests.txn_seams import producer_identity

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
        case.producer_id = producer_identity(producer)[0]
        case.epoch = producer_identity(producer)[1]
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


async def test_doctor_leaves_live_and_foreign_transactions_alone(
    left_open: Open, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fixture's transaction is another application's (its own transactional id): listed
    ``foreign`` and never touched, even with ``--end --yes --older-than 0``. One of the
    deployment's own ids, still ``Ongoing`` at its coordinator, is ``open``: its coordinator
    ends it. Neither is hanging (exit 0). Before (issue 38), both were aborted once idle past
    ``--older-than``."""
    case = left_open
    application_id = f"{case.settings.topic_prefix}assembler"
    ours = AIOKafkaProducer(
        bootstrap_servers=case.settings.bootstrap_servers,
        transactional_id=f"{application_id}-1",
        transaction_timeout_ms=60_000,
    )
    await ours.start()
    try:
        ours_id = producer_identity(ours)[0]
        await ours.begin_transaction()
        await (await ours.send(case.tp.topic, b"ours", partition=1))
    finally:
        await discard_producer(ours)  # no EndTxn: Ongoing until its timeout
    connection = [
        "--bootstrap-servers",
        case.settings.bootstrap_servers,
        "--topic-prefix",
        case.settings.topic_prefix,
        "--application-id",
        application_id,
    ]
    base = ["doctor", "transactions", *connection, "--older-than", "0"]

    assert await asyncio.to_thread(cli.main, [*base, "--json"]) == 0
    rows = {r["partition"]: r for r in map(orjson.loads, capsys.readouterr().out.splitlines())}
    assert rows[0]["producer_id"] == case.producer_id and rows[0]["verdict"] == "foreign"
    assert rows[1]["producer_id"] == ours_id and rows[1]["verdict"] == "open"
    assert rows[1]["transactional_id"] == f"{application_id}-1"
    assert rows[1]["coordinator_state"] == "Ongoing"
    assert not rows[0]["hanging"] and not rows[1]["hanging"]

    assert await asyncio.to_thread(cli.main, [*base, "--end", "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"foreign    {case.tp.topic}-0 producer {case.producer_id}" in out
    assert f"open       {case.tp.topic}-1 producer {ours_id}" in out
    assert out.endswith(
        "2 open transactions on 22 partitions (1 foreign, 1 open), 0 hanging, 0 ended\n"
    )
    async for client in _client(case.settings):
        other = TopicPartition(case.tp.topic, 1)
        still = await hanging.describe_open_transactions(client, [case.tp, other])
        assert sorted(t.producer_id for t in still) == sorted([case.producer_id, ours_id])
