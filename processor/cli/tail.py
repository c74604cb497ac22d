"""``processor tail``: print committed records of an output topic (:mod:`processor.kafka.tail`),
and ``processor audit``: list and filter the audit trail (:mod:`processor.ops.audit`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import IO

import orjson

from processor.cli.flags import add_common_flags, add_connection_flags, load_settings
from processor.core.events import AuditOutcome
from processor.exits import ConfigInvalid
from processor.kafka.tail import TAIL_ROLES, run_tail


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], *, audit: bool = True
) -> None:
    tail = subparsers.add_parser("tail", help="print committed records of an output topic")
    add_common_flags(tail)
    tail.add_argument("role", choices=TAIL_ROLES, help="which output topic")
    tail.add_argument("--json", action="store_true", help="one JSON object per record")
    tail.add_argument("--follow", "-f", action="store_true", help="keep reading new records")
    tail.add_argument("--from-end", action="store_true", help="skip the existing records")
    tail.add_argument("--max", type=int, dest="max_records", help="stop after N records")
    tail.set_defaults(func=_tail_command)
    if audit:
        register_audit(subparsers)


def _tail_command(args: argparse.Namespace) -> int:
    settings = load_settings(args, "processor")
    try:
        return run_tail(
            settings,
            args.role,
            sys.stdout,
            as_json=args.json,
            from_beginning=not args.from_end,
            follow=args.follow,
            max_records=args.max_records,
        )
    except LookupError as exc:
        raise ConfigInvalid(
            str(exc).strip("'\""),
            where="PROCESSOR_TOPIC_PREFIX",
            hint="create the topics with `processor topics create`",
        ) from None
    except KeyboardInterrupt:
        return 0


def register_audit(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("audit", help="list the audit trail of control and operator commands")
    add_connection_flags(p)
    p.add_argument("--tenant", help="only commands for this tenant")
    p.add_argument("--command-type", help="e.g. tenant.stopped, call.confirmed")
    p.add_argument("--outcome", choices=[o.value for o in AuditOutcome])
    p.add_argument("--issued-by", help="only commands of this issuer")
    p.add_argument("--command-id", help="one command")
    p.add_argument("--since", help="30m, 2h, 1d, an ISO-8601 time, or epoch seconds")
    p.add_argument("--json", action="store_true", help="one JSON object per entry")
    p.set_defaults(func=_audit_command)


def _audit_command(args: argparse.Namespace) -> int:
    return run_audit(args, sys.stdout)


def run_audit(args: argparse.Namespace, out: IO[str]) -> int:
    from processor.ops.audit import AuditFilter, collect, parse_since  # noqa: PLC0415

    settings = load_settings(args, "processor audit")
    try:
        since = parse_since(args.since, time.time()) if args.since else None
    except ValueError as exc:
        print(f"processor audit: {exc}", file=sys.stderr)
        return 2
    wanted = AuditFilter(
        tenant=args.tenant,
        command_type=args.command_type,
        outcome=args.outcome,
        issued_by=args.issued_by,
        command_id=args.command_id,
        since=since,
    )
    try:
        entries = asyncio.run(collect(settings, wanted))
    except LookupError as exc:
        print(f"processor audit: {exc}", file=sys.stderr)
        return 2
    from processor.observability.terminal import printable_json  # noqa: PLC0415

    for entry in entries:
        if args.json:
            out.write(printable_json(orjson.dumps(entry.as_json()).decode()) + "\n")
        else:
            out.write(entry.line() + "\n")
    out.flush()
    return 0
