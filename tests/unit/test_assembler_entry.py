"""The Assembler's one entry point for records, ``handle`` (issue 41, item 1).

It replaced four (``handle``, ``handle_record``, ``handle_parsed``, ``handle_decoded``). A raw
record read from a topic is handled the same whichever work its caller already did (the bytes
only, their JSON value as the worker parses them, the decoded event as the offline replay
decodes it): the same outputs, the same dead letters and the same changelog. The stale check
belongs to the raw record in every form; an event made in process is applied as it is.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from processor.core.assembler import Assembler
from processor.core.events import DeadLetter, Dispatch, InputEvent, decode_input, encode
from processor.core.outputs import RecordSource
from processor.core.policy import Limits
from tests.unit.scenario import Call, registry, turn_started

SOURCE = RecordSource("fragments", 3, 41)
FORMS = ("bytes", "parsed", "decoded")
INVALID = b'{"v": 1, "type": "call.delta", "tenant": "acme"}'


def _handle(assembler: Assembler, payload: bytes, now: float, form: str) -> list[Any]:
    if form == "bytes":
        return assembler.handle(payload, now, source=SOURCE)
    if form == "parsed":
        return assembler.handle(payload, now, source=SOURCE, parsed=orjson.loads(payload))
    return assembler.handle(payload, now, source=SOURCE, decoded=decode_input(payload))


def _records() -> list[bytes]:
    call = Call()
    events: list[InputEvent] = [turn_started(), *call.stream('{"city": "Paris"}')]
    payloads = [encode(e) for e in events]
    payloads.insert(2, INVALID)  # JSON, but no call.delta: a dead letter
    return payloads


@pytest.mark.parametrize("form", FORMS)
def test_a_raw_record_gives_the_same_outputs_whatever_its_caller_already_did(form: str) -> None:
    reference, assembler = Assembler(registry()), Assembler(registry())
    for payload in _records():
        if form == "decoded" and payload == INVALID:
            continue  # a record that does not decode has no decoded form (its caller refuses it)
        expected = _handle(reference, payload, 100.0, "bytes")
        assert _handle(assembler, payload, 100.0, form) == expected
        assert assembler.drain_changes() == reference.drain_changes()
        if payload == INVALID:
            assert [o.reason for o in expected] == ["invalid_record"]
    assert sum(isinstance(o, Dispatch) for o in expected) == 1


def test_the_bytes_of_an_unusable_record_become_a_dead_letter_naming_its_source() -> None:
    [dead] = Assembler(registry()).handle(b"{not json", 100.0, source=SOURCE)
    assert isinstance(dead, DeadLetter) and dead.reason == "undecodable"
    assert (dead.partition, dead.offset) == (3, 41)


@pytest.mark.parametrize("form", FORMS)
def test_a_stale_raw_record_is_a_dead_letter_in_every_form(form: str) -> None:
    retention = Limits().retention_seconds
    payload = encode(Call(ts=100.0).start())
    [dead] = _handle(Assembler(registry()), payload, 100.0 + retention + 1, form)
    assert isinstance(dead, DeadLetter) and dead.reason == "stale_event"


def test_an_event_made_in_process_is_applied_as_it_is() -> None:
    retention = Limits().retention_seconds
    outputs = Assembler(registry()).handle(Call(ts=100.0).start(), 100.0 + retention + 1)
    assert not any(isinstance(o, DeadLetter) for o in outputs)


def test_raw_bytes_without_the_source_they_were_read_from_are_refused() -> None:
    with pytest.raises(TypeError):
        Assembler(registry()).handle(encode(Call().start()), 100.0)
