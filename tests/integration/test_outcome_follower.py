"""The outcome follower on the real broker (issue 40, items 1 and 4): a worker subprocess, an
in-process executor and one follower; each call of a followed turn comes back settled (ran with
the executor's output, or rejected as soon as the worker decides), a call nobody settles is
named open at the bound, a record older than the turn is never read, and the same turn id under
another tenant never reaches the follower of this one."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

import processor
from processor.agent import follower as follower_module
from processor.agent.outcomes import OutcomeKind
from processor.core.events import CallKey, CallStarted, encode, turn_key
from processor.executor.handlers import Call, ExecutionFailed, Handlers, OutcomeUnknown
from processor.executor.records import ExecutionOutcome, ExecutionResult
from tests.integration.conftest import Runtime, call_events, turn_started
from tests.integration.executor_harness import Executor, group_of

pytestmark = pytest.mark.integration

TURN = "t-same"  # both tenants use it: a follower keyed by turn id alone would mix them


def _handlers() -> Handlers:
    async def get_weather(call: Call) -> dict[str, Any]:
        return {"forecast": "sunny", "for_tenant": call.key.tenant}

    handlers = Handlers()
    handlers.register("get_weather", get_weather, requires_confirmation=False)
    return handlers


def _starts(events: list[Any]) -> list[CallStarted]:
    return [e for e in events if isinstance(e, CallStarted)]


async def _stale_result(runtime: Runtime, key: CallKey) -> None:
    """A committed ``results`` record of this turn's call written *before* it is followed (a
    reused turn id): it must not settle the call."""
    stale = ExecutionResult(
        **key.model_dump(),
        result_id="stale",
        dispatch_id="d-stale",
        tool="get_weather",
        tool_version="2",
        executor_group="g-old",
        executor_id="e-old",
        outcome=ExecutionOutcome.REFUSED,
        reason="turn_cancelled",
        ts=time.time(),
    )
    producer = AIOKafkaProducer(**runtime.settings.kafka_client_kwargs())
    await producer.start()
    try:
        await producer.send_and_wait(
            runtime.topics.results, encode(stale), key=turn_key(key.tenant, key.turn_id).encode()
        )
    finally:
        await producer.stop()


def _readers(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The fault seam: every reader a follower builds, in order (its record reader first, then
    the one that only asks for offsets), so a test can hold or stop the record reader."""
    built: list[Any] = []
    real = follower_module.committed_reader

    def recording(*args: Any, **kwargs: Any) -> Any:
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(follower_module, "committed_reader", recording)
    return built


async def test_each_call_settles_and_another_tenants_turn_never_leaks(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = runtime.start_worker()
    await worker.wait_ready()
    executor = Executor(runtime.settings, _handlers(), group=group_of(runtime))
    await executor.start()
    acme = call_events("acme", TURN, "c-ok", '{"location": "Paris"}', end_response=False)
    acme += call_events("acme", TURN, "c-bad", '{"nope": 1}')  # schema_invalid
    globex = call_events("globex", TURN, "c-ok", '{"location": "Oslo"}')
    never = CallKey(tenant="acme", turn_id=TURN, response_id="resp-9", item_id="x", call_id="x")
    readers = _readers(monkeypatch)
    try:
        async with processor.OutcomeFollower(runtime.settings) as follower:
            # the follower's fetches held, so the stale record is read only after the turn is
            # followed: only the turn's start offsets keep it out
            consumer = readers[0]
            consumer.pause(*consumer.assignment())
            await _stale_result(runtime, _starts(acme)[0].key)
            turn = processor.TurnContext(tenant="acme", turn_id=TURN, actor="user-1")
            followed = await follower.follow(turn, calls=_starts(acme))
            consumer.resume(*consumer.assignment())
            await runtime.control(turn_started("acme", TURN), turn_started("globex", TURN))
            await runtime.publish(globex)
            await runtime.publish(acme)
            report = await followed.wait(60)
            assert report.complete, report.open
            ok, bad = report.outcomes
            assert (ok.kind, ok.output) == (
                OutcomeKind.RAN,
                {"forecast": "sunny", "for_tenant": "acme"},
            )
            assert ok.key.tenant == "acme" and ok.executor_group == group_of(runtime)
            assert (bad.kind, bad.reason) == (OutcomeKind.REJECTED, "schema_invalid")

            # a call nobody settles is named open at the bound, not settled, not dropped
            followed.expect([never])
            began = time.monotonic()
            report = await followed.wait(1.0)
            assert 0.9 <= time.monotonic() - began < 5
            assert [o.key for o in report.open] == [never]
            assert report.open[0].kind is OutcomeKind.OPEN
            followed.close()
            assert follower.following == 0
    finally:
        await executor.stop()


async def test_a_call_that_will_never_run_settles_when_the_worker_decides_blocking(
    runtime: Runtime,
) -> None:
    """The synchronous follower; no executor runs: the rejected call settles at the worker's
    decision, long before the bound."""
    worker = runtime.start_worker()
    await worker.wait_ready()
    events = call_events("acme", "t-sync", "c-bad", '{"nope": 1}')  # schema_invalid
    turn = processor.TurnContext(tenant="acme", turn_id="t-sync", actor="user-1")

    def follow_and_wait(started: asyncio.Event, loop: asyncio.AbstractEventLoop) -> Any:
        with processor.BlockingOutcomeFollower(runtime.settings) as follower:
            followed = follower.follow(turn, calls=_starts(events))
            loop.call_soon_threadsafe(started.set)
            began = time.monotonic()
            report = follower.wait(followed, 60)
            follower.close(followed)
            return report, time.monotonic() - began

    started = asyncio.Event()
    waiting = asyncio.create_task(
        asyncio.to_thread(follow_and_wait, started, asyncio.get_running_loop())
    )
    await asyncio.wait_for(started.wait(), 60)
    await runtime.control(turn_started("acme", "t-sync"))
    await runtime.publish(events)
    report, took = await waiting
    [outcome] = report.outcomes
    assert (outcome.kind, outcome.reason) == (OutcomeKind.REJECTED, "schema_invalid")
    assert took < 30, took


async def test_a_reader_that_stops_is_raised_not_waited_out(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower whose consumer died must not look like calls that never settle: the wait
    raises at once instead of running to its bound with every call open."""
    readers = _readers(monkeypatch)
    async with processor.OutcomeFollower(runtime.settings) as follower:
        turn = processor.TurnContext(tenant="acme", turn_id="t-dead", actor="user-1")
        key = CallKey(tenant="acme", turn_id="t-dead", response_id="r", item_id="i", call_id="c")
        followed = await follower.follow(turn, calls=[key])
        await readers[0].stop()  # the reader's fetches now fail
        began = time.monotonic()
        with pytest.raises(processor.ProcessorError, match="follower_failed"):
            await followed.wait(30)
        assert time.monotonic() - began < 10


async def test_following_a_turn_costs_a_round_trip_not_a_long_poll(runtime: Runtime) -> None:
    """``follow`` asks for the turn's start offsets on a connection of its own: on the reader's,
    the request queued behind the reader's long-polled fetch (about 0.45 s a turn)."""
    async with processor.OutcomeFollower(runtime.settings) as follower:
        await asyncio.sleep(1)  # the reader is now long-polling an idle log
        took = []
        for n in range(7):
            turn = processor.TurnContext(tenant="acme", turn_id=f"t-{n}", actor="user-1")
            began = time.monotonic()
            followed = await follower.follow(turn)
            took.append(time.monotonic() - began)
            followed.close()
            await asyncio.sleep(0.2)
    assert sorted(took)[len(took) // 2] < 0.15, took


async def test_memory_is_bounded_by_the_turns_followed(runtime: Runtime) -> None:
    """Following one turn more than ``max_turns`` forgets the oldest: its wait returns at once,
    ``forgotten``, its call still open (never reported settled); released turns are dropped."""
    async with processor.OutcomeFollower(runtime.settings, max_turns=2) as follower:
        handles = []
        for n in range(3):
            turn = processor.TurnContext(tenant="acme", turn_id=f"t-{n}", actor="user-1")
            key = CallKey(tenant="acme", turn_id=turn.turn_id, response_id="r", item_id="i",
                          call_id="c")  # fmt: skip
            handles.append(await follower.follow(turn, calls=[key]))
        assert follower.following == 2
        began = time.monotonic()
        report = await handles[0].wait(30)
        assert time.monotonic() - began < 5
        assert report.forgotten and [o.kind for o in report.open] == [OutcomeKind.OPEN]
        for followed in handles[1:]:
            followed.close()
        assert follower.following == 0


async def test_a_failure_and_an_unknown_outcome_are_told_to_the_model_truthfully(
    runtime: Runtime,
) -> None:
    """A handler's failure comes back with its code and no argument value; a call whose outcome
    nobody can tell comes back ``unknown`` and the model is told it may have acted."""

    async def get_weather(call: Call) -> dict[str, Any]:
        if call.arguments["location"] == "Lost":
            raise OutcomeUnknown("connection_lost_mid_call", detail="Lost")
        raise ExecutionFailed("station_offline", retry_possible=True, detail="Oslo")

    handlers = Handlers()
    handlers.register("get_weather", get_weather, requires_confirmation=False)
    worker = runtime.start_worker()
    await worker.wait_ready()
    executor = Executor(runtime.settings, handlers, group=group_of(runtime))
    await executor.start()
    events = call_events("acme", "t-f", "c-fail", '{"location": "Oslo"}', end_response=False)
    events += call_events("acme", "t-f", "c-lost", '{"location": "Lost"}')
    try:
        async with processor.OutcomeFollower(runtime.settings) as follower:
            turn = processor.TurnContext(tenant="acme", turn_id="t-f", actor="user-1")
            followed = await follower.follow(turn, calls=_starts(events))
            await runtime.control(turn_started("acme", "t-f"))
            await runtime.publish(events)
            report = await followed.wait(60)
    finally:
        await executor.stop()
    failed, lost = report.outcomes
    assert (failed.kind, failed.reason, failed.retry_possible) == (
        OutcomeKind.FAILED,
        "station_offline",
        True,
    )
    assert (lost.kind, lost.reason) == (OutcomeKind.UNKNOWN, "connection_lost_mid_call")
    [message] = processor.tool_results(report.outcomes, "anthropic")
    told = {block["tool_use_id"]: block for block in message["content"]}
    assert told["c-fail"]["is_error"] and told["c-lost"]["is_error"]
    assert "asking again may work" in told["c-fail"]["content"]
    assert "may have acted" in told["c-lost"]["content"]
    assert "Oslo" not in repr(message) and "Lost" not in repr(message)
