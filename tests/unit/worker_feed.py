"""Events fed to an Assembler as the worker reads them, for unit tests: each one's bytes, through
the decoder and the stale check, from a fragments partition; and the clock skew the stale check
allows."""

from __future__ import annotations

from processor.core.assembler import Assembler
from processor.core.events import InputEvent, encode
from processor.core.outputs import RecordSource
from processor.core.policy import Limits

SKEW = Limits().max_clock_skew_seconds
SOURCE = RecordSource("fragments", 0, 0)


def feed(assembler: Assembler, events: list[InputEvent], now: float) -> list[object]:
    """Each event as the worker reads it: its bytes, through the decoder and the stale check."""
    out: list[object] = []
    for event in events:
        out += assembler.handle(encode(event), now, source=SOURCE)
    return out
