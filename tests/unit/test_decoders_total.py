"""Every decoder is total (issue 9, item 1): any JSON value in any field, any bytes, any mutation.

Inputs: the worker's decoding (``decode_input``, the Assembler's ``handle`` of raw records, the
partition's wrong-topic/partition check, ``misrouted``), the executor's
``FenceState.apply_record``, the executor's record decoders (``decode_dispatch``,
``decode_entry``), ``processor replay`` and the ``tail`` renderers. Each must return a model, a
dead letter, an outcome or a line, and may raise only ``RecordRejected`` where that is its
contract; and nothing it outputs may fail to encode.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pytest
from aiokafka.structs import ConsumerRecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.cli.offline import output_line, replay
from processor.core.assembler import Assembler
from processor.core.errors import RecordRejected
from processor.core.events import (
    DeadLetter,
    OutputRecord,
    decode_input,
    encode,
)
from processor.core.outputs import RecordSource
from processor.executor.fence import ApplyOutcome, FenceState
from processor.executor.records import (
    EntryState,
    ExecutionEntry,
    decode_dispatch,
    decode_entry,
)
from processor.kafka.partitioner import misrouted
from processor.kafka.tail import record_json, record_line
from processor.runtime import intake
from processor.runtime.partition import PartitionTask
from processor.settings import Settings
from tests.unit.scenario import Call, registry
from tests.unit.wire_samples import JSON, KEYRING, NOW, SAMPLES

RAW = st.sampled_from(
    [b'"\\ud800"', b'"\\udc00x"', b"NaN", b"Infinity", b"1e999", b"-0", b"18446744073709551616",
     b'"\\u0000"', b'"\\u001f"', b"[" * 2000, b'{"a":' * 300 + b"1" + b"}" * 300]
)  # fmt: skip
"""Raw JSON text for one field: escapes orjson refuses, numbers out of range, deep nesting."""


@st.composite
def hostile_records(draw: st.DrawFn) -> bytes:
    """A valid record of any type with one field replaced, removed, or added (as bytes)."""
    record = dict(draw(st.sampled_from(SAMPLES)))
    field = draw(st.sampled_from([*record, "v", "type", "extra"]))
    how = draw(st.sampled_from(["json", "json", "raw", "drop"]))
    if how == "drop":
        record.pop(field, None)
        return orjson.dumps(record)
    if how == "json":
        record[field] = draw(JSON)
        return orjson.dumps(record)
    record[field] = "@@RAW@@"
    return orjson.dumps(record).replace(b'"@@RAW@@"', draw(RAW))


@st.composite
def mutated_streams(draw: st.DrawFn) -> list[bytes]:
    """Valid records, in order, with some replaced by hostile ones (a whole session's worth)."""
    lines = [orjson.dumps(r) for r in SAMPLES]
    for _ in range(draw(st.integers(1, 6))):
        index = draw(st.integers(0, len(lines) - 1))
        lines[index] = draw(hostile_records())
    return lines


ANY_BYTES = st.binary(max_size=300) | st.text(max_size=100).map(str.encode) | hostile_records()
PROPERTY = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # 2 shared cores: enough to find a crash class, cheap to run


def _task() -> PartitionTask:
    task = PartitionTask(0, Settings(), lambda: Assembler(registry()))
    task.progress.input_partitions = 6
    return task


TASK = _task()


def _handle(
    task: PartitionTask, record: ConsumerRecord, role: str, barrier: int | None
) -> list[OutputRecord]:
    """What the worker's step does with one record of the task's partition."""
    return intake.handle(
        task.assembler,
        record,
        role,
        NOW,
        barrier,
        partition=task.partition,
        input_partitions=task.progress.input_partitions,
    )


def _worker_handles(payload: bytes, role: str) -> None:
    """The worker's whole path for one record (parse, routing check, Assembler): every output
    encodes, and nothing raises."""
    topic = TASK.topics.fragments if role == "fragments" else TASK.topics.control
    record = ConsumerRecord(topic, 0, 1, 100_000, 1, b"k", payload, None, 1, len(payload), [])
    barrier = 5 if role == "fragments" else None
    for output in _handle(TASK, record, role, barrier):
        encode(output)


@PROPERTY
@given(ANY_BYTES)
def test_decode_input_returns_a_model_or_rejects(payload: bytes) -> None:
    for now in (None, NOW):
        try:
            event = decode_input(payload, now=now)
        except RecordRejected:
            continue
        encode(event)  # whatever decodes also encodes


@PROPERTY
@given(ANY_BYTES)
def test_the_worker_never_raises_on_one_record(payload: bytes) -> None:
    for role in ("fragments", "control"):
        _worker_handles(payload, role)
    with contextlib.suppress(orjson.JSONDecodeError):
        data = orjson.loads(payload)
        if isinstance(data, dict):
            misrouted(data, 0, 6)
    assembler = Assembler(registry())
    for output in assembler.handle(payload, NOW, source=RecordSource("fragments", 0, 1)):
        encode(output)
    assembler.drain_changes()


@PROPERTY
@given(ANY_BYTES)
def test_the_fence_never_raises_on_one_record(payload: bytes) -> None:
    fence = FenceState(verifier=KEYRING)
    assert isinstance(fence.apply_record(payload, NOW), ApplyOutcome)


@PROPERTY
@given(mutated_streams())
def test_a_session_of_mutated_records_never_crashes_anything(lines: list[bytes]) -> None:
    assembler, fence = Assembler(registry()), FenceState(verifier=KEYRING)
    for output in replay(lines, assembler):  # processor replay's loop, time from the records
        output_line(output)
    assembler.tick(NOW + 10_000)
    changes = assembler.drain_changes()
    restored = Assembler(registry())
    for change in changes:
        restored.restore(change.key, change.value)
    for line in lines:
        fence.apply_record(line, NOW)


def _dispatch_sample() -> dict[str, Any]:
    key = Call().key
    return {
        **key.model_dump(), "v": 1, "type": "dispatch", "dispatch_id": "d1", "tool": "get_weather",
        "tool_version": "2", "arguments": {"city": "Paris"}, "args_digest": "sha256:x",
        "actor": "alice", "provider": "test", "terminal_event_id": "e1",
        "confirmation_ref": None, "ts": NOW,
    }  # fmt: skip


def _entry_sample() -> dict[str, Any]:
    key = Call().key
    entry = ExecutionEntry(
        **key.model_dump(), group="g", dispatch_id="d1", state=EntryState.CLAIMED,
        tool="get_weather", tool_version="2", executor_id="x", dispatch_partition=0,
        dispatch_offset=3, ts=NOW,
    )  # fmt: skip
    return dict(orjson.loads(encode(entry)))


@st.composite
def hostile_outputs(draw: st.DrawFn) -> bytes:
    record = dict(draw(st.sampled_from([_dispatch_sample(), _entry_sample()])))
    field = draw(st.sampled_from([*record, "extra"]))
    record[field] = draw(JSON)
    return orjson.dumps(record)


def _consumer_record(value: bytes | None, timestamp: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="t", partition=0, offset=1, timestamp=timestamp, timestamp_type=0, key=b"k",
        value=value, checksum=None, serialized_key_size=1, serialized_value_size=1, headers=[],
    )  # fmt: skip


@PROPERTY
@given(
    st.none() | ANY_BYTES | hostile_outputs(),
    st.integers(-(2**63), 2**63 - 1) | st.just(0),
)
def test_executor_decoders_and_tail_lines_are_total(value: bytes | None, timestamp: int) -> None:
    for decoder in (decode_dispatch, decode_entry):
        with contextlib.suppress(RecordRejected):
            decoder(value)
    record = _consumer_record(value, timestamp)
    assert isinstance(record_line(record), str)
    assert isinstance(record_json(record), bytes)


def test_valid_samples_still_decode() -> None:
    """The property tests start from valid records: make sure they are."""
    for record in SAMPLES:
        decode_input(orjson.dumps(record), now=NOW)
    decode_dispatch(orjson.dumps(_dispatch_sample()))
    decode_entry(orjson.dumps(_entry_sample()))


HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 1.5, 1e308, -1e308, "", "nan", "inf", "a\x1fb",
    "x" * 600, [], [1, [2]], {}, {"a": None}, "call.delta", "1",
]  # fmt: skip


def test_every_hostile_value_in_every_field_of_every_record_type() -> None:
    """Exhaustive over (record type, field, value): the property tests above sample; this does not."""
    assembler, fence = Assembler(registry()), FenceState(verifier=KEYRING)
    source = RecordSource("control", 0, 1)
    for sample in SAMPLES:
        for field in [*sample, "extra"]:
            for value in HOSTILE_VALUES:
                payload = orjson.dumps({**sample, field: value})
                with contextlib.suppress(RecordRejected):
                    encode(decode_input(payload, now=NOW))
                for output in assembler.handle(payload, NOW, source=source):
                    encode(output)
                assert isinstance(fence.apply_record(payload, NOW), ApplyOutcome)
                _worker_handles(payload, "control")
            without = {k: v for k, v in sample.items() if k != field}
            with contextlib.suppress(RecordRejected):
                decode_input(orjson.dumps(without))
    assembler.drain_changes()


class _Panic(BaseException):
    """Stands for pyo3's PanicException (a Rust extension's panic), a BaseException."""


@pytest.mark.parametrize("raised", [_Panic("rpds"), KeyError("k")])
def test_a_core_failure_on_one_record_dead_letters_it_even_a_panic(
    raised: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record whose handling raises is dead-lettered (``internal_error``) and the partition
    goes on. A panic of a Rust extension (pyo3's PanicException derives from BaseException)
    went through ``except Exception`` and stopped the worker, then every worker that read the
    record after it. KeyboardInterrupt and SystemExit still pass."""
    payload = encode(Call().start())
    [partition] = [p for p in range(6) if misrouted(orjson.loads(payload), p, 6) is None]
    task = PartitionTask(partition, Settings(), lambda: Assembler(registry()))
    task.progress.input_partitions = 6

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise raised

    monkeypatch.setattr(task.assembler, "handle", fail)
    record = ConsumerRecord(task.topics.fragments, partition, 7, 100_000, 1, b"k", payload, None,
                            1, len(payload), [])  # fmt: skip
    [dead] = _handle(task, record, "fragments", 5)
    assert isinstance(dead, DeadLetter) and dead.reason == "internal_error"
    assert dead.detail == f"internal error {type(raised).__name__}"
    raised = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _handle(task, record, "fragments", 5)
