"""``processor replay`` takes its clock from the records, but only from records that decode.

Found by the ``records`` fuzz target (seed 7): a malformed record with a far-future ``ts`` moved
replay's clock before it was dead-lettered, so every open call expired (``idle_timeout``) and a
valid call sent next was lost to an input that had been rejected.
"""

from __future__ import annotations

import orjson

from processor.cli.offline import replay
from processor.core.assembler import Assembler
from processor.core.events import DeadLetter, Dispatch, Ledger, encode
from tests.unit.scenario import Call, registry, turn_started


def _outputs(lines: list[bytes]) -> list[object]:
    return list(replay(lines, Assembler(registry())))


def test_a_rejected_record_with_a_far_future_time_does_not_move_the_clock() -> None:
    call = Call()
    events = [turn_started(), *call.stream('{"city": "Oslo"}')]
    lines = [encode(e) for e in events]
    hostile = {**orjson.loads(lines[2]), "seq": "not a number", "ts": 1e12}  # invalid record
    lines.insert(3, orjson.dumps(hostile))
    outputs = _outputs(lines)
    [letter] = [o for o in outputs if isinstance(o, DeadLetter)]
    assert letter.reason == "invalid_record"
    assert [o.call_id for o in outputs if isinstance(o, Dispatch)] == ["call_0"]
    assert not [o for o in outputs if isinstance(o, Ledger) and o.state != "dispatched"]


def test_a_valid_record_still_moves_the_clock() -> None:
    """The other side: time does come from the records that decode (an idle call expires)."""
    call = Call()
    later = Call(call_id="call_1", response_id="resp-2", ts=100.0 + 10 * 24 * 3600)
    events = [turn_started(), *call.stream('{"city": "Oslo"}', complete=False)[:-1], later.start()]
    outputs = _outputs([encode(e) for e in events])
    ended = {o.call_id: o.terminal_reason for o in outputs if isinstance(o, Ledger)}
    assert ended == {"call_0": "idle_timeout"}
