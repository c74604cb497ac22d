"""Benchmark: incremental JSON syntax scanning of streamed tool-call arguments.

Builds realistic argument documents of ~100 KB and ~1 MB (an object holding nested arrays of
records with strings, escapes, numbers and literals), splits each into ~20-character deltas as
providers stream them, and measures the best-of-N wall time of feeding every delta to a fresh
``JsonSyntaxScanner`` and finishing it. The scanner must be linear: t(1 MB) / t(100 KB) ~ 10.

Run: ``.venv/bin/python bench/bench_jsonscan.py [--rounds N]`` (writes
``bench/results/jsonscan.json``). Timed runs have the cyclic GC off, as ``timeit`` does.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from processor.core.jsonscan import JsonSyntaxScanner

DELTA = 20
RESULTS = Path(__file__).resolve().parent / "results" / "jsonscan.json"

_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "path/to/file.py",
    "SELECT * FROM orders WHERE id = 42;",
    "naïve",
    "café",
    "😀",
    '"quoted"',
    "über straße",
    "東京",
    "résumé",
    "back\\slash",
    "tab\there",
    "line\nbreak",
]


def _record(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 8))),
        "score": round(rng.uniform(-1000, 1000), 4),
        "ratio": rng.random() * 10 ** rng.randint(-8, 8),
        "count": rng.randint(0, 2**40),
        "active": rng.random() < 0.5,
        "parent": None if rng.random() < 0.3 else rng.randint(0, i + 1),
        "tags": [rng.choice(_WORDS) for _ in range(rng.randint(0, 5))],
        "matrix": [[rng.randint(-99, 99) for _ in range(3)] for _ in range(rng.randint(0, 3))],
        "body": "".join(rng.choice(_WORDS) + "\n" for _ in range(rng.randint(5, 30))),
    }


def build_document(target_chars: int, seed: int = 7) -> str:
    """A JSON object of about ``target_chars`` characters."""
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    doc: dict[str, Any] = {
        "query": "find all the records",
        "options": {"limit": 1000, "dry_run": False, "escape_demo": "\u0001\u2028\U0001f600"},
        "records": records,
    }
    size = 0
    while size < target_chars:
        rec = _record(rng, len(records))
        records.append(rec)
        size += len(json.dumps(rec, ensure_ascii=False))
    # ensure_ascii on every other record mixes raw text with \\uXXXX escapes and surrogate pairs
    parts = [
        json.dumps(r, ensure_ascii=(k % 2 == 0), separators=(",", ":") if k % 3 else (", ", ": "))
        for k, r in enumerate(records)
    ]
    head = json.dumps({k: v for k, v in doc.items() if k != "records"}, ensure_ascii=False)
    return head[:-1] + ', "records": [' + ",\n".join(parts) + "]}"


def deltas(text: str, size: int = DELTA) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def scan(chunks: list[str]) -> None:
    scanner = JsonSyntaxScanner()
    feed = scanner.feed
    for chunk in chunks:
        feed(chunk)
    scanner.finish()


def timed(fn: Any, arg: Any) -> float:
    """One run with the cyclic GC off (as timeit does), so its pauses do not land at random."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn(arg)
        return time.perf_counter() - t0
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="best of N (default 10)")
    rounds = parser.parse_args().rounds

    docs = []
    for label, target in (("100KB", 100_000), ("1MB", 1_000_000)):
        text = build_document(target)
        orjson.loads(text)  # the benchmark input is valid JSON
        docs.append((label, text, deltas(text)))

    # Rounds interleave both sizes so that background load on a shared machine hits both alike;
    # the best of N of each measurement is kept.
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for label, text, chunks in docs:
            for kind, fn, arg in (
                ("stream", scan, chunks),
                ("single", scan, [text]),
                ("orjson", orjson.loads, text),
            ):
                t = timed(fn, arg)
                best[label, kind] = min(best.get((label, kind), float("inf")), t)

    rows: list[dict[str, Any]] = []
    for label, text, chunks in docs:
        n_bytes = len(text.encode("utf-8"))
        t_stream = best[label, "stream"]
        t_whole = best[label, "single"]
        rows.append(
            {
                "doc": label,
                "chars": len(text),
                "bytes": n_bytes,
                "deltas": len(chunks),
                "best_of": rounds,
                "stream_seconds": t_stream,
                "stream_mb_per_s": n_bytes / t_stream / 1e6,
                "us_per_delta": t_stream / len(chunks) * 1e6,
                "single_feed_seconds": t_whole,
                "single_feed_mb_per_s": n_bytes / t_whole / 1e6,
                "orjson_loads_seconds": best[label, "orjson"],
            }
        )
    small, large = rows
    ratio = large["stream_seconds"] / small["stream_seconds"]
    size_ratio = large["bytes"] / small["bytes"]
    single_ratio = large["single_feed_seconds"] / small["single_feed_seconds"]

    version = platform.python_version()
    print(f"JsonSyntaxScanner, deltas of {DELTA} chars, best of N (python {version})")
    header = f"{'doc':>6} {'bytes':>9} {'deltas':>7} {'stream s':>9} {'MB/s':>6} {'us/delta':>8}"
    header += f" {'1-feed s':>9} {'1-feed MB/s':>11} {'orjson s':>9}"
    print(header)
    for r in rows:
        print(
            f"{r['doc']:>6} {r['bytes']:>9} {r['deltas']:>7} {r['stream_seconds']:>9.4f}"
            f" {r['stream_mb_per_s']:>6.1f} {r['us_per_delta']:>8.2f}"
            f" {r['single_feed_seconds']:>9.4f} {r['single_feed_mb_per_s']:>11.1f}"
            f" {r['orjson_loads_seconds']:>9.4f}"
        )
    print(f"t(1MB)/t(100KB) = {ratio:.2f} streamed, {single_ratio:.2f} single feed")
    print(f"size ratio {size_ratio:.2f}: linear when the time ratio matches it")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "jsonscan",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "delta_chars": DELTA,
        "rows": rows,
        "time_ratio_1mb_over_100kb": ratio,
        "single_feed_time_ratio_1mb_over_100kb": single_ratio,
        "size_ratio_1mb_over_100kb": size_ratio,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
