"""``processor doctor transactions``: open and hanging transactions on the processor's topics.

A hanging transaction is one that nothing will end: its coordinator completed it without writing
the marker on a partition (docs/reliability.md, "Seed 19"). It holds back every
``read_committed`` reader of the partition at its first offset, and the same producer id's next
commit there would make its records visible. Workers and executors abort their own when they take
a partition (:mod:`processor.runtime.hanging`); this command is the operator's view, and the way
out when a task is held because its principal may not abort::

    processor doctor transactions [--older-than SECONDS] [--abort] [--json]

It asks the leader of every partition of the deployment's topics (DescribeProducers, READ on the
topics) for open transactions, and calls one *hanging* when its producer's last write there is
older than ``--older-than`` (default 60 s: well past any transaction timeout the processor
allows, and the coordinator's abort of a timed-out one). ``--abort`` writes an ABORT marker for
each hanging one (WriteTxnMarkers, ClusterAction), as ``kafka-transactions.sh abort`` does.
Exit 0 when nothing hangs (or everything found was aborted), 1 when a hanging one remains.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import IO, Any

import orjson

from processor.cli.flags import add_connection_flags, load_settings

__all__ = ["register"]

_DEFAULT_OLDER_THAN = 60.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = subparsers.add_parser("doctor", help="diagnose the deployment (hanging transactions)")
    commands = doctor.add_subparsers(dest="doctor_command", required=True, metavar="CHECK")
    p = commands.add_parser(
        "transactions", help="list open and hanging transactions on the processor's topics"
    )
    add_connection_flags(p)
    p.add_argument(
        "--older-than",
        type=float,
        default=_DEFAULT_OLDER_THAN,
        metavar="SECONDS",
        help=f"an open transaction idle this long is hanging (default {_DEFAULT_OLDER_THAN:g})",
    )
    p.add_argument("--abort", action="store_true", help="abort the hanging ones (ClusterAction)")
    p.add_argument("--json", action="store_true", help="one JSON object per open transaction")
    p.set_defaults(func=lambda args: run_transactions(args, sys.stdout))


def run_transactions(args: argparse.Namespace, out: IO[str]) -> int:
    settings = load_settings(args, "processor doctor transactions")
    return asyncio.run(_transactions(settings, args, out))


async def _transactions(settings: Any, args: argparse.Namespace, out: IO[str]) -> int:
    from processor.runtime import hanging  # noqa: PLC0415  (aiokafka off the parser's path)
    from processor.runtime.clients import admin_client  # noqa: PLC0415

    async with admin_client(settings) as admin:
        client = admin._client
        partitions = await hanging.partitions_of(client, settings.topics.all().values())
        found = await hanging.describe_open_transactions(client, partitions)
        now = time.time()
        stuck = [t for t in found if (t.age_seconds(now) or 0.0) >= args.older_than]
        if args.abort and stuck:
            await hanging.abort_transactions(client, stuck)
    for t in found:
        age = t.age_seconds(now)
        row = {
            "topic": t.topic,
            "partition": t.partition,
            "producer_id": t.producer_id,
            "producer_epoch": t.producer_epoch,
            "coordinator_epoch": t.coordinator_epoch,
            "start_offset": t.start_offset,
            "idle_seconds": None if age is None else round(age, 1),
            "hanging": t in stuck,
            "aborted": args.abort and t in stuck,
        }
        if args.json:
            out.write(orjson.dumps(row).decode() + "\n")
        else:
            state = "aborted" if row["aborted"] else "HANGING" if row["hanging"] else "open"
            out.write(
                f"{state:8} {t.topic}-{t.partition} producer {t.producer_id} epoch "
                f"{t.producer_epoch} from offset {t.start_offset}, idle {row['idle_seconds']} s"
                + ("" if args.abort or not row["hanging"] else f"  (free: {_free(t, settings)})")
                + "\n"
            )
    if not args.json:
        out.write(
            f"{len(found)} open transactions on {len(partitions)} partitions, "
            f"{len(stuck)} hanging" + (", aborted" if args.abort and stuck else "") + "\n"
        )
    return 0 if args.abort or not stuck else 1


def _free(txn: Any, settings: Any) -> str:
    from processor.runtime.hanging import free_command  # noqa: PLC0415

    return "processor doctor transactions --abort, or " + free_command(
        txn, settings.bootstrap_servers
    )
