"""Commands of the Kafka runtime: ``worker``, ``topics create|describe``, ``tail``.

``register(subparsers)`` adds them to the ``processor`` command (see :mod:`processor.cli`);
``python -m processor.runtime ...`` runs them on their own. Settings come from the environment
(``PROCESSOR_*``, see :mod:`processor.settings`) and the flags below, flags winning. Secrets
(SASL password, TLS key password) are read from the environment only, never from flags.

Failures go through the CLI's error boundary (:mod:`processor.cli.errors`): 0 success,
1 runtime failure, 2 usage, 66 a file cannot be read, 69 Kafka unreachable, 77 not authorised,
78 configuration (bad settings, registry or keyring, topics missing or not co-partitioned).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Final

from processor.cli import errors as cli_errors
from processor.cli.errors import ConfigInvalid, ExitCode
from processor.cli.flags import KEYRING_HELP, add_common_flags, load_settings
from processor.core.authn import AllowUnsigned, CommandVerifier, NoKeyring
from processor.observability.logging import configure_logging, fields
from processor.runtime.clients import admin_client
from processor.runtime.tail import TAIL_ROLES, run_tail
from processor.runtime.topics import (
    EXECUTOR_LEDGER,
    WORKER_INPUTS,
    TopicLayoutError,
    check_copartitioning,
    create_topics,
    describe_topics,
    format_states,
)
from processor.settings import Settings

log = logging.getLogger("processor.runtime")

_WORKER_FLAGS: Final = {
    "group_id": "group_id",
    "application_id": "application_id",
    "tools": "tools_file",
    "keyring": "keyring_file",
    "metrics_port": "metrics_port",
    "metrics_host": "metrics_host",
    "batch_size": "batch_max_records",
    "poll_timeout_ms": "poll_timeout_ms",
    "allow_unsigned_commands": "allow_unsigned_commands",
}

ALLOW_UNSIGNED_WARNING: Final = (
    "--allow-unsigned-commands (PROCESSOR_ALLOW_UNSIGNED_COMMANDS) and no keyring: operator "
    "commands are applied WITHOUT SIGNATURE CHECKS. Anyone who can write to the control topic can "
    "quarantine, disable tools and stop or resume tenants. Never run a deployed worker like this."
)
NO_KEYRING_WARNING: Final = (
    "no keyring configured (PROCESSOR_KEYRING_FILE / --keyring): every operator command is "
    "refused and audited as unsigned (quarantine, tool disable/enable, tenant stop/resume)"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = subparsers.add_parser("worker", help="run one member of the assembler group")
    add_common_flags(worker)
    worker.add_argument("--group-id", help="consumer group (default toolcall-assemblers)")
    worker.add_argument("--application-id", help="transactional id prefix")
    worker.add_argument("--tools", help="tool registry file (YAML or JSON)")
    worker.add_argument("--keyring", action="append", help=KEYRING_HELP)
    worker.add_argument(
        "--allow-unsigned-commands",
        action="store_const",
        const=True,
        help="DEVELOPMENT ONLY: without a keyring, apply operator commands unsigned",
    )
    worker.add_argument("--metrics-port", type=int, help="serve /metrics, /healthz, /readyz")
    worker.add_argument("--metrics-host", help="address of the metrics endpoint")
    worker.add_argument("--batch-size", type=int, help="max records per poll")
    worker.add_argument("--poll-timeout-ms", type=int, help="max wait of one poll")
    worker.set_defaults(func=_worker_command)

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
        "principal; ROLE is adapter, worker, executor, operator or auditor; repeatable",
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

    tail = subparsers.add_parser("tail", help="print committed records of an output topic")
    add_common_flags(tail)
    tail.add_argument("role", choices=TAIL_ROLES, help="which output topic")
    tail.add_argument("--json", action="store_true", help="one JSON object per record")
    tail.add_argument("--follow", "-f", action="store_true", help="keep reading new records")
    tail.add_argument("--from-end", action="store_true", help="skip the existing records")
    tail.add_argument("--max", type=int, dest="max_records", help="stop after N records")
    tail.set_defaults(func=_tail_command)


# ---------------------------------------------------------------------- worker


def _worker_command(args: argparse.Namespace) -> int:
    flags = {name: getattr(args, dest) for dest, name in _WORKER_FLAGS.items()}
    settings = load_settings(args, "processor", **flags)
    configure_logging(settings.log_level)
    log.info("settings", extra=fields(settings=settings.masked_dict()))
    if settings.tools_file is None:
        raise ConfigInvalid(
            "a tools file is required",
            where="--tools / PROCESSOR_TOOLS_FILE",
            hint="name the tool registry (YAML or JSON) the worker validates calls against",
        )
    from processor.cli.recursion import allow_deep_validation  # noqa: PLC0415
    from processor.cli.toolsfile import load_registry  # noqa: PLC0415
    from processor.runtime.worker import run_worker  # noqa: PLC0415  (heavy imports)

    allow_deep_validation()  # also for the checks of a deep schema at load
    registry = load_registry(settings.tools_file)
    verifier = _verifier(settings)
    return asyncio.run(run_worker(settings, registry, verifier))


def _verifier(settings: Settings) -> CommandVerifier:
    """The keyring (an empty one is refused: exit 78); without one, a verifier refusing every
    operator command, unless the development flag asks for none (warned, and on /metrics)."""
    if settings.keyring_file is not None:
        from processor.ops.signing import Keyring  # noqa: PLC0415

        return Keyring.load(*settings.keyring_file)
    if settings.allow_unsigned_commands:
        log.warning(ALLOW_UNSIGNED_WARNING)
        print(f"WARNING: {ALLOW_UNSIGNED_WARNING}", file=sys.stderr)
        from processor.observability import metrics  # noqa: PLC0415

        metrics.UNSIGNED_COMMANDS_ALLOWED.set(1)
        return AllowUnsigned()
    log.warning(NO_KEYRING_WARNING)
    return NoKeyring()


# ---------------------------------------------------------------------- topics


def _topics_create_command(args: argparse.Namespace) -> int:
    from processor.runtime import acls  # noqa: PLC0415

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


# ---------------------------------------------------------------------- tail


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


# ---------------------------------------------------------------------- standalone


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="processor", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register(subparsers)
    args = parser.parse_args(argv)
    return cli_errors.run("processor", lambda: int(args.func(args)), debug=False)
