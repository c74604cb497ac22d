"""CPU under attack: hostile arguments against tool schemas' patterns and the ``regex`` format.

The arguments of a call are the model's output, and may be steered by what the model read. A
tool schema's ``pattern`` (or ``patternProperties`` name) that backtracks, and the ``regex``
format (whose value is compiled), let one argument set the cost of its validation. This prints,
in one process:

* per pattern, the time to validate a hostile argument of n characters with jsonschema's own
  Draft 2020-12 validator (Python's backtracking ``re``), n growing until one run passes
  ``--cap`` seconds, and with the registry's validator (RE2, :mod:`processor.core.patterns`) at
  ``--long`` characters, next to a benign argument of the same length that the pattern matches
  (hostile / benign at most about 1: the attack costs no more than an ordinary argument of
  its size);
* the ``regex`` format on distinct hostile patterns of ``--regex-kb`` KB: jsonschema's check
  (``re.compile``, kept in re's cache) against :func:`processor.core.formats.is_regex`
  (parsed, never compiled): seconds per check and the resident memory growth.

    python bench/bench_attack_patterns.py            # the figures in docs/reliability.md
    python bench/bench_attack_patterns.py --smoke    # seconds
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from processor.core.formats import format_checker, jsonschema_module
from processor.core.registry import Registry
from processor.core.validation import validate_call

# (pattern, the character repeated, the tail that makes it fail)
PATTERNS: list[tuple[str, str, str]] = [
    (r"^(\w+\s?)*$", "a", "!"),
    (r"^(a+)+$", "a", "!"),
    (r"^(a|aa)+$", "a", "!"),
]


def _seconds(run: Callable[[], Any], repeat: int = 1) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _schema(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"q": {"type": "string", "pattern": pattern}}}


def backtracking(pattern: str, unit: str, tail: str, cap: float, start: int) -> list[tuple[int, float]]:
    """(n, seconds) with jsonschema's own validator, n += 2 until a run passes ``cap``."""
    validator = jsonschema_module().Draft202012Validator(_schema(pattern))
    rows: list[tuple[int, float]] = []
    n = start
    while not rows or rows[-1][1] < cap:
        arguments = {"q": unit * n + tail}
        rows.append((n, _seconds(lambda args=arguments: validator.is_valid(args))))
        n += 2
    return rows


def linear(pattern: str, unit: str, tail: str, length: int) -> tuple[float, float]:
    """(hostile seconds, benign seconds) through the registry at ``length`` characters."""
    doc = {"tools": [{"name": "t", "parameters": _schema(pattern)}]}
    resolution = Registry.from_document(doc).resolve("t")
    assert resolution is not None
    declaration = resolution.declaration
    hostile = orjson.dumps({"q": unit * length + tail})
    benign = orjson.dumps({"q": unit * (length + len(tail))})  # matches: the whole text read
    return (
        _seconds(lambda: validate_call(hostile, declaration, None), 5),  # type: ignore[arg-type]
        _seconds(lambda: validate_call(benign, declaration, None), 5),  # type: ignore[arg-type]
    )


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def regex_format(kb: int, count: int) -> dict[str, tuple[float, float]]:
    """name → (seconds per check, RSS growth MiB) over ``count`` distinct hostile patterns."""
    jsonschema = jsonschema_module()
    theirs = jsonschema.Draft202012Validator.FORMAT_CHECKER
    ours = format_checker({"regex"})
    unit = "(?:ab|cd)"
    patterns = [f"x{i}" + unit * (kb * 1024 // len(unit)) for i in range(count)]
    out = {}
    for name, checker in (("processor (parse only)", ours), ("jsonschema (re.compile)", theirs)):
        before = _rss_mib()
        started = time.perf_counter()
        for text in patterns:
            assert checker.conforms(text, "regex")
        out[name] = ((time.perf_counter() - started) / count, _rss_mib() - before)
    re.purge()
    return out


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=float, default=1.0, help="stop growing n past this (s)")
    parser.add_argument("--long", type=int, default=100_000, help="characters, RE2 side")
    parser.add_argument("--regex-kb", type=int, default=540)
    parser.add_argument("--regex-count", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    options = parser.parse_args(argv)
    if options.smoke:
        options.cap, options.long, options.regex_kb, options.regex_count = 0.01, 1_000, 8, 2
    lines = [
        "| pattern | jsonschema's `re`: seconds at n characters | registry (RE2) at "
        f"{options.long:,} characters: hostile / benign |",
        "|---|---|---|",
    ]
    for pattern, unit, tail in PATTERNS:
        rows = backtracking(pattern, unit, tail, options.cap, 12)
        grown = ", ".join(f"{n}: {s:.3g}" for n, s in rows[-4:])
        hostile, benign = linear(pattern, unit, tail, options.long)
        lines.append(
            f"| `{pattern.replace('|', chr(92) + '|')}` | {grown} | {hostile * 1e3:.2f} ms / {benign * 1e3:.2f} ms = "
            f"{hostile / benign:.2f} |"
        )
    lines += [
        "",
        f"`format: regex`, {options.regex_count} distinct hostile patterns of "
        f"{options.regex_kb} KB:",
        "",
        "| check | seconds a check | resident memory kept (MiB) |",
        "|---|---|---|",
    ]
    for name, (seconds, mib) in regex_format(options.regex_kb, options.regex_count).items():
        lines.append(f"| {name} | {seconds:.3f} | {mib:.0f} |")
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
