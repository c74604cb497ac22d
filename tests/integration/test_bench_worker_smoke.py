"""A smoke run of bench/bench_worker_kafka.py on the real broker, at minimal scale.

Throughput (one worker, two workers, the pass-through) and latency runs on a backlog of a few
calls: every run must see every dispatch record (or pass-through copy) and give well-formed
figures. No timing is asserted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_worker_kafka.py"


def test_worker_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "worker.json"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    args = ["--calls", "100", "--repeat", "1", "--latency-seconds", "2", "--timeout", "120"]
    done = subprocess.run(
        [sys.executable, str(BENCH), *args, "--results", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
    medians = result["throughput"]["median_calls_per_second"]
    assert set(medians) == {"1 worker", "2 workers", "passthrough"}
    assert all(math.isfinite(v) and v > 0 for v in medians.values())
    for runs in result["throughput"]["runs"].values():
        assert [r["calls"] for r in runs] == [100]
    latency = result["latency"]["runs"]
    assert set(latency) == {"1 worker", "passthrough"}
    for run in latency.values():
        assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["max_ms"]
    assert "| worker / pass-through throughput" in done.stdout


def test_executor_barrier_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "barrier.json"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    script = BENCH.parent / "bench_executor_barrier.py"
    done = subprocess.run(
        [sys.executable, str(script), "--syncs", "2", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert set(result["rows"]) == {"own connections", "reader's connection (before)"}
    for row in result["rows"].values():
        assert math.isfinite(row["median_ms"]) and row["median_ms"] > 0
