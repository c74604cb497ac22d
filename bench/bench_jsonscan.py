"""Benchmark: incremental JSON syntax scanning of streamed tool-call arguments.

Builds realistic argument documents of ~100 KB and ~1 MB (an object holding nested arrays of
records with strings, escapes, numbers and literals), splits each into ~20-character deltas as
providers stream them, and measures the best-of-N wall time of feeding every delta to a fresh
``JsonSyntaxScanner`` and finishing it. The scanner must be linear: t(1 MB) / t(100 KB) ~ 10.

Run: ``.venv/bin/python bench/bench_jsonscan.py`` (writes ``bench/results/jsonscan.json``).
"""

from __future__ import annotations

import json
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from processor.core.jsonscan import JsonSyntaxScanner  # noqa: E402

DELTA = 20
RESULTS = Path(__file__).resolve().parent / "results" / "jsonscan.json"

_WORDS = (
    "alpha beta gamma delta path/to/file.py SELECT * FROM orders WHERE id = 42; "
    'naïve café 😀 "quoted" back\\slash tab\there line\nbreak über straße 東京 résumé'
).split(" ")


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


def best_of(fn: Any, arg: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    rows: list[dict[str, Any]] = []
    for label, target, repeat in (("100KB", 100_000, 15), ("1MB", 1_000_000, 7)):
        text = build_document(target)
        orjson.loads(text)  # the benchmark input is valid JSON
        chunks = deltas(text)
        n_bytes = len(text.encode("utf-8"))
        t_stream = best_of(scan, chunks, repeat)
        t_whole = best_of(scan, [text], repeat)
        t_orjson = best_of(orjson.loads, text, repeat)
        rows.append(
            {
                "doc": label,
                "chars": len(text),
                "bytes": n_bytes,
                "deltas": len(chunks),
                "best_of": repeat,
                "stream_seconds": t_stream,
                "stream_mb_per_s": n_bytes / t_stream / 1e6,
                "us_per_delta": t_stream / len(chunks) * 1e6,
                "single_feed_seconds": t_whole,
                "single_feed_mb_per_s": n_bytes / t_whole / 1e6,
                "orjson_loads_seconds": t_orjson,
            }
        )
    small, large = rows
    ratio = large["stream_seconds"] / small["stream_seconds"]
    size_ratio = large["bytes"] / small["bytes"]

    print(f"JsonSyntaxScanner, deltas of {DELTA} chars, best of N (python {platform.python_version()})")
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
    print(f"t(1MB)/t(100KB) = {ratio:.2f}  (size ratio {size_ratio:.2f}; linear when these match)")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "jsonscan",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "delta_chars": DELTA,
        "rows": rows,
        "time_ratio_1mb_over_100kb": ratio,
        "size_ratio_1mb_over_100kb": size_ratio,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(Path.cwd()) if RESULTS.is_relative_to(Path.cwd()) else RESULTS}")


if __name__ == "__main__":
    main()
