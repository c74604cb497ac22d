"""``processor topics create|describe``: create the processor's topics (and print or apply the
ACLs of the README table), or show their partitions, replication and policies
(:mod:`processor.kafka.topics`, :mod:`processor.kafka.acls`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from processor.cli.flags import add_common_flags, load_settings
from processor.exits import ExitCode
from processor.kafka.clients import admin_client
from processor.kafka.topics import (
    EXECUTOR_LEDGER,
    WORKER_INPUTS,
    TopicLayoutError,
    check_copartitioning,
    create_topics,
    describe_topics,
    format_states,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = subparsers.add_parser("topics", help="create or describe the processor's topics")
    topics_sub = topics.add_subparsers(dest="topics_command", required=True)
    create = topics_sub.add_parser("create", help="create the missing topics")
    add_common_flags(create)
    create.add_argument("--partitions", type=int, help="partition count of new topics")
    create.add_argument("--replication-factor", type=int, help="replication of new topics")
    create.add_argument(
        "--acls-for",
        action="append",
        metavar="ROLE=PRINCIPAL",
        help="also print (or with --apply-acls create) the ACLs of the README table for this "
        "principal; ROLE is adapter, worker, executor, operator, auditor or follower (an agent "
        "following its turns' outcomes); repeatable",
    )
    create.add_argument(
        "--executor-group", default="toolcall-executors", help="the executors' consumer group"
    )
    create.add_argument(
        "--group-id", help="the assemblers' consumer group (default toolcall-assemblers)"
    )
    create.add_argument("--application-id", help="the assemblers' transactional id prefix")
    create.add_argument(
        "--apply-acls", action="store_true", help="create the ACLs instead of printing them"
    )
    create.set_defaults(func=_topics_create_command)
    describe = topics_sub.add_parser("describe", help="show partitions, replication, policies")
    add_common_flags(describe)
    describe.set_defaults(func=_topics_describe_command)


# ---------------------------------------------------------------------- topics


def _topics_create_command(args: argparse.Namespace) -> int:
    from processor.kafka import acls  # noqa: PLC0415

    settings = load_settings(
        args, "processor", group_id=args.group_id, application_id=args.application_id
    )
    principals = acls.parse_principals(args.acls_for or ())
    bindings = acls.acl_bindings(settings, principals, executor_group=args.executor_group)

    async def run() -> int:
        async with admin_client(settings) as admin:
            result = await create_topics(
                settings,
                admin,
                partitions=args.partitions,
                replication_factor=args.replication_factor,
            )
            for name, outcome in result.items():
                print(f"{outcome:<8} {name}")
            if args.apply_acls:
                count = await acls.apply_acls(admin, bindings)
                print(f"created {count} ACLs for {', '.join(sorted(principals.values()))}")
            else:
                for line in acls.format_commands(bindings, settings.bootstrap_servers):
                    print(line)
        return 0

    return asyncio.run(run())


def _topics_describe_command(args: argparse.Namespace) -> int:
    settings = load_settings(args, "processor")

    async def run() -> int:
        async with admin_client(settings) as admin:
            states = await describe_topics(settings, admin)
        for line in format_states(states):
            print(line)
        try:
            for group in (WORKER_INPUTS, EXECUTOR_LEDGER):
                check_copartitioning(states, group)
        except TopicLayoutError as exc:
            print(f"problem: {exc}", file=sys.stderr)
            return ExitCode.CONFIG
        missing = [s.name for s in states.values() if not s.exists]
        if missing:
            print(f"problem: missing topics: {', '.join(missing)}", file=sys.stderr)
            return ExitCode.CONFIG
        return 0

    return asyncio.run(run())
