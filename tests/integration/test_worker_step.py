"""The worker's pieces that need no broker: one partition's step, its logs, its HTTP endpoint.

``PartitionTask.build`` is synchronous and takes already-fetched records, so these tests feed it
hand-made ``ConsumerRecord`` objects and inspect the commit plan: outputs with their topics,
keys and ``traceparent`` headers, changelog records for partition p, next offsets, and the order
across the two input topics. Then: JSON logs redact payload fields, and the health endpoint
answers probes and metrics.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from aiokafka.structs import TopicPartition

from processor.core.assembler import Assembler
from processor.core.events import encode
from processor.core.registry import Registry
from processor.runtime.partition import PartitionTask, TickFence
from processor.settings import Settings
from tests.integration.conftest import TOOLS_YAML, call_events, turn_cancelled, turn_started
from tests.integration.fetched_records import record, records_of

TRACE = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01"


@pytest.fixture
def task(tmp_path: Any) -> PartitionTask:
    import yaml

    registry = Registry.from_document(yaml.safe_load(TOOLS_YAML), source="test")
    settings = Settings(topic_prefix="x.", application_id="app")
    t = PartitionTask(2, settings, lambda: Assembler(registry))
    t.expected.update({t.fragments_tp: 0, t.control_tp: 0})
    return t


def test_outputs_changelog_offsets_and_traceparent(task: PartitionTask) -> None:
    now = time.time()
    frags = records_of(
        "x.fragments",
        call_events("acme", "t1", "c1", '{"city": "Oslo"}'),
        start_ms=2000,
        trace=TRACE,
    )
    ctrl = records_of("x.control", [turn_started("acme", "t1")], start_ms=1000)
    step = task.build({"fragments": frags, "control": ctrl}, now)

    topics = [o.topic for o in step.plan.outputs]
    assert "x.dispatch" in topics
    dispatch = next(o for o in step.plan.outputs if o.topic == "x.dispatch")
    assert dispatch.key == b"acme/t1"
    assert dict(dispatch.headers)["traceparent"] == TRACE.encode()
    assert orjson.loads(dispatch.value)["arguments"] == {"city": "Oslo"}
    assert step.plan.offsets == {
        TopicPartition("x.fragments", 2): len(frags),
        TopicPartition("x.control", 2): 1,
    }
    assert step.plan.changelog and all(
        c.topic == "x.assembler-changelog" and c.partition == 2 for c in step.plan.changelog
    )
    assert step.dispatch_triggers and step.consumed == {"fragments": len(frags), "control": 1}
    assert ("dispatched", "dispatched") in step.terminal


def test_records_below_the_expected_offset_are_skipped(task: PartitionTask) -> None:
    frags = records_of("x.fragments", call_events("acme", "t1", "c1", "{}"), start_ms=1000)
    task.expected[task.fragments_tp] = 2
    step = task.build({"fragments": frags}, time.time())
    assert step.skipped == {"fragments": 2}
    assert step.consumed == {"fragments": len(frags) - 2}


def test_a_cancellation_stamped_before_the_terminal_event_wins(task: PartitionTask) -> None:
    # fetched in one batch: the cancel (control) is older than the call's terminal event
    events = call_events("acme", "t1", "c1", '{"city": "Rome"}')
    frags = [record("x.fragments", i, encode(e), ts_ms=1000 + 10 * i) for i, e in enumerate(events)]
    ctrl = [
        record("x.control", 0, encode(turn_started("acme", "t1")), ts_ms=900),
        record(
            "x.control", 1, encode(turn_cancelled("acme", "t1")), ts_ms=1000 + 10 * len(events) - 15
        ),
    ]
    step = task.build({"fragments": frags, "control": ctrl}, time.time())
    assert not [o for o in step.plan.outputs if o.topic == "x.dispatch"]
    assert ("cancelled", "user_stop") in step.terminal


def test_misplaced_and_undecodable_records_are_dead_letters(task: PartitionTask) -> None:
    frags = [
        record("x.fragments", 0, b"\xff not json", ts_ms=1),
        record("x.fragments", 1, encode(turn_started("acme", "t1")), ts_ms=2),
    ]
    ctrl = [record("x.control", 0, encode(call_events("acme", "t1", "c", "{}")[0]), ts_ms=3)]
    step = task.build({"fragments": frags, "control": ctrl}, time.time())
    assert sorted(step.deadletters) == ["undecodable", "wrong_topic", "wrong_topic"]
    dead = [o for o in step.plan.outputs if o.topic == "x.deadletter"]
    assert sorted(o.key for o in dead) == [b"x.control/2/0", b"x.fragments/2/0", b"x.fragments/2/1"]
    assert step.plan.offsets[TopicPartition("x.fragments", 2)] == 2  # the partition moves on


def test_logs_are_json_and_never_carry_payload_fields() -> None:
    import logging

    from processor.observability.logging import JsonFormatter, fields

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    record.fields = fields(partition=3, arguments='{"card": "4111"}', delta="4111")["fields"]
    line = orjson.loads(JsonFormatter().format(record))
    assert line["msg"] == "hello" and line["partition"] == 3 and line["level"] == "info"
    assert line["arguments"] == "[redacted]" and line["delta"] == "[redacted]"


async def test_health_endpoint_serves_probes_and_metrics() -> None:
    import asyncio

    from processor.observability import metrics
    from processor.observability.health import HealthServer

    ready = {"ok": False}
    server = HealthServer(
        "127.0.0.1", 0, live=lambda: (True, {"alive": 1}), ready=lambda: (ready["ok"], {})
    )
    await server.start()

    async def get(path: str) -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        data = await reader.read()
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), body

    try:
        metrics.TRANSACTIONS.inc(0)
        assert await get("/healthz") == (200, b'{"alive":1}\n')
        assert (await get("/readyz"))[0] == 503
        ready["ok"] = True
        assert (await get("/readyz"))[0] == 200
        status, body = await get("/metrics")
        assert status == 200 and b"toolcall_transactions_total" in body
        assert (await get("/nope"))[0] == 404
    finally:
        await server.stop()


def test_a_late_tick_never_overtakes_the_backlog(task: PartitionTask) -> None:
    """A call ended in time but its end is read long after: records first, then any expiry."""
    events = call_events("acme", "t1", "c1", '{"city": "Oslo"}')
    frags = records_of("x.fragments", events, start_ms=2000)
    ctrl = records_of("x.control", [turn_started("acme", "t1")], start_ms=1000)
    now = time.time()
    task.build({"fragments": frags[:-1], "control": ctrl}, now)
    much_later = now + 10 * task.assembler.limits.idle_timeout_seconds
    step = task.build({"fragments": frags[-1:]}, much_later, tick=TickFence(much_later, {}))
    assert [o.topic for o in step.plan.outputs].count("x.dispatch") == 1


def test_a_tick_judges_by_its_fence_time_not_by_when_it_runs(task: PartitionTask) -> None:
    """The fence was read at ``at``; the tick runs later, once the fence is applied. A call whose
    idle time had not run out at ``at`` stays open, however late the tick runs."""
    events = call_events("acme", "t1", "c1", '{"city": "Oslo"}')
    frags = records_of("x.fragments", events[:3], start_ms=2000)  # no end: it stays open
    ctrl = records_of("x.control", [turn_started("acme", "t1")], start_ms=1000)
    now = time.time()
    idle = task.assembler.limits.idle_timeout_seconds
    task.build({"fragments": frags, "control": ctrl}, now)
    much_later = now + 10 * idle
    early = task.build({}, much_later, tick=TickFence(now + idle / 2, {}))
    assert [o.topic for o in early.plan.outputs] == []
    assert task.progress.tick_fence is None and task.progress.last_tick == much_later
    late = task.build({}, much_later, tick=TickFence(now + idle + 1, {}))
    ledger = [orjson.loads(o.value) for o in late.plan.outputs if o.topic == "x.ledger"]
    assert [(r["state"], r["terminal_reason"]) for r in ledger] == [("failed", "idle_timeout")]


def test_a_position_past_transaction_markers_is_committed(task: PartitionTask) -> None:
    """Past the last record, the consumer's position has stepped over markers only: the step
    commits it, alone if nothing else came, and the marker counts toward being caught up."""
    ctrl = records_of("x.control", [turn_started("acme", "t1")], start_ms=1000)
    step = task.build({"control": ctrl}, time.time(), control_position=2)  # record, marker
    assert step.plan.offsets == {task.control_tp: 2}
    task.expected.update(step.plan.offsets)
    positions = {task.control_tp: 2, task.fragments_tp: 3}
    assert task.passed_markers(positions)
    assert task.caught_up({task.control_tp: 2, task.fragments_tp: 3}, {}, positions)
    assert not task.caught_up({task.control_tp: 2, task.fragments_tp: 3}, {})
    step = task.build({}, time.time(), control_position=2, fragments_position=3)
    assert step.plan.offsets == {task.fragments_tp: 3} and step.plan.outputs == []
    assert not task.passed_markers({task.control_tp: 2, task.fragments_tp: 0})


def test_caught_up_only_when_both_inputs_reach_their_end(task: PartitionTask) -> None:
    frags = records_of("x.fragments", call_events("acme", "t1", "c1", "{}"), start_ms=2000)
    n = len(frags)
    ends = {task.fragments_tp: n, task.control_tp: 0}
    assert task.caught_up(ends, {"fragments": frags})
    assert not task.caught_up({**ends, task.fragments_tp: n + 1}, {"fragments": frags})
    assert not task.caught_up({**ends, task.control_tp: 3}, {"fragments": frags})
    assert not task.caught_up({**ends, task.control_tp: None}, {"fragments": frags})
    assert not task.caught_up(ends, {})  # nothing fed yet: positions are still 0


def test_turn_scoped_records_off_their_partition_are_dead_lettered(task: PartitionTask) -> None:
    """A producer with another partitioner would split a turn; the worker says so."""
    from processor.kafka.partitioner import partition_for

    task.progress.input_partitions = 6
    turns = [f"t{i}" for i in range(100)]
    home = next(t for t in turns if partition_for(f"acme/{t}".encode(), 6) == 2)
    away = next(t for t in turns if partition_for(f"acme/{t}".encode(), 6) != 2)
    ok = records_of("x.control", [turn_started("acme", home)], start_ms=1000)
    bad = [record("x.control", 1, encode(turn_cancelled("acme", away)), ts_ms=1001)]
    step = task.build({"control": ok + bad}, time.time())
    dead = [orjson.loads(o.value) for o in step.plan.outputs if o.topic == "x.deadletter"]
    assert [(d["reason"], d["offset"]) for d in dead] == [("misrouted", 1)]
    assert "hashes to partition" in dead[0]["detail"]
