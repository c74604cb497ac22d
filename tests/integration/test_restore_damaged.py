"""A damaged changelog on a real broker: unreadable records are skipped and logged, never fatal.

Changelog partition 0 holds, in committed transactions, a cancelled turn, records this version
cannot read (a key that is not UTF-8, a value that is not JSON, an unknown kind, a call record
whose value names another call) and a second cancelled turn. ``restore_partition`` reads all of
them, skips the damaged ones with a logged reason and their offsets, and restores the rest.
"""

from __future__ import annotations

import logging

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from processor.core.assembler import Assembler
from processor.core.control import turn_state_key
from processor.runtime.restore import restore_partition
from tests.integration.conftest import Runtime
from tests.unit.scenario import registry

pytestmark = pytest.mark.integration


def _turn(turn: str) -> bytes:
    value = {"tenant": "acme", "turn_id": turn, "actor": "user-1", "session": None,
             "cancelled": "user_stop", "last_seen": 100.0}  # fmt: skip
    return orjson.dumps(value)


@pytest.mark.partitions(1)
async def test_unreadable_changelog_records_are_skipped_and_logged(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    records: list[tuple[bytes, bytes]] = [
        (turn_state_key("acme", "t1").encode(), _turn("t1")),
        (b"\xff\xfe not utf-8", b"{}"),
        (turn_state_key("acme", "t2").encode(), b"\x00 not json"),
        (b"mystery:[]", b"{}"),
        (b'call:["acme","t1","r","i","c"]', b'{"key": ["x","y","z","w","v"], "state": "failed"}'),
        (turn_state_key("acme", "t3").encode(), _turn("t3")),
    ]
    producer = AIOKafkaProducer(
        transactional_id=f"{runtime.prefix}damage", **runtime.settings.kafka_client_kwargs()
    )
    await producer.start()
    try:
        async with producer.transaction():
            for key, value in records:
                await producer.send(runtime.topics.changelog, value, key=key, partition=0)
    finally:
        await producer.stop()

    assembler = Assembler(registry())
    with caplog.at_level(logging.ERROR, logger="processor.runtime.restore"):
        result = await restore_partition(
            assembler, runtime.topics.changelog, 0, runtime.settings, timeout=60
        )
    assert (result.records, result.skipped) == (6, 4)
    skipped = [r for r in caplog.records if r.getMessage() == "changelog record skipped"]
    assert sorted(r.fields["offset"] for r in skipped) == [1, 2, 3, 4]  # type: ignore[attr-defined]
    assert all(r.fields["reason"].startswith("unreadable") or "UTF-8" in r.fields["reason"]
               for r in skipped)  # type: ignore[attr-defined]  # fmt: skip
    assert set(assembler.control.turns) == {("acme", "t1"), ("acme", "t3")}
    assert assembler.calls == {} and assembler.inert == {}
