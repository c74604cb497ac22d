"""How the claim-ahead fills an executor's slots: calls/s and slot occupancy by claim-ahead.

One executor (64 in flight, a handler that awaits ``asyncio.sleep(0.1)``) drains a 2,000-call
``dispatch`` backlog once per claim-ahead setting (``--ahead``, default 0 16 32 64), in this
process, one after the other; the plain consumer of ``bench_executor_throughput.py`` drains one
too, as the reference. Per run: steady calls/s (as in that benchmark) and the mean number of
handlers running, sampled every 5 ms between the 10th and the 90th percentile of the run.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python bench/bench_executor_claim_ahead.py \\
        [--calls 2000] [--ahead 0 16 32 64]

(Not a section of ``make bench``: it explains one of its figures, docs/benchmarks.md.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_executor_throughput as throughput  # noqa: E402

from processor.executor import client as executor_client  # noqa: E402
from processor.settings import Settings  # noqa: E402


async def _run(settings: Settings, calls: int, plain: bool) -> dict[str, Any]:
    samples: list[tuple[float, int]] = []
    started = executor_client.ExecutorClient.start

    async def start(self: Any) -> None:
        await started(self)

        async def sample() -> None:
            while True:
                samples.append((time.monotonic(), len(self.in_flight.tasks)))
                await asyncio.sleep(0.005)

        self._bench_sampler = asyncio.create_task(sample())

    executor_client.ExecutorClient.start = start  # type: ignore[method-assign]
    try:
        run = throughput.plain if plain else throughput.executor
        ends = await run(settings, calls, 0.1, 64)
    finally:
        executor_client.ExecutorClient.start = started  # type: ignore[method-assign]
    ordered = sorted(ends)
    lo, hi = ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10]
    window = [n for at, n in samples if lo <= at <= hi]
    return {
        "steady_calls_per_second": throughput._steady(ends),
        "mean_running": statistics.mean(window) if window else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--ahead", type=int, nargs="+", default=[0, 16, 32, 64])
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for name, ahead in [("plain", None), *((f"ahead {a}", a) for a in args.ahead)]:
        prefix = f"ca{uuid.uuid4().hex[:8]}."
        asyncio.run(throughput._backlog(args.bootstrap, prefix, args.calls, 6))
        settings = Settings(
            bootstrap_servers=args.bootstrap,
            topic_prefix=prefix,
            partitions=6,
            session_timeout_ms=6000,
            transaction_timeout_ms=5000,
            commit_timeout_seconds=4,
            executor_claim_ahead=ahead,
        )
        try:
            results[name] = asyncio.run(_run(settings, args.calls, ahead is None))
        finally:
            asyncio.run(throughput._drop(args.bootstrap, prefix, 6))
        print(name, json.dumps(results[name]), flush=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
