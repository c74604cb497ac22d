"""A smoke run of bench/bench_takeover.py on the real broker, at minimal scale.

50 open buffers built by a real worker, one repeat: every takeover path must restore exactly
the buffers produced (the bench checks it and compares the paths), and the JSON must hold its
figures. No timing is asserted.
"""

from __future__ import annotations

import math
from pathlib import Path

from tests.integration.conftest import run_bench

KINDS = {"raw", "full", "full + new store", "checkpoint"}


def test_takeover_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    result, stdout = run_bench(
        "bench_takeover.py",
        "--smoke",
        "--out",
        bootstrap=kafka_bootstrap,
        out=tmp_path / "takeover.json",
        timeout=120,
    )
    assert result["buffers"] == 50
    assert result["repeat"] == 1
    assert set(result["runs"]) == KINDS
    assert result["restored_open_buffers"] == {k: [50] for k in KINDS - {"raw"}}
    changelog = result["changelog"]
    assert changelog["records"] >= 50  # a record per call at least (and its texts and turn)
    assert changelog["bytes"] > 0
    assert result["restored_changelog_records"] == changelog["records"]
    assert result["store_records"] > 0
    assert [r["restore_kind"] for r in result["runs"]["checkpoint"]] == ["checkpoint"]
    for kind in KINDS:
        assert math.isfinite(result["median_seconds"][kind])
        assert result["median_seconds"][kind] > 0
    assert set(result["ratio_vs_raw"]) == KINDS - {"raw"}
    assert "| full |" in stdout
