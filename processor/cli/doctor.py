"""``processor doctor transactions``: open and hanging transactions on the processor's topics,
and the remedy their coordinator's decision calls for.

A hanging transaction is one that nothing will end: its coordinator completed it without writing
the marker on a partition (docs/reliability.md, "Seed 19"). It holds back every
``read_committed`` reader of the partition at its first offset. Workers and executors end their
own when they take a partition and between transactions (:mod:`processor.kafka.hanging`);
this command is the operator's view, and the way out when a task may not::

    processor doctor transactions [--older-than SECONDS] [--executor-group GROUP ...]
                                  [--application-id ID] [--end [--yes]] [--json]

It asks the leader of every partition of the deployment's topics for open transactions
(DescribeProducers, READ on the topics) and the coordinator of each of this deployment's
transactional ids how it left them (DescribeTransactions, DESCRIBE on the ids), and gives each a
verdict (:mod:`processor.kafka.txn_remedies`): ``commit`` or ``abort`` (the coordinator
decided so and skipped this partition's marker), ``undecided`` (ours, but the coordinator no
longer knows how it ended: left to its task), ``ending``, ``open`` or ``foreign`` (never
touched). ``--older-than`` is the grace, past a transaction's own timeout, before a decided one
is called hanging. ``--end`` (alias ``--abort``) shows the plan and, once confirmed on the
terminal or with ``--yes``, writes the markers it lists (WriteTxnMarkers, ClusterAction); with
no terminal and no ``--yes`` it refuses. Exit 0 when nothing hangs (or all was ended), 1 when a
hanging one remains, 2 for a bad flag or an unconfirmed ``--end``, 77 when a permission is
missing (named).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

import orjson

from processor.cli.flags import add_connection_flags, load_settings
from processor.exits import NotAuthorised, UsageError

__all__ = ["register"]

_DEFAULT_OLDER_THAN = 60.0
_DEFAULT_EXECUTOR_GROUP = "toolcall-executors"  # processor.executor.executor_state.DEFAULT_GROUP


def _seconds(text: str) -> float:
    """A finite, non-negative number of seconds (``-1``, ``nan`` and ``inf`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = subparsers.add_parser("doctor", help="diagnose the deployment (hanging transactions)")
    commands = doctor.add_subparsers(dest="doctor_command", required=True, metavar="CHECK")
    p = commands.add_parser(
        "transactions", help="list open and hanging transactions on the processor's topics"
    )
    add_connection_flags(p)
    p.add_argument(
        "--older-than",
        type=_seconds,
        default=_DEFAULT_OLDER_THAN,
        metavar="SECONDS",
        help="grace past a transaction's own timeout before one its coordinator decided, "
        f"still open, is hanging (default {_DEFAULT_OLDER_THAN:g})",
    )
    p.add_argument(
        "--application-id", help="the workers' application id (default toolcall-assembler)"
    )
    p.add_argument(
        "--executor-group",
        action="append",
        metavar="GROUP",
        help=f"an executor group of this deployment; repeat (default {_DEFAULT_EXECUTOR_GROUP})",
    )
    p.add_argument(
        "--end",
        "--abort",
        dest="end",
        action="store_true",
        help="end the hanging ones as their coordinator decided (COMMIT or ABORT markers; "
        "ClusterAction), after confirmation",
    )
    p.add_argument("--yes", action="store_true", help="with --end: do not ask (scripts)")
    p.add_argument("--json", action="store_true", help="one JSON object per open transaction")
    p.set_defaults(func=lambda args: run_transactions(args, sys.stdout))


def run_transactions(args: argparse.Namespace, out: IO[str]) -> int:
    settings = load_settings(
        args, "processor doctor transactions", application_id=args.application_id
    )
    return asyncio.run(_transactions(settings, args, out))


async def _transactions(settings: Any, args: argparse.Namespace, out: IO[str]) -> int:
    from processor.kafka import txn_remedies  # noqa: PLC0415  (aiokafka off the parser's path)
    from processor.kafka.clients import admin_client  # noqa: PLC0415

    groups = args.executor_group or [_DEFAULT_EXECUTOR_GROUP]
    async with admin_client(settings) as admin:
        client = admin._client
        with _refusals():
            seen = await txn_remedies.examine(
                client,
                settings,
                groups,
                now_ms=int(time.time() * 1000),
                grace_ms=int(args.older_than * 1000),
            )
        findings = seen.findings
        planned = [f for f in findings if f.acts]
        done: dict[int, bool] = {}  # index in findings → marker written
        if args.end and planned:
            shown = sys.stderr if args.json else out  # the JSON stream stays one row a line
            _show(findings, {}, shown, plan=True, as_json=False)
            if not _confirmed(args, len(planned), shown):
                raise UsageError(
                    "--end needs a confirmation: no terminal to ask on",
                    where="stdin",
                    hint="run it on a terminal, or add --yes after reading the plan",
                )
            with _refusals():
                for i, finding in enumerate(findings):
                    if finding.acts:
                        done[i] = await txn_remedies.carry_out(client, finding)
    _show(findings, done, out, plan=False, as_json=args.json)
    remaining = [f for i, f in enumerate(findings) if f.hanging and not done.get(i)]
    if not args.json:
        counts = {v: sum(f.verdict is v for f in findings) for v in txn_remedies.Verdict}
        summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        ended = sum(done.values())
        out.write(
            f"{len(findings)} open transactions on {seen.partitions} partitions"
            + (f" ({summary})" if summary else "")
            + f", {len(remaining)} hanging"
            + (f", {ended} ended" if args.end else "")
            + "\n"
        )
        if planned and not args.end:
            out.write("processor doctor transactions --end writes the markers listed\n")
    return 1 if remaining else 0


def _show(
    findings: list[Any], done: dict[int, bool], out: IO[str], *, plan: bool, as_json: bool
) -> None:
    for i, f in enumerate(findings):
        t, c = f.txn, f.coordinator
        state = f.verdict.value
        if i in done:
            state = {"commit": "committed", "abort": "aborted"}[state] if done[i] else "changed"
        elif plan:
            state = f"will {state}" if f.acts else f"leave ({state})"
        if as_json:
            row = {
                "topic": t.topic,
                "partition": t.partition,
                "producer_id": t.producer_id,
                "producer_epoch": t.producer_epoch,
                "coordinator_epoch": t.coordinator_epoch,
                "start_offset": t.start_offset,
                "transactional_id": f.transactional_id,
                "coordinator_state": None if c is None else c.state,
                "coordinator_producer_epoch": None if c is None else c.producer_epoch,
                "transaction_timeout_ms": None if c is None else c.timeout_ms,
                "verdict": f.verdict.value,
                "hanging": f.hanging,
                "marker": f.verdict.value if f.acts else None,
                "ended": done.get(i, False),
                "why": f.why,
            }
            out.write(orjson.dumps(row).decode() + "\n")
            continue
        owner = f.transactional_id or "foreign"
        out.write(
            f"{state:10} {t.topic}-{t.partition} producer {t.producer_id} epoch "
            f"{t.producer_epoch} from offset {t.start_offset} ({owner}): {f.why}\n"
        )
    if changed := [i for i, ok in done.items() if not ok]:
        out.write(f"{len(changed)} changed since they were examined: nothing written; run again\n")


def _confirmed(args: argparse.Namespace, count: int, out: IO[str]) -> bool:
    """``--yes``, or a yes typed on the terminal; False when there is no terminal to ask."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        return False
    out.write(f"Write the {count} markers above, as their coordinators decided? [y/N] ")
    out.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise UsageError("not confirmed: nothing written")
    return True


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """A broker's refusal (DescribeProducers, DescribeTransactions, WriteTxnMarkers) as exit 77
    naming the permission the principal lacks (not exit 70, an internal error)."""
    from aiokafka import errors  # noqa: PLC0415

    from processor.kafka.txn_admin import HangingError  # noqa: PLC0415

    try:
        yield
    except (
        HangingError,
        errors.TopicAuthorizationFailedError,
        errors.TransactionalIdAuthorizationFailed,
        errors.ClusterAuthorizationFailedError,
    ) as exc:
        if isinstance(exc, HangingError) and exc.permission is not None:
            needed = exc.permission
        elif isinstance(exc, errors.TopicAuthorizationFailedError):
            needed = "DESCRIBE and READ on the deployment's topics"
        elif isinstance(exc, errors.TransactionalIdAuthorizationFailed):
            needed = "DESCRIBE on the deployment's transactional ids (DescribeTransactions)"
        elif isinstance(exc, errors.ClusterAuthorizationFailedError):
            needed = "ClusterAction on the cluster (WriteTxnMarkers)"
        else:
            raise
        raise NotAuthorised(
            f"the broker refused {type(exc).__name__}: {exc}".rstrip(": "),
            where=f"needs {needed}",
            hint="grant it to this principal (docs/operations.md, the doctor)",
        ) from exc
