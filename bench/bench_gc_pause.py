"""Garbage-collector pauses while the Assembler's state grows: CPython's default vs the worker's.

The state a worker keeps for the retention window (a turn record, a response record and a
terminal call per call) is scanned by every full collection of CPython's default collector, so
its pauses grow with the state; the worker's policy (:mod:`processor.runtime.collector`) freezes
what survives, so full collections only scan what is new. This benchmark feeds ``--calls``
calls (each in its own turn: ``turn.started``, ``call.started``, three deltas, ``call.ended``,
``response.ended``, the worker benchmark's workload) through one Assembler in steps of 500
records, as the worker does, and times every collection with ``gc.callbacks``:

* ``default``: CPython's collector as it is;
* ``policy``: :class:`~processor.runtime.collector.Collector` as the worker runs it (settled
  after start-up, aged before every step, at most once a second).

Each run is a fresh process; runs of the two modes are interleaved (``--repeat`` each) and the
medians are kept. Figures: the longest pause (any generation), the time spent collecting, and
the objects the collector still tracks at the end.

    .venv/bin/python bench/bench_gc_pause.py [--calls 100000] [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:  # run as a script, or loaded by path (tests, run_all)
    sys.path.insert(0, str(HERE))

from fresh_runs import every_run, interleaved  # noqa: E402

MODES = ("default", "policy")
STEP = 500


def child(mode: str, calls: int) -> dict[str, Any]:
    """One run in this process (a fresh one): feed ``calls`` calls, time every collection."""
    sys.path[:0] = [str(ROOT), str(HERE)]
    import bench_worker_kafka as workload  # noqa: PLC0415
    import yaml  # noqa: PLC0415

    import processor.runtime.worker  # noqa: F401, PLC0415  (the worker's modules, as it runs)
    from processor.core.assembler import Assembler, RecordSource  # noqa: PLC0415
    from processor.core.events import encode  # noqa: PLC0415
    from processor.core.registry import Registry  # noqa: PLC0415
    from processor.runtime.collector import Collector  # noqa: PLC0415
    from tests.integration.conftest import TOOLS_YAML  # noqa: PLC0415

    registry = Registry.from_document(yaml.safe_load(TOOLS_YAML))
    assembler = Assembler(registry)
    collector = Collector(1.0 if mode == "policy" else 0.0)
    pauses: list[tuple[int, float]] = []
    started: list[float] = []

    def timer(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        else:
            pauses.append((info["generation"], time.perf_counter() - started.pop()))

    collector.settle(time.monotonic())
    gc.callbacks.append(timer)
    source = RecordSource("fragments", 0, 0)
    now = time.time()
    t0 = time.perf_counter()
    pending: list[bytes] = []
    for n in range(calls):
        turn, events = workload.call_records(n, "gc", ts=now)
        pending.append(encode(turn))
        pending.extend(encode(event) for event in events)
        if len(pending) >= STEP or n == calls - 1:
            collector.age(time.monotonic())
            for payload in pending:
                assembler.handle(payload, now, source=source)
            assembler.drain_changes()
            pending.clear()
    seconds = time.perf_counter() - t0
    gc.callbacks.remove(timer)
    full = [p for g, p in pauses if g == 2]
    return {
        "mode": mode,
        "calls": calls,
        "seconds": seconds,
        "max_pause_ms": max(p for _, p in pauses) * 1000 if pauses else 0.0,
        "max_full_pause_ms": max(full) * 1000 if full else 0.0,
        "full_collections": len(full),
        "gc_seconds": sum(p for _, p in pauses),
        "tracked_objects": len(gc.get_objects()),
        "frozen_objects": gc.get_freeze_count(),
        "inert_calls": len(assembler.inert),
    }


def run(calls: int, repeat: int) -> dict[str, Any]:
    runs = interleaved(
        __file__,
        MODES,
        ["--calls", str(calls)],
        repeat,
        lambda mode, result: (
            f"{mode:8s} max pause {result['max_pause_ms']:7.1f} ms, "
            f"{result['full_collections']} full, gc {result['gc_seconds']:.3f} s "
            f"of {result['seconds']:.1f} s"
        ),
    )
    medians = {
        mode: {
            key: statistics.median(r[key] for r in rs)
            for key in ("max_pause_ms", "gc_seconds", "seconds", "tracked_objects")
        }
        for mode, rs in runs.items()
    }
    return {
        "calls": calls,
        "repeat": repeat,
        "runs": runs,
        "medians": medians,
        "max_pause_ratio_policy_vs_default": medians["policy"]["max_pause_ms"]
        / max(medians["default"]["max_pause_ms"], 1e-9),
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["medians"]
    lines = [
        f"{result['calls']:,} calls fed to one Assembler in steps of {STEP} records; every "
        "collection timed (`gc.callbacks`); medians of "
        f"{result['repeat']} interleaved runs of each mode, each a fresh process.",
        "",
        "| collector | longest pause | time collecting | feed time | objects scanned at the end |",
        "|---|---|---|---|---|",
    ]
    for mode, label in (("default", "CPython's default"), ("policy", "the worker's policy")):
        r = m[mode]
        scanned = r["tracked_objects"]
        lines.append(
            f"| {label} | {r['max_pause_ms']:.1f} ms | {r['gc_seconds']:.3f} s | "
            f"{r['seconds']:.1f} s | {scanned:,.0f} |"
        )
    lines += [
        "",
        f"Longest pause, policy / default: {result['max_pause_ratio_policy_vs_default']:.2f}. "
        + every_run(result["runs"], "max_pause_ms", "ms"),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gc_pause.json")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.calls)))
        return
    result = run(args.calls, args.repeat)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(markdown(result))


if __name__ == "__main__":
    main()
