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
from pydantic import BaseModel

from processor.core import events
from processor.core.assembler import Assembler
from processor.core.events import (
    CallKey,
    ResponseStatus,
    UserState,
    encode,
    get_args,
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
