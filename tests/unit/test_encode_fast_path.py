"""``encode`` writes a flat record's ``__dict__`` directly: the bytes must be the general path's.

The general path is ``orjson.dumps(record.model_dump(mode="json"))`` (without a null
``namespace``, which the contract leaves out), with an ASCII-escaped fallback for text orjson refuses. The direct path is taken only for record types whose every
field is stored as the JSON value it dumps to (``events._FLAT``); ``test_core_golden`` pins the
bytes of a seeded workload's outputs, and this file compares the two paths record by record:
every output of the seeded workload, every input type, and records holding a lone surrogate.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ConfigDict, Field, computed_field, field_serializer

from processor.core import events
from processor.core.assembler import Assembler
from processor.core.events import (
    CallKey,
    ResponseStatus,
    UserState,
    encode,
    get_args,
)
from processor.executor.records import (
    EntryState,
    ExecutionEntry,
    ExecutionOutcome,
    ExecutionResult,
)
from tests.unit.scenario import Call, in_namespace, registry, turn_cancelled, turn_started


def general(record: BaseModel) -> bytes:
    omit = "namespace" in type(record).model_fields and record.namespace is None
    data = record.model_dump(mode="json", exclude={"namespace"} if omit else None)
    try:
        return orjson.dumps(data)
    except TypeError:
        return json.dumps(data, ensure_ascii=True, allow_nan=False).encode("ascii")


def _records() -> list[BaseModel]:
    """Inputs of every kind a scenario makes, and every output the Assembler gives for them."""
    out: list[BaseModel] = []
    assembler = Assembler(registry())
    call = Call()
    inputs: list[Any] = [turn_started(), *call.stream('{"city": "Oslo"}')]
    inputs.append(call.response_ended(ResponseStatus.COMPLETED))
    other = Call(call_id="c2", turn_id="t2")
    inputs += [turn_started(turn_id="t2"), other.start(), turn_cancelled(turn_id="t2")]
    for event in inputs:
        out.append(event)
        out += assembler.handle(event, 1.0)
    out += assembler.tick(10_000.0)
    crm = Assembler(registry(in_namespace("crm")))
    namespaced = Call(turn_id="t3", namespace="crm")
    for event in [turn_started(turn_id="t3"), *namespaced.stream('{"city": "Oslo"}')]:
        out.append(event)
        out += crm.handle(event, 1.0)
    return out


RECORDS = _records()


def test_the_scenario_covers_flat_outputs_and_the_nested_audit() -> None:
    kinds = {type(r) for r in RECORDS}
    assert {events.Dispatch, events.Status, events.Ledger, events.Audit} <= kinds
    assert events.Audit not in events._FLAT  # its calls are nested models: the general path


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_the_direct_path_writes_the_general_paths_bytes(record: BaseModel) -> None:
    assert encode(record) == general(record)


def test_a_namespace_is_written_only_when_set() -> None:
    """A bare tool's records are what a reader predating ``namespace`` accepts; a namespaced
    one's name it (and such a reader, forbidding unknown fields, refuses them)."""
    named = [r for r in RECORDS if "namespace" in type(r).model_fields]
    assert {type(r) for r in named} >= {events.CallStarted, events.Dispatch, events.Ledger}
    for record in named:
        data = orjson.loads(encode(record))
        if record.namespace is None:
            assert "namespace" not in data
        else:
            assert data["namespace"] == "crm"
    assert any(r.namespace == "crm" for r in named if isinstance(r, events.Dispatch))


def test_every_input_type_but_none_with_a_nested_model_is_flat() -> None:
    inputs = set(get_args(get_args(events.InputEvent)[0]))
    assert inputs <= events._FLAT


def test_a_lone_surrogate_takes_the_escaped_fallback() -> None:
    """Validation refuses one in text fields, but not inside a value of ``Any`` (a record built
    in-process): orjson refuses it, and the general path's escaped form is written."""
    dispatch = next(r for r in RECORDS if isinstance(r, events.Dispatch))
    bad = dispatch.model_copy(update={"arguments": {"city": "bad \ud800 text"}})
    assert type(bad) in events._FLAT
    assert encode(bad) == general(bad)
    assert b"\\ud800" in encode(bad)


def test_fields_that_dump_differently_are_not_flat() -> None:
    class Nested(BaseModel):
        key: CallKey

    class Dated(BaseModel):
        at: datetime

    class Plain(BaseModel):
        name: str | None
        state: UserState
        items: list[str]
        data: dict[str, Any]

    assert not events._flat_value(Nested.model_fields["key"].annotation)
    assert not events._flat_value(Dated.model_fields["at"].annotation)
    assert all(events._flat_value(f.annotation) for f in Plain.model_fields.values())


def _executor_records() -> list[BaseModel]:
    """The executor's records of one call (bare and namespaced): its claim, its end and its
    result, with and without an output."""
    out: list[BaseModel] = []
    for dispatch in [r for r in RECORDS if isinstance(r, events.Dispatch)]:
        claim = ExecutionEntry.for_dispatch(
            dispatch, "g", "e1", EntryState.CLAIMED, 1.5, partition=2, offset=7
        )
        out += [claim, claim.moved_to(EntryState.SUCCEEDED, "e1", 2.0)]
        for output in (None, {"ok": True, "n": [1, 2.5, None, "x"]}):
            out.append(
                ExecutionResult.for_dispatch(
                    dispatch,
                    group="g",
                    executor_id="e1",
                    outcome=ExecutionOutcome.SUCCEEDED,
                    ts=2.0,
                    output=output,
                    started_at=1.5,
                )
            )
    return out


def test_the_executors_records_take_the_direct_path_and_write_the_same_bytes() -> None:
    records = _executor_records()
    assert {r.namespace for r in records} == {None, "crm"}  # type: ignore[attr-defined]
    for record in records:
        assert events._flat_model(type(record)), type(record).__name__
        assert encode(record) == general(record)


def test_models_that_would_dump_otherwise_are_not_flat() -> None:
    """A serializer, a computed field, an excluded field or extra fields change what
    ``model_dump`` writes: such a model never takes the direct path."""
    class Serialized(BaseModel):
        name: str

        @field_serializer("name")
        def _upper(self, value: str) -> str:
            return value.upper()

    class Computed(BaseModel):
        name: str

        @computed_field  # type: ignore[prop-decorator]
        @property
        def size(self) -> int:
            return len(self.name)

    class Excluded(BaseModel):
        name: str
        secret: str = Field(exclude=True)

    class Extra(BaseModel):
        model_config = ConfigDict(extra="allow")
        name: str

    made = [
        Serialized(name="a"),
        Computed(name="ab"),
        Excluded(name="a", secret="s"),
        Extra(name="a", more=1),  # type: ignore[call-arg]
    ]
    for record in made:
        assert not events._flat_model(type(record)), type(record).__name__
        assert encode(record) == general(record)
