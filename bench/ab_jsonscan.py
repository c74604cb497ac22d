"""A/B: the JSON syntax scanner of this tree against the one of another commit, interleaved.

For a change to the scanner, what it costs: bench_jsonscan's document (mixed ASCII, accents,
CJK, emoji, escapes), an emoji-heavy and a CJK-heavy one, ~10 KB each in 20-character deltas,
scanned by both scanners in alternating order, ``--rounds`` times; the best of each and the
ratio new/old are printed (the best of many short runs is the least disturbed by other load).

Run: ``.venv/bin/python bench/ab_jsonscan.py --base COMMIT [--rounds 400]`` (~10 s).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_jsonscan  # noqa: E402

from processor.core.jsonscan import JsonSyntaxScanner  # noqa: E402


def scanner_at(commit: str) -> Any:
    source = subprocess.run(
        ["git", "show", f"{commit}:processor/core/jsonscan.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "jsonscan_base.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("jsonscan_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.JsonSyntaxScanner


def scan(cls: Any, chunks: list[str]) -> None:
    scanner = cls()
    feed = scanner.feed
    for chunk in chunks:
        feed(chunk)
    scanner.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    old = scanner_at(args.base)
    row = "😀 héllo 東京 \U0001f680" * 3
    docs = {
        "bench_jsonscan": bench_jsonscan.build_document(10_000),
        "emoji": json.dumps({"rows": [{"t": row, "n": i} for i in range(180)]}, ensure_ascii=False),
        "cjk": json.dumps(
            {"rows": [{"t": "東京都 渋谷区 naïve café", "n": i} for i in range(300)]},
            ensure_ascii=False,
        ),
    }
    print(f"scanner of this tree (new) against {args.base} (old), best of {args.rounds}")
    for label, text in docs.items():
        chunks = bench_jsonscan.deltas(text)
        best = {"old": float("inf"), "new": float("inf")}
        gc.disable()
        for r in range(args.rounds):
            pair = (("old", old), ("new", JsonSyntaxScanner))
            for kind, cls in pair if r % 2 else pair[::-1]:
                t0 = time.perf_counter()
                scan(cls, chunks)
                best[kind] = min(best[kind], time.perf_counter() - t0)
        gc.enable()
        print(
            f"{label:15s} {len(text):6d} chars {len(chunks):4d} deltas  "
            f"old {best['old'] * 1e3:6.2f} ms  new {best['new'] * 1e3:6.2f} ms  "
            f"new/old {best['new'] / best['old']:.3f}"
        )


if __name__ == "__main__":
    main()
