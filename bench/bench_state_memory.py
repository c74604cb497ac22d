"""State at sustained load: the Assembler's resident memory after N completed calls.

One sans-IO :class:`~processor.core.assembler.Assembler` (one partition, default ``Limits`` unless
told otherwise) receives N ordinary calls, one per turn, spread over 50 tenants, each with about
200 B of arguments: ``turn.started``, ``call.started``, two deltas, ``call.ended`` and
``response.ended`` (completed), so every call dispatches and becomes an inert fact. The clock is
passed in: calls arrive ``--rate`` per simulated second (default 10/s, so 1,000,000 calls span
27.8 simulated hours and retention, 24 h by default, really forgets), and ``tick`` runs once per
simulated minute.

Reported: RSS growth over the baseline (after imports and set-up), bytes kept per completed call
(growth / calls still held), how many inert calls, turns and responses are held, and the
changelog volume (records and bytes per input record, drained once per batch of ``--batch``
input records, as the worker drains once per transaction).

Run: ``python bench/bench_state_memory.py --calls 100000`` and ``--calls 1000000`` (each in its
own process); the figures in docs/benchmarks.md ("State") are this output.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def run(calls: int, rate: float, batch: int) -> dict[str, Any]:
    from processor.core.assembler import Assembler  # noqa: PLC0415
    from processor.core.events import (  # noqa: PLC0415
        CallDelta,
        CallEnded,
        CallStarted,
        Dispatch,
        ResponseEnded,
        ResponseStatus,
        TurnStarted,
    )
    from processor.core.registry import Registry  # noqa: PLC0415

    registry = Registry.from_document(
        {"tools": [{"name": "search_docs", "parameters": {"type": "object"}}]}
    )
    asm = Assembler(registry)
    start = 1_000_000.0
    now = start
    dispatched = 0
    inputs = 0
    changelog_records = 0
    changelog_bytes = 0
    since_drain = 0
    next_tick = start + 60.0
    query = "x" * 170

    def drain() -> None:
        nonlocal changelog_records, changelog_bytes, since_drain
        for change in asm.drain_changes():
            changelog_records += 1
            changelog_bytes += len(change.key.encode()) + len(change.value or b"")
        since_drain = 0

    baseline = _status_kib("VmRSS")
    t0 = time.perf_counter()
    for i in range(calls):
        now = start + i / rate
        tenant = f"tenant-{i % 50:02d}"
        turn = f"turn-{i:09d}"
        b = {"tenant": tenant, "turn_id": turn, "response_id": f"resp-{i:09d}",
             "provider": "bench", "ts": now}  # fmt: skip
        c = {**b, "item_id": f"item-{i:09d}", "call_id": f"call_{i:09d}"}
        events = (
            TurnStarted(
                command_id=f"bind-{i}",
                issued_by="gw",
                issued_at=now,
                tenant=tenant,
                turn_id=turn,
                actor="user-1",
            ),
            CallStarted(**c, event_id=f"e{i}.s", tool="search_docs", actor="user-1"),
            CallDelta(**c, event_id=f"e{i}.1", seq=1, delta='{"query": "'),
            CallDelta(**c, event_id=f"e{i}.2", seq=2, delta=query + '", "limit": 10}'),
            CallEnded(**c, event_id=f"e{i}.e", seq=3, terminal_event_id=f"term-{i:09d}"),
            ResponseEnded(**b, event_id=f"e{i}.r", status=ResponseStatus.COMPLETED, reason="stop"),
        )
        for event in events:
            inputs += 1
            since_drain += 1
            for out in asm.handle(event, now):
                dispatched += isinstance(out, Dispatch)
            if since_drain >= batch:
                drain()
        if now >= next_tick:
            asm.tick(now)
            drain()
            next_tick = now + 60.0
    asm.tick(now)
    drain()
    seconds = time.perf_counter() - t0
    growth_kib = _status_kib("VmRSS") - baseline
    held = getattr(asm, "inert_calls", None)
    if held is None:  # before the inert table existed
        held = sum(1 for buf in asm.calls.values() if buf.state.absorbing)
    return {
        "calls": calls,
        "rate_per_s": rate,
        "simulated_hours": round(calls / rate / 3600, 1),
        "seconds": round(seconds, 1),
        "dispatched": dispatched,
        "rss_growth_mib": round(growth_kib / 1024, 1),
        "peak_growth_mib": round((_status_kib("VmHWM") - baseline) / 1024, 1),
        "calls_held": held,
        "turns_held": len(asm.control.turns),
        "responses_held": len(asm.control.responses),
        "bytes_per_held_call": round(growth_kib * 1024 / held) if held else None,
        "changelog_records_per_input": round(changelog_records / inputs, 3),
        "changelog_bytes_per_input": round(changelog_bytes / inputs, 1),
        "batch": batch,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=10.0, help="calls per simulated second")
    parser.add_argument("--batch", type=int, default=100, help="input records per drain")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.calls, args.rate, args.batch)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main())
