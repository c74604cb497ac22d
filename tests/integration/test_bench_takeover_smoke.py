"""A smoke run of bench/bench_takeover.py on the real broker, at minimal scale.

50 open buffers built by a real worker, one repeat: every takeover path must restore exactly
the buffers produced (the bench checks it and compares the paths), and the JSON must hold its
figures. No timing is asserted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_takeover.py"
KINDS = {"raw", "full", "full + new store", "checkpoint"}


def test_takeover_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "takeover.json"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
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
    assert "| full |" in done.stdout
