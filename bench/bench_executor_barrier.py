"""The executor's control barrier: how long a sync takes when nothing new is on control.

Before running a call, the executor reads the call's ``control`` partition up to its end offset
(:class:`processor.executor.barrier.ControlBarrier`). This measures ``sync`` on a caught-up
partition, the common case, on the real broker: the barrier as built (end offsets asked on
connections of their own), against the same barrier asking on its reader's connection, as it
did before, where the ListOffsets waits behind the reader's long-polled fetch (a broker answers
one connection's requests in order; aiokafka's fetch waits up to ``fetch_max_wait_ms``, 500 ms).
Interleaved, ``--syncs`` of each, a short pause between syncs (as between executions).

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python bench/bench_executor_barrier.py [--syncs 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from processor.core.authn import AllowUnsigned  # noqa: E402
from processor.executor.barrier import ControlBarrier  # noqa: E402
from processor.executor.fence import FenceState  # noqa: E402
from tests.integration.conftest import Runtime  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "executor_barrier.json"


class SharedConnectionBarrier(ControlBarrier):
    """The barrier as it was: end offsets asked on the reader's own connection."""

    async def start(self) -> None:
        await super().start()
        self._offsets, spare = self._consumer, self._offsets
        assert spare is not None
        await spare.stop()

    async def stop(self) -> None:
        self._offsets = None
        await super().stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(syncs: int, pause: float, bootstrap: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        rt = Runtime(bootstrap, f"bench-{uuid.uuid4().hex[:8]}.", Path(folder), 6)
        await rt.create_topics()
        barriers = {
            "own connections": ControlBarrier(rt.settings, lambda: FenceState(AllowUnsigned())),
            "reader's connection (before)": SharedConnectionBarrier(
                rt.settings, lambda: FenceState(AllowUnsigned())
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in barriers}
        try:
            for barrier in barriers.values():
                await barrier.start()
                for p in range(rt.partitions):  # warm: metadata, first fetch
                    await barrier.sync(p, 30)
            for n in range(syncs):
                for name, barrier in barriers.items():
                    await asyncio.sleep(pause)
                    started = time.perf_counter()
                    await barrier.sync(n % rt.partitions, 30)
                    times[name].append(time.perf_counter() - started)
        finally:
            for barrier in barriers.values():
                await barrier.stop()
            await rt.close()
    rows = {
        name: {
            "median_ms": statistics.median(ts) * 1000,
            "p90_ms": percentile(ts, 0.9) * 1000,
            "max_ms": max(ts) * 1000,
        }
        for name, ts in times.items()
    }
    before, after = rows["reader's connection (before)"], rows["own connections"]
    return {
        "benchmark": "executor_barrier",
        "syncs": syncs,
        "pause_seconds": pause,
        "rows": rows,
        "ratio_median_before_vs_after": before["median_ms"] / after["median_ms"],
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"`ControlBarrier.sync` on a caught-up partition, {result['syncs']} syncs each, "
        f"interleaved, {result['pause_seconds'] * 1000:.0f} ms apart.",
        "",
        "| end offsets asked on | median | p90 | max |",
        "|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        lines.append(
            f"| {name} | {row['median_ms']:.1f} ms | {row['p90_ms']:.1f} ms | "
            f"{row['max_ms']:.1f} ms |"
        )
    lines += [
        "",
        f"Median before / after: {result['ratio_median_before_vs_after']:.0f}x.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--syncs", type=int, default=40)
    parser.add_argument("--pause", type=float, default=0.05, help="seconds between syncs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    result = asyncio.run(measure(args.syncs, args.pause, bootstrap))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
