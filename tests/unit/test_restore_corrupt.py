"""A changelog record the Assembler cannot read back is skipped with a reason, never a crash.

``Assembler.restore`` returns None or why it skipped the record (the type of the problem only:
a message could quote a key or a value); the runtime logs and counts it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from tests.unit.scenario import Call, registry, turn_started

KINDS = st.sampled_from(["call:", "text:", "turn:", "resp:", "tool:", "tenant:", "cmd:", "x:", ""])


@settings(max_examples=300, deadline=None)
@given(KINDS, st.text(max_size=40), st.none() | st.binary(max_size=80))
def test_restore_applies_or_says_why_it_skipped(kind: str, rest: str, value: bytes | None) -> None:
    problem = Assembler(registry()).restore(kind + rest, value)
    assert problem is None or problem.startswith("unreadable record (")


def test_a_valid_changelog_restores_and_garbage_in_it_is_skipped() -> None:
    source = Assembler(registry())
    call = Call()
    source.handle(turn_started(), 100.0)
    for event in call.stream('{"city": "Oslo"}', complete=False):
        source.handle(event, 100.0)
    changes = source.drain_changes()
    restored = Assembler(registry())
    for change in changes:
        assert restored.restore(change.key, change.value) is None
    assert restored.call_state(call.key) == source.call_state(call.key)
    [turn] = [c for c in changes if c.key.startswith("turn:")]
    problem = restored.restore(turn.key, b'{"tenant": "acme", "unknown_field": 1}')
    assert problem is not None and "Oslo" not in problem
