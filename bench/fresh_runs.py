"""Interleaved runs of a benchmark's modes, each in a fresh process (the shape of the in-process
benchmarks that compare modes: ``bench_gc_pause.py``, ``bench_state_scaling.py``).

A benchmark script runs itself with ``--child MODE`` and its own arguments; the child prints its
result as one JSON line, last. Fresh processes keep one mode's heap, caches and collector state
out of the next mode's figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any


def interleaved(
    script: str,
    modes: Sequence[str],
    args: Sequence[str],
    repeat: int,
    describe: Callable[[str, dict[str, Any]], str],
) -> dict[str, list[dict[str, Any]]]:
    """``repeat`` rounds, each running every mode once; each run's result by mode, in order.
    ``describe(mode, result)``: the progress line printed to stderr after each run."""
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for _ in range(repeat):
        for mode in modes:
            argv = [sys.executable, script, "--child", mode, *args]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            runs[mode].append(result)
            print(describe(mode, result), file=sys.stderr)
    return runs


def every_run(runs: dict[str, list[dict[str, Any]]], key: str, unit: str) -> str:
    """``"Every run: a 1, 2 ms; b 3, 4 ms."``: each mode's runs of one figure, in order."""
    shown = "; ".join(
        f"{mode} " + ", ".join(f"{r[key]:.0f}" for r in results) + f" {unit}"
        for mode, results in runs.items()
    )
    return f"Every run: {shown}."
