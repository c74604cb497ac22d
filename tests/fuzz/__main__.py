"""``python -m tests.fuzz --seed S --duration SECONDS [--target NAME] [--case I]``.

Runs every target (or one) for ``duration`` seconds each with seed ``S``; prints one line per
target (cases, escapes, cases/s) and every escape with the command that reproduces it. Exit 1
when anything escaped. ``make fuzz SEED=7 DURATION=300`` is the long run.
"""

from __future__ import annotations

import argparse
import sys

from tests.fuzz.targets import TARGETS, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per target")
    parser.add_argument("--target", choices=sorted(TARGETS), action="append")
    parser.add_argument("--case", type=int, help="run only this case (reproduce a finding)")
    args = parser.parse_args(argv)
    escaped = 0
    for target in args.target or list(TARGETS):
        if args.case is not None:
            report = run(target, args.seed, cases=1, first_case=args.case)
        else:
            report = run(target, args.seed, seconds=args.duration)
        rate = report.cases / report.seconds if report.seconds else 0.0
        print(
            f"{target:<12} seed={args.seed} cases={report.cases} escapes={len(report.escapes)} "
            f"({rate:.0f} cases/s)"
        )
        for case, what in report.escapes:
            print(f"  case {case}: {what}")
            print(
                f"    reproduce: python -m tests.fuzz --target {target} --seed {args.seed} "
                f"--case {case}"
            )
        escaped += len(report.escapes)
    return 1 if escaped else 0


if __name__ == "__main__":
    sys.exit(main())
