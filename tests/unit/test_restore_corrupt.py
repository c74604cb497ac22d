"""A changelog record the Assembler cannot read back raises CorruptState, never anything else.

It is not skipped (it may be a cancellation): the worker keeps the partition unready and logs
the changelog coordinates. Nothing of a corrupt record is applied.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.errors import CorruptState
from tests.unit.scenario import Call, registry, turn_started

KINDS = st.sampled_from(["call:", "text:", "turn:", "resp:", "tool:", "tenant:", "cmd:", "x:", ""])


@settings(max_examples=300, deadline=None)
@given(KINDS, st.text(max_size=40), st.none() | st.binary(max_size=80))
def test_restore_applies_or_raises_corrupt_state(kind: str, rest: str, value: bytes | None) -> None:
    assembler = Assembler(registry())
    try:
        assembler.restore(kind + rest, value)
    except CorruptState as exc:
        assert exc.reason == "corrupt_state"
        shown = (kind + rest).partition(":")[0][:16] if ":" in kind + rest else "(no kind)"
        assert re.fullmatch(r"\w+", exc.detail.removeprefix(f"{shown} record: "))  # no value


def test_a_valid_changelog_restores_and_garbage_in_it_is_reported() -> None:
    source = Assembler(registry())
    call = Call()
    source.handle(turn_started(), 100.0)
    for event in call.stream('{"city": "Oslo"}', complete=False):
        source.handle(event, 100.0)
    changes = source.drain_changes()
    restored = Assembler(registry())
    for change in changes:
        restored.restore(change.key, change.value)
    assert restored.call_state(call.key) == source.call_state(call.key)
    [turn] = [c for c in changes if c.key.startswith("turn:")]
    with pytest.raises(CorruptState, match="turn record"):
        restored.restore(turn.key, b'{"tenant": "acme", "unknown_field": 1}')
