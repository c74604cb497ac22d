"""``python -m tests.chaos``: one long chaos run (or several seeds), printed as JSON and a table row.

    python -m tests.chaos --seed 1 --turns 2000 --duration 150 --faults 7
    make chaos SEEDS="1 2 3 4 5"

A long run starts a broker of its own (``scripts/kafka-local`` in ``--workdir``, ports
``--broker-port`` and the next one) so that broker faults never touch another broker, and applies
every fault kind: SIGKILL, SIGTERM, SIGSTOP past the session and transaction timeouts (a zombie),
and ``kill -9`` of the broker. ``--brokers 3`` runs a three-node KRaft cluster of its own instead
(client ports ``--broker-port`` .. +2, controller ports the next three; topics get replication 3
and ``min.insync.replicas=2``) and adds the cluster's faults: ``kill -9`` of the broker leading
the most dispatch/fragments/changelog partitions, of the active controller, a zombie broker
(SIGSTOP past the broker session and replica lag timeouts), a rolling restart; ``broker`` then
kills every broker at once (:mod:`tests.chaos.faults`). ``--executors N`` adds an executor group of N members running
every tool, with ``--executor-faults`` SIGKILL/SIGTERM/SIGSTOP faults of its own
(:mod:`tests.chaos.executors`). Exit status 1 when any run lost, duplicated or dispatched
unsafely, or an executor ran a dispatch twice, left one unreported or reported it wrongly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import sys
from pathlib import Path

from tests.chaos.faults import FaultKind, default_kinds
from tests.chaos.run import Options, Report, run


def _row(report: Report) -> str:
    v = report.verdict.summary()
    worst, back = v["max_recovery_seconds"], v["max_after_back_seconds"]
    kinds = ", ".join(
        f"{k} {s:.1f}" + (f" ({back[k]:.1f} after back)" if k in back else "")
        for k, s in worst.items()
    )
    return (
        f"| {report.options.seed} | {report.options.brokers} | {report.options.turns} | "
        f"{len(report.faults)} "
        f"({', '.join(sorted({str(f.kind) for f in report.faults}))}) | {v['calls']} | "
        f"{v['must_dispatch']} | {v['lost']} | {v['duplicated']} | {v['unsafe']} | "
        f"{v['wrong_arguments']} | {v['expired']} | {kinds} | {report.seconds:.0f} |"
    )


def _executions_row(report: Report) -> str:
    """The executor group's line under the run's row (``--executors``)."""
    assert report.executions is not None
    v = report.executions.summary()
    faults = [f for f in report.faults if f.role == "executor"]
    outcomes = ", ".join(f"{k} {n}" for k, n in sorted(v["outcomes"].items()))
    # per fault: calls run with no outcome yet / claims open, when the signal landed
    held = ", ".join(f"{h['kind']} {h['in_flight']}/{h['claims_open']}" for h in v["at_faults"])
    return (
        f"| {report.options.seed}, executors{' (mcp)' if report.options.executors_mcp else ''} "
        f"| | {report.options.executors} members | "
        f"{len(faults)} ({', '.join(sorted({str(f.kind) for f in faults}))}) | "
        f"{v['dispatched']} dispatched | {outcomes} | executed twice {v['executed_twice']} | "
        f"unreported {v['unreported']} | reported twice {v['reported_twice']} | "
        f"outcome wrong {v['outcome_wrong']} | status missing {v['status_missing']} | "
        f"wrong args {v['wrong_arguments']} | claims unended {v['claims_unended']} | "
        f"ran after cancel {v['ran_after_cancel']} | in flight/claims open at faults: {held}; "
        f"peak running {v['peak_running']} of {v['max_in_flight']} | |"
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # asyncio.run cancels the run: its workers and broker are stopped


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--seed", type=int, nargs="+", default=[1])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--duration", type=float, default=150.0)
    parser.add_argument("--faults", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--kinds",
        default=None,
        help="comma-separated fault kinds (default: every kind the topology takes: "
        "kill,stop,term,broker; with --brokers 3 also leader,controller,zombie,rolling)",
    )
    parser.add_argument("--bootstrap", default=None, help="use this broker (no broker faults)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/chaos"))
    parser.add_argument(
        "--broker-port",
        type=int,
        default=19292,
        help="first client port of the run's brokers; controller ports follow them",
    )
    parser.add_argument(
        "--brokers", type=int, default=1, help="brokers of the run's own (3: a KRaft cluster)"
    )
    parser.add_argument("--json", type=Path, default=None, help="append each report here")
    parser.add_argument("--keep", action="store_true", help="keep topics and broker data")
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="PROCESSOR_X=V",
        help="a setting for every worker, e.g. a small bound to exercise back-pressure",
    )
    parser.add_argument(
        "--executors", type=int, default=0, help="members of an executor group (every tool)"
    )
    parser.add_argument(
        "--executor-faults", type=int, default=0, help="kill/stop/term faults of executors"
    )
    parser.add_argument(
        "--executors-mcp",
        action="store_true",
        help="the executors run `executor mcp` (handler: tools/call on an MCP server)",
    )
    args = parser.parse_args()
    if args.kinds is None:
        kinds = default_kinds(args.brokers) if args.bootstrap is None else default_kinds(0)[:3]
    else:
        kinds = [FaultKind(k) for k in args.kinds.split(",") if k]
    failed = False
    rows = []
    for seed in args.seed:
        workdir = args.workdir / f"seed-{seed}"
        shutil.rmtree(workdir, ignore_errors=True)
        options = Options(
            seed=seed,
            turns=args.turns,
            duration=args.duration,
            workers=args.workers,
            partitions=args.partitions,
            faults=args.faults,
            kinds=kinds,
            bootstrap=args.bootstrap,
            workdir=workdir,
            broker_port=args.broker_port,
            brokers=args.brokers,
            keep=args.keep,
            worker_env=dict(item.split("=", 1) for item in args.worker_env),
            executors=args.executors,
            executor_faults=args.executor_faults,
            executors_mcp=args.executors_mcp,
        )
        report = asyncio.run(run(options))
        data = report.as_json()
        print(json.dumps(data, indent=1, default=str), flush=True)
        if args.json is not None:
            with args.json.open("a") as out:
                out.write(json.dumps(data, default=str) + "\n")
        rows.append(_row(report))
        failed = failed or not report.ok
        if report.executions is not None:
            rows.append(_executions_row(report))
    print(
        "| seed | brokers | turns | faults | calls | must act | lost | duplicated | unsafe | wrong args "
        "| expired | max recovery s | run s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
