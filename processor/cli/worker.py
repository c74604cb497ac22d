"""``processor worker``: run one member of the assembler group (:mod:`processor.runtime.worker`).

``register(subparsers)`` adds it to the ``processor`` command (see :mod:`processor.cli.parser`);
``python -m processor.runtime worker|topics|tail ...`` runs it (and ``topics``, ``tail``) on its
own (:func:`main`). Settings come from the environment
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
from processor.cli.flags import KEYRING_HELP, add_common_flags, load_settings
from processor.core.authn import AllowUnsigned, CommandVerifier, NoKeyring
from processor.exits import ConfigInvalid
from processor.observability.logging import configure_logging, fields
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
    from processor.registry_file import load_registry  # noqa: PLC0415
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


# ---------------------------------------------------------------------- standalone


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="processor", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from processor.cli import tail, topics  # noqa: PLC0415

    register(subparsers)
    topics.register(subparsers)
    tail.register(subparsers, audit=False)
    args = parser.parse_args(argv)
    return cli_errors.run("processor", lambda: int(args.func(args)), debug=False)
