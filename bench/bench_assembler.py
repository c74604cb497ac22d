"""Per-delta cost of assembly is linear: a 1 MB argument costs about 10x a 100 KB one, not 100x.

Runs the whole Assembler path (start, ~20-character deltas as providers send them, terminal:
scan, one strict parse, schema validation, dispatch) for argument documents of ~100 KB and ~1 MB,
best of N runs each, in one process, and reports the time ratio. Ratios, not absolute times,
are the figure to compare: this machine is small and noisy.

    .venv/bin/python bench/bench_assembler.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import orjson

from processor.core.assembler import Assembler
from processor.core.events import (
    CallDelta,
    CallEnded,
    CallStarted,
    Dispatch,
    ResponseEnded,
    ResponseStatus,
    TurnStarted,
)
from processor.core.policy import Limits
from processor.core.registry import Registry

DELTA = 20
REGISTRY = Registry.from_document(
    {"tools": [{"name": "ingest", "parameters": {"type": "object", "required": ["rows"]}}]}
)
RESULTS = Path(__file__).parent / "results" / "assembler.json"


def document(target_bytes: int) -> str:
    rows: list[dict[str, Any]] = []
    text = ""
    i = 0
    while len(text) < target_bytes:
        rows.append(
            {
                "id": i,
                "name": f'row "{i}" with unicode é and escapes \\n',
                "price": i * 1.25,
                "tags": ["a", "b", {"nested": [1, 2, 3, None, True]}],
            }
        )
        i += 1
        if i % 64 == 0:
            text = orjson.dumps({"rows": rows}).decode()
    return orjson.dumps({"rows": rows}).decode()


def events(text: str) -> list[Any]:
    ids = {"tenant": "t", "turn_id": "u", "response_id": "r", "item_id": "i", "call_id": "c"}
    common = {**ids, "provider": "bench", "ts": 1.0}
    out: list[Any] = [
        TurnStarted(
            command_id="s", issued_by="g", issued_at=1.0, tenant="t", turn_id="u", actor="a"
        ),
        CallStarted(event_id="e0", tool="ingest", actor="a", **common),
    ]
    pieces = [text[i : i + DELTA] for i in range(0, len(text), DELTA)]
    out += [CallDelta(event_id=f"e{n}", seq=n, delta=p, **common) for n, p in enumerate(pieces, 1)]
    out.append(CallEnded(event_id="end", seq=len(pieces) + 1, terminal_event_id="T", **common))
    # a call acts once its response completed (response gating)
    response = {k: common[k] for k in ("tenant", "turn_id", "response_id", "provider", "ts")}
    out.append(ResponseEnded(event_id="rend", status=ResponseStatus.COMPLETED, **response))
    return out


def run_once(evs: list[Any]) -> float:
    assembler = Assembler(REGISTRY, Limits(max_call_bytes=4 << 20, max_deltas=1_000_000))
    started = time.perf_counter()
    dispatched = 0
    for event in evs:
        dispatched += sum(isinstance(o, Dispatch) for o in assembler.handle(event, 2.0))
    elapsed = time.perf_counter() - started
    assert dispatched == 1
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = {"100KB": 100_000, "1MB": 1_000_000}
    best: dict[str, float] = {}
    nbytes: dict[str, int] = {}
    for label, size in sizes.items():
        text = document(size)
        evs = events(text)
        best[label] = min(run_once(evs) for _ in range(args.repeat))
        nbytes[label] = len(text.encode())
        mb = nbytes[label] / 1e6
        print(
            f"{label:>6}: {len(evs) - 4:>6} deltas, best {best[label] * 1000:8.1f} ms, {mb / best[label]:6.2f} MB/s"
        )
    ratio = best["1MB"] / best["100KB"]
    size_ratio = nbytes["1MB"] / nbytes["100KB"]
    print(f"time ratio {ratio:.2f} for a size ratio of {size_ratio:.2f}")
    print(f"cost per byte, 1MB vs 100KB: {ratio / size_ratio:.2f}  (linear = 1.0)")
    RESULTS.parent.mkdir(exist_ok=True)
    result = {
        "best_seconds": best,
        "bytes": nbytes,
        "time_ratio": ratio,
        "size_ratio": size_ratio,
        "per_byte_ratio": ratio / size_ratio,
        "delta_chars": DELTA,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
