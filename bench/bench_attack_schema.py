"""CPU under attack: hostile arguments against the keywords of a tool schema whose cost an
argument sets, and against the ``regex`` format.

A call's arguments are the model's output, which whatever the model read can steer. For each
keyword (and the ``iri`` format), this validates a hostile argument of growing size n with jsonschema's own Draft 2020-12
validator until one run passes ``--cap`` seconds, then validates the same last argument, and one
near the 1 MiB a call may hold, with the registry's validator (:mod:`processor.core.toolschema`).
Then the ``regex`` format on distinct hostile patterns of ``--regex-kb`` KB: jsonschema's check
(``re.compile``, kept in re's cache) against :func:`processor.core.formats.is_regex` (parsed,
never compiled): seconds a check and the resident memory kept.

    python bench/bench_attack_schema.py            # the figures in docs/reliability.md
    python bench/bench_attack_schema.py --smoke    # seconds
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from processor.core.formats import format_checker, jsonschema_module
from processor.core.registry import Registry
from processor.core.validation import validate_call

MIB = 1 << 20


def _string(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"q": {"type": "string", "pattern": pattern}}}


def _array(**keywords: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"xs": {"type": "array", **keywords}}}


@dataclass(frozen=True)
class Attack:
    keyword: str  # as shown
    schema: dict[str, Any]
    argument: Callable[[int], dict[str, Any]]  # the hostile argument of size n
    start: int
    grow: Callable[[int], int]
    unit: str  # what n counts


ATTACKS: list[Attack] = [
    Attack("pattern `^(\\w+\\s?)*$`", _string(r"^(\w+\s?)*$"),
           lambda n: {"q": "a" * n + "!"}, 12, lambda n: n + 2, "characters"),
    Attack("pattern `^(a+)+$`", _string(r"^(a+)+$"),
           lambda n: {"q": "a" * n + "!"}, 12, lambda n: n + 2, "characters"),
    Attack("pattern `^(a\\|aa)+$`", _string(r"^(a|aa)+$"),
           lambda n: {"q": "a" * n + "!"}, 20, lambda n: n + 2, "characters"),
    Attack("`uniqueItems`, objects", _array(uniqueItems=True),
           lambda n: {"xs": [{"a": i} for i in range(n)]}, 250, lambda n: n * 2, "items"),
    Attack("`uniqueItems`, numbers and strings", _array(uniqueItems=True),
           lambda n: {"xs": [i if i % 2 else str(i) for i in range(n)]}, 250, lambda n: n * 2,
           "items"),
    Attack("`unevaluatedItems`", _array(items={"type": "integer"}, unevaluatedItems=False),
           lambda n: {"xs": list(range(n))}, 1000, lambda n: n * 2, "items"),
    Attack("`unevaluatedProperties`",
           {"type": "object", "additionalProperties": {"type": "integer"},
            "unevaluatedProperties": False},
           lambda n: {f"k{i}": i for i in range(n)}, 1000, lambda n: n * 2, "members"),
    Attack("`format: iri`",
           {"type": "object", "properties": {"q": {"type": "string", "format": "iri"}}},
           lambda n: {"q": "http://x/" + "a" * n}, 250, lambda n: n * 2, "characters"),
]  # fmt: skip


def _seconds(run: Callable[[], Any], repeat: int = 1) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def theirs(attack: Attack, cap: float) -> list[tuple[int, float]]:
    """(n, seconds) with jsonschema's own validator, n growing until a run passes ``cap``."""
    jsonschema = jsonschema_module()
    draft = jsonschema.Draft202012Validator
    validator = draft(attack.schema, format_checker=draft.FORMAT_CHECKER)
    validator.is_valid(attack.argument(1))  # a format's library loads at its first check
    rows: list[tuple[int, float]] = []
    n = attack.start
    while not rows or rows[-1][1] < cap:
        argument = attack.argument(n)
        rows.append((n, _seconds(lambda argument=argument: validator.is_valid(argument))))
        n = attack.grow(n)
    return rows


def ours(attack: Attack, n: int) -> tuple[float, int]:
    """(seconds, bytes) of the call through the registry's validation (median of 3)."""
    resolution = Registry.from_document(
        {"tools": [{"name": "t", "parameters": attack.schema}]}
    ).resolve("t")
    assert resolution is not None
    text = orjson.dumps(attack.argument(n))
    return _seconds(lambda: validate_call(text, resolution.declaration, None), 3), len(text)  # type: ignore[arg-type]


def near(attack: Attack, limit: int) -> int:
    """The largest n (by doubling, then halving steps) whose argument stays under ``limit``."""
    n, step = 1, 1
    while len(orjson.dumps(attack.argument(n * 2))) <= limit:
        n *= 2
    step = n // 2
    while step:
        if len(orjson.dumps(attack.argument(n + step))) <= limit:
            n += step
        step //= 2
    return n


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.1f}x"


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def regex_format(kb: int, count: int) -> dict[str, tuple[float, float]]:
    """name → (seconds a check, RSS growth MiB) over ``count`` distinct hostile patterns."""
    unit = "(?:ab|cd)"
    patterns = [f"x{i}" + unit * (kb * 1024 // len(unit)) for i in range(count)]
    checkers = (
        ("processor (parse only)", format_checker({"regex"})),
        ("jsonschema (re.compile)", jsonschema_module().Draft202012Validator.FORMAT_CHECKER),
    )
    out = {}
    for name, checker in checkers:
        before = _rss_mib()
        started = time.perf_counter()
        for text in patterns:
            assert checker.conforms(text, "regex")
        out[name] = ((time.perf_counter() - started) / count, _rss_mib() - before)
    re.purge()
    return out


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cap", type=float, default=1.0, help="stop growing n past this (s)")
    parser.add_argument("--limit", type=int, default=MIB, help="bytes of the largest argument")
    parser.add_argument("--regex-kb", type=int, default=540)
    parser.add_argument("--regex-count", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    options = parser.parse_args(argv)
    if options.smoke:
        options.cap, options.limit, options.regex_kb, options.regex_count = 0.01, 4096, 8, 2
    # first, while the process is small: the memory figures are resident-size growth
    regex_rows = regex_format(options.regex_kb, options.regex_count)
    lines = [
        "| keyword, hostile argument | jsonschema: seconds at n | registry at the last n "
        f"| registry near {options.limit / MIB:g} MiB |",
        "|---|---|---|---|",
    ]
    for attack in ATTACKS:
        rows = theirs(attack, options.cap)
        grown = ", ".join(f"{n:,}: {s:.3g}" for n, s in rows[-4:])
        last, last_seconds = rows[-1]
        same, _ = ours(attack, last)
        big_n = near(attack, options.limit)
        big, size = ours(attack, big_n)
        lines.append(
            f"| {attack.keyword} ({attack.unit}) | {grown} | {same * 1e3:.2f} ms "
            f"({_times(last_seconds / same)} less) | {big_n:,} {attack.unit} "
            f"({size / 1024:,.0f} KB): {big * 1e3:.1f} ms |"
        )
    lines += [
        "",
        f"`format: regex`, {options.regex_count} distinct hostile values of {options.regex_kb} KB:",
        "",
        "| check | seconds a check | resident memory kept (MiB) |",
        "|---|---|---|",
    ]
    for name, (seconds, mib) in regex_rows.items():
        lines.append(f"| {name} | {seconds:.3f} | {mib:.0f} |")
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
