"""Start-up wall time of the ``processor`` command: ``--help`` and the offline commands.

Each command runs as a fresh process (the way a user or a script runs it), N times, interleaved
so a noisy neighbour hurts every command alike; prints the best and the median wall time of
each against the 0.3 s target. ``replay`` runs over a small recording (one OpenAI Chat stream
of one tool call, adapted to fragment events) with ``examples/tools.yaml``. The package's
bytecode is compiled first, as ``pip install`` does (a checkout run with
``PYTHONDONTWRITEBYTECODE`` would otherwise recompile every module on every start).

    .venv/bin/python bench/bench_cli_start.py [--repeat N]
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SSE = ROOT / "tests/adapters/data/openai-chat/single-tool-gpt4o.sse"
TOOLS = ROOT / "examples/tools.yaml"
TARGET_S = 0.3
ADAPT = ["adapt", "--provider", "openai-chat", "--tenant", "t", "--turn", "u", "--actor", "a"]


def commands(events: Path) -> dict[str, list[str]]:
    return {
        "processor --help": ["--help"],
        "processor adapt --help": ["adapt", "--help"],
        "processor adapt <small.sse>": [*ADAPT, "--emit-turn-started", str(SSE)],
        "processor replay <small.jsonl>": ["replay", "--tools", str(TOOLS), str(events)],
        "processor states": ["states"],
        "processor schemas check": ["schemas", "check", "--dir", str(ROOT / "schemas")],
    }


def run_once(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "processor.cli", *argv],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()
    compileall.compile_dir(ROOT / "processor", quiet=1)
    with tempfile.TemporaryDirectory() as folder:
        events = Path(folder) / "small.jsonl"
        with events.open("wb") as out:
            subprocess.run(
                [sys.executable, "-m", "processor.cli", *ADAPT, "--emit-turn-started", str(SSE)],
                check=True,
                stdout=out,
            )
        table = commands(events)
        times: dict[str, list[float]] = {name: [] for name in table}
        run_once(["--help"])  # warm the file cache
        for _ in range(options.repeat):
            for name, argv in table.items():
                times[name].append(run_once(argv))
    bare = min(run_once_python() for _ in range(options.repeat))
    print(f"python -c pass (interpreter start): best {bare:.3f} s")
    print(f"{'command':<34} {'best':>7} {'median':>7}  target {TARGET_S} s")
    for name, values in times.items():
        best, median = min(values), statistics.median(values)
        verdict = "ok" if best <= TARGET_S else "OVER"
        print(f"{name:<34} {best:>6.3f}s {median:>6.3f}s  {verdict}")


def run_once_python() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
