"""Smoke runs of the Kafka benchmarks on the real broker, at minimal scale.

bench/bench_worker_kafka.py: throughput (one worker, two workers, the pass-through) and latency
runs on a backlog of a few calls; every run must see every dispatch record (or pass-through
copy) and give well-formed figures. bench/bench_executor_barrier.py: both ways of asking for
the barrier's end offsets. No timing is asserted.
"""

from __future__ import annotations

import math
from pathlib import Path

from tests.integration.conftest import run_bench


def test_worker_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    args = [
        "--calls",
        "100",
        "--repeat",
        "1",
        "--latency-seconds",
        "2",
        "--latency-repeat",
        "1",
        "--timeout",
        "120",
    ]
    result, stdout = run_bench(
        "bench_worker_kafka.py",
        *args,
        "--results",
        bootstrap=kafka_bootstrap,
        out=tmp_path / "worker.json",
        timeout=280,
    )
    medians = result["throughput"]["median_calls_per_second"]
    assert set(medians) == {"1 worker", "2 workers", "passthrough"}
    assert all(math.isfinite(v) and v > 0 for v in medians.values())
    for runs in result["throughput"]["runs"].values():
        assert [r["calls"] for r in runs] == [100]
    latency = result["latency"]["runs"]
    assert set(latency) == {"1 worker", "passthrough"}
    for run in latency.values():
        assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["max_ms"]
    assert "| worker / pass-through throughput" in stdout


def test_executor_barrier_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    result, _ = run_bench(
        "bench_executor_barrier.py",
        "--syncs",
        "2",
        "--out",
        bootstrap=kafka_bootstrap,
        out=tmp_path / "barrier.json",
        timeout=120,
    )
    assert set(result["rows"]) == {"own connections", "reader's connection (before)"}
    for row in result["rows"].values():
        assert math.isfinite(row["median_ms"]) and row["median_ms"] > 0


def test_agent_loop_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    """bench/bench_agent_loop.py (issue 40): every call's outcome comes back ``ran``."""
    result, stdout = run_bench(
        "bench_agent_loop.py",
        "--calls",
        "2",
        "--out",
        bootstrap=kafka_bootstrap,
        out=tmp_path / "agent_loop.json",
        timeout=180,
    )
    assert result["calls"] == 2
    for row in [*result["rows"].values(), result["follow"]]:
        assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert "| through Kafka (worker, executor, follower) |" in stdout
