"""A corpus of bad records on a real broker, between valid calls: each becomes a dead letter with
its reason, the partitions keep moving, and every valid call next to them acts exactly once.

Written to ``fragments`` and ``control`` with a plain producer (as a buggy or hostile client
would): not JSON, binary, huge, wrong ``v``, unknown type, missing or mistyped fields, a key
that sends a turn's record to another partition, a record written straight to the wrong
partition, a control event on ``fragments`` and a fragment on ``control``, duplicated event ids
(same and different content), and headers that lie (a malformed ``traceparent``, a ``tenant``
header naming another tenant: headers are never trusted for identity).
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from processor.core.events import encode, turn_key
from processor.kafka.partitioner import partition_for
from tests.integration.conftest import Runtime, call_events, turn_started, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.partitions(2)]

ARGS = '{"city": "Oslo", "units": "c"}'


def _other_partition_turn(tenant: str, turn: str, partitions: int) -> str:
    """A turn id of ``tenant`` whose key hashes to another partition than ``turn``'s."""
    home = partition_for(turn_key(tenant, turn).encode(), partitions)
    for i in range(100):
        candidate = f"{turn}-elsewhere-{i}"
        if partition_for(turn_key(tenant, candidate).encode(), partitions) != home:
            return candidate
    raise AssertionError("no other partition found")


async def test_bad_records_are_dead_lettered_and_valid_calls_act_once(runtime: Runtime) -> None:
    rt = runtime
    producer = await rt.producer()
    rng = random.Random(12)
    frag, ctl = rt.topics.fragments, rt.topics.control
    worker = rt.start_worker()
    await worker.wait_ready()

    valid = [("acme", f"good-{i}") for i in range(6)]
    await rt.control(*(turn_started(t, u) for t, u in valid))
    events = {key: call_events(*key, "call_0", ARGS) for key in valid}

    def home(tenant: str, turn: str) -> int:
        return partition_for(turn_key(tenant, turn).encode(), rt.partitions)

    sample = orjson.loads(encode(events[valid[0]][1]))  # a valid call.delta, as a dict

    def variant(**changes: Any) -> bytes:
        record = {**sample, **changes}
        return orjson.dumps({k: v for k, v in record.items() if v is not ...})

    key0 = turn_key(*valid[0]).encode()
    elsewhere = _other_partition_turn("acme", "good-0", rt.partitions)
    wrong_partition = 1 - home(*valid[0])
    bad: list[tuple[str, bytes, bytes | None, int | None, list[tuple[str, bytes]], str]] = [
        # (topic, value, key, partition, headers, expected dead-letter reason)
        (frag, b"this is not json", key0, None, [], "undecodable"),
        (frag, rng.randbytes(300), key0, None, [], "undecodable"),
        (frag, b"{" + b'"x":' * 200_000 + b"1}", key0, None, [], "undecodable"),  # ~800 KB
        (frag, variant(v=2), key0, None, [], "unknown_version"),
        (frag, variant(v="1"), key0, None, [], "unknown_version"),
        (frag, variant(type="call.exploded"), key0, None, [], "unknown_type"),
        (frag, variant(type=[]), key0, None, [], "unknown_type"),
        (frag, variant(seq=...), key0, None, [], "invalid_record"),  # missing field
        (frag, variant(seq="one"), key0, None, [], "invalid_record"),
        # a tenant outside the identifier alphabet, on its own key's partition
        (
            frag,
            variant(tenant="ac\x1f"),
            turn_key("ac\x1f", "good-0").encode(),
            None,
            [],
            "invalid_record",
        ),
        (frag, encode(turn_started("acme", "good-0")), key0, None, [], "wrong_topic"),
        (ctl, encode(events[valid[0]][0]), key0, None, [], "wrong_topic"),
        (ctl, b'{"v":1,"type":{}}', key0, None, [], "unknown_type"),
        # the record of turn good-0, keyed as another turn: it lands on the other partition
        (frag, variant(seq=50), turn_key("acme", elsewhere).encode(), None, [], "misrouted"),
        # written straight to the wrong partition, key and all
        (frag, variant(seq=51), key0, wrong_partition, [], "misrouted"),
    ]
    # valid records before, between and after the bad ones; duplicates of valid events; lying
    # headers on valid records
    lying = [("traceparent", b"00-zzzz-not-a-trace"), ("tenant", b"globex")]
    for i, key in enumerate(valid):
        head, tail = events[key][:2], events[key][2:]
        await rt.publish(head)
        for item in bad[i :: len(valid)]:
            topic, value, record_key, partition, headers, _ = item
            await producer.send_and_wait(
                topic, value, key=record_key, partition=partition, headers=headers
            )
        for event in tail:
            await producer.send_and_wait(frag, encode(event), key=turn_key(*key).encode(),
                                         headers=lying)  # fmt: skip
        await rt.publish(tail[:1])  # the same event id again, same content: absorbed

    async def all_dispatched() -> list[dict[str, Any]]:
        found = await rt.dispatches()
        return found if len(found) >= len(valid) else []

    await wait_until(all_dispatched, timeout=90, what="every valid call dispatched")
    await rt.wait_caught_up(timeout=90)  # past every bad record, on both partitions

    dispatches = await rt.dispatches()
    assert sorted((d["tenant"], d["turn_id"]) for d in dispatches) == sorted(valid)
    assert all(d["arguments"] == orjson.loads(ARGS) for d in dispatches)
    dead = await rt.read("deadletter")
    assert sorted(d["reason"] for d in dead) == sorted(item[-1] for item in bad)
    for d in dead:
        assert d["payload_bytes"] > 0 and len(d["payload_sha256"]) == 64
        assert "Oslo" not in orjson.dumps(d).decode()  # no payload in a dead letter
    assert worker.proc.poll() is None  # still running
    errors = [
        r
        for r in worker.log_records()
        if r.get("level") in ("error", "critical") and r.get("logger", "").startswith("processor")
    ]
    assert errors == []  # the worker's own (aiokafka logs a busy coordinator as an error)
