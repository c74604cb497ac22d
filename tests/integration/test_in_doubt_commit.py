"""A commit in doubt: the fence waits for the coordinator's decision before it ends anything.

When a commit step times out after its EndTxn(commit) was sent, the coordinator may still commit
that transaction: the request can sit unread at a slow coordinator (a broker paused or loaded).
The next fence reads how the coordinator left the transaction before ``InitProducerId``, and
ends every transaction of the producer id still open on an output partition by that reading: a
COMMIT marker if it committed, else ABORT (``processor.kafka.hanging``). Read ``Ongoing`` while
the stray EndTxn is still on its way, and the coordinator then committing while skipping one
partition's marker (seen in the short cluster run: "hanging transactions of our producer id
committed"), that partition would get an ABORT: its dispatch records gone while the changelog
and offsets of the same transaction committed, a call dispatched in the state and never on
the topic.

So the commit step says when a failure is in doubt (``TransactionFailed.in_doubt``), and an
in-doubt fence reads the coordinator's state again until it is decided
(``hanging.decided_previous``): committed by the stray EndTxn, or aborted at the transaction's
timeout (the coordinator bumps the epoch then, which fences the stray request). All on the real
broker; the slow answers are a producer whose EndTxn (or offsets request) is held back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from processor.kafka import hanging
from processor.kafka.clients import discard_producer
from processor.kafka.codec import Outbound
from processor.runtime import transaction
from processor.settings import Settings
from tests.kafka_broker import create_topics, delete_topics

pytestmark = pytest.mark.integration


@pytest.fixture
async def settings(kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[Settings]:
    s = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix, partitions=1)
    names = list(s.topics.all().values())
    await create_topics(kafka_bootstrap, dict.fromkeys(names, 1))
    yield s
    await delete_topics(kafka_bootstrap, names)


async def _producer(settings: Settings, name: str, timeout_ms: int) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        **settings.kafka_client_kwargs(),
        transactional_id=f"{settings.topic_prefix}{name}",
        transaction_timeout_ms=timeout_ms,
    )
    await producer.start()
    return producer


def _plan(settings: Settings) -> transaction.CommitPlan:
    plan = transaction.CommitPlan()
    plan.outputs.append(Outbound(settings.topics.dispatch, b"k", b"v", [], 0))
    plan.offsets[TopicPartition(settings.topics.fragments, 0)] = 1
    return plan


async def test_classification_a_commit_step_timing_out_in_its_end_is_in_doubt(
    settings: Settings,
) -> None:
    """A classification test: how ``transaction.commit`` labels a step that times out, not a
    broker that fails to answer. The producer's ``commit_transaction`` (its EndTxn) or
    ``send_offsets_to_transaction`` is replaced by a wait past the step's bound; the first is
    in doubt (the EndTxn may have been sent), the second is not (nothing was ended). The fences
    that act on ``in_doubt`` are tested below against the coordinator's real states."""
    producer = await _producer(settings, "ends", 60_000)

    async def unanswered(*_: object) -> None:
        await asyncio.sleep(30)  # the EndTxn (or the offsets request) sent, no answer in time

    try:
        producer.commit_transaction = unanswered  # type: ignore[method-assign]
        with pytest.raises(transaction.TransactionFailed) as failed:
            await transaction.commit(producer, _plan(settings), group_id="g", timeout=2)
        assert failed.value.cause == "timeout" and failed.value.in_doubt
    finally:
        await discard_producer(producer)
    producer = await _producer(settings, "offsets", 60_000)
    try:
        producer.send_offsets_to_transaction = unanswered  # type: ignore[method-assign]
        with pytest.raises(transaction.TransactionFailed) as failed:
            await transaction.commit(producer, _plan(settings), group_id="g", timeout=2)
        assert failed.value.cause == "timeout" and not failed.value.in_doubt  # never ended
    finally:
        await discard_producer(producer)


async def _ongoing(settings: Settings, name: str, timeout_ms: int) -> AIOKafkaProducer:
    """A producer whose transaction is open on the coordinator (a record sent, no EndTxn)."""
    producer = await _producer(settings, name, timeout_ms)
    await producer.begin_transaction()
    await (await producer.send(settings.topics.dispatch, b"v", partition=0))
    return producer


async def test_an_in_doubt_fence_waits_for_the_stray_commit(settings: Settings) -> None:
    producer = await _ongoing(settings, "stray", 60_000)
    tid = f"{settings.topic_prefix}stray"
    reader = await _producer(settings, "reader", 60_000)
    try:
        # not in doubt: what the coordinator says now, Ongoing (InitProducerId would abort it)
        now = await hanging.decided_previous(reader.client, tid, in_doubt=False, bound=30)
        assert now is not None and now.state == "Ongoing" and not now.committed
        # in doubt: read again until decided; the stray EndTxn lands 1.5 s later and commits
        waiting = asyncio.create_task(
            hanging.decided_previous(reader.client, tid, in_doubt=True, bound=30)
        )
        await asyncio.sleep(1.5)
        assert not waiting.done()
        await producer.commit_transaction()
        decided = await asyncio.wait_for(waiting, 10)
        assert decided is not None and decided.committed, decided
        assert decided.producer_id == now.producer_id
    finally:
        await discard_producer(producer)
        await reader.stop()


async def test_an_in_doubt_fence_waits_for_the_coordinators_timeout_abort(
    settings: Settings,
) -> None:
    producer = await _ongoing(settings, "abandoned", 2_000)  # aborted by the coordinator
    tid = f"{settings.topic_prefix}abandoned"
    reader = await _producer(settings, "reader", 60_000)
    try:
        started = time.monotonic()
        decided = await hanging.decided_previous(reader.client, tid, in_doubt=True, bound=30)
        assert decided is not None and decided.state in ("PrepareAbort", "CompleteAbort")
        assert not decided.committed
        assert time.monotonic() - started < 25  # the timeout plus the abort interval, not the bound
    finally:
        await discard_producer(producer)
        await reader.stop()


async def test_an_in_doubt_fence_never_guesses(settings: Settings) -> None:
    producer = await _ongoing(settings, "undecided", 60_000)
    tid = f"{settings.topic_prefix}undecided"
    reader = await _producer(settings, "reader", 60_000)
    try:
        with pytest.raises(hanging.HangingError, match="still Ongoing"):
            await hanging.decided_previous(reader.client, tid, in_doubt=True, bound=1.0)
    finally:
        await discard_producer(producer)
        await reader.stop()


async def test_a_retried_fence_keeps_what_its_first_try_read(settings: Settings) -> None:
    """A fence whose ``InitProducerId`` went through while its answer was lost is retried; the
    retry reads the id ``Empty`` (InitProducerId forgets how the transaction before it ended),
    and keeps what the first try read (``hanging.across_retries``): only that one fence since,
    the epoch moved by one (after a commit) or two (after aborting an open transaction). After a
    new transaction, the retry takes what it reads."""
    tid = f"{settings.topic_prefix}retried"
    reader = await _producer(settings, "reader", 60_000)
    try:
        first = await _producer(settings, "retried", 60_000)
        await first.begin_transaction()
        await (await first.send(settings.topics.dispatch, b"v", partition=0))
        await first.commit_transaction()
        before = await hanging.previous_transaction(reader.client, tid)
        assert before is not None and before.committed
        second = await _producer(settings, "retried", 60_000)  # its InitProducerId went through
        fresh = await hanging.previous_transaction(reader.client, tid)
        assert fresh is not None and fresh.state == "Empty"
        assert fresh.producer_epoch == before.producer_epoch + 1
        assert hanging.across_retries(fresh, before) is before
        await second.begin_transaction()  # a new transaction since: what is read now counts
        await (await second.send(settings.topics.dispatch, b"v", partition=0))
        await second.commit_transaction()
        now = await hanging.previous_transaction(reader.client, tid)
        assert hanging.across_retries(now, before) is now
        await discard_producer(first)

        await second.begin_transaction()  # open, then fenced: the abort bumps the epoch too
        await (await second.send(settings.topics.dispatch, b"v", partition=0))
        ongoing = await hanging.previous_transaction(reader.client, tid)
        assert ongoing is not None and ongoing.state == "Ongoing"
        third = await _producer(settings, "retried", 60_000)
        fresh = await hanging.previous_transaction(reader.client, tid)
        assert fresh is not None and fresh.state == "Empty"
        assert fresh.producer_epoch == ongoing.producer_epoch + 2
        assert hanging.across_retries(fresh, ongoing) is ongoing
        await discard_producer(second)
        await discard_producer(third)
    finally:
        await reader.stop()
