"""``processor executor run``: run an executor group member with handlers from a module.
Also ``python -m processor.executor run ...`` (:func:`main`).

``processor executor mcp``: the same, whose handler is a ``tools/call`` on an MCP server
(:mod:`processor.mcp`; its server flags are :mod:`processor.cli.tools`'s).

::

    processor executor run --handlers examples.book_slot_executor:handlers \\
        --group bookings --tools examples/tools.yaml --keyring keyring.yaml

``--handlers module:object`` names a :class:`~processor.executor.handlers.Handlers`, a mapping
``{tool: async handler}`` or a factory of either (the current directory, or ``--app-dir``, is put
on ``sys.path`` first, so ``examples.book_slot_executor`` imports from a checkout).

Settings come from the environment (``PROCESSOR_*``, :mod:`processor.settings`) and the flags,
flags winning. The keyring (``--keyring`` / ``PROCESSOR_KEYRING_FILE``) authenticates operator
commands the fence reads from ``control``; without one the executor refuses to start unless
``--allow-unsigned-operators`` is given (tests and local demos only). ``--create-topics`` creates
the deployment's missing topics first, ``results`` and ``executions`` included, as ``processor
topics create`` does (local demos; a deployment creates its topics once, beforehand).

Exit codes: 0 after a graceful stop (SIGTERM / SIGINT), 1 on a runtime failure (also when the
executor's loop made no progress for ``PROCESSOR_EXECUTOR_STALL_TIMEOUT_SECONDS``: one
``executor stalled`` log line, see :meth:`ExecutorClient.run`), 69 when the broker stays
unreachable for ``PROCESSOR_STARTUP_TIMEOUT_SECONDS`` (at start-up or later), 78 on a
configuration problem (see :mod:`processor.cli.errors`). The liveness probe (``/healthz``)
fails once the loop has stalled that long.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from processor.cli.flags import KEYRING_HELP, add_connection_flags, load_settings
from processor.cli.tools import add_server_flags, mcp_settings, server_spec
from processor.core.authn import AllowUnsigned, CommandVerifier
from processor.core.errors import ProcessorError
from processor.executor.client import DEFAULT_GROUP, ExecutorClient, ExecutorStalled
from processor.executor.handlers import load_handlers
from processor.exits import CliError, classify
from processor.kafka import topics as runtime_topics
from processor.kafka.clients import admin_client
from processor.observability.logging import configure_logging, fields
from processor.settings import Settings

if TYPE_CHECKING:
    from processor.mcp.connection import ServerSpec
    from processor.mcp.settings import McpSettings

__all__ = ["add_executor_flags", "register", "serve", "verifier_for"]

log = logging.getLogger("processor.executor")

UNSIGNED_WARNING: Final = (
    "--allow-unsigned-operators: the fence applies operator commands WITHOUT signature checks. "
    "Never run a deployed executor like this."
)
# after losing the broker, how long the record in hand may take before its task is cancelled
ABANDON_GRACE_SECONDS: Final = 2.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    executor = subparsers.add_parser("executor", help="run tool handlers on dispatched calls")
    sub = executor.add_subparsers(dest="executor_command", required=True, metavar="ACTION")
    run = sub.add_parser("run", help="join an executor group and run handlers")
    run.add_argument("--handlers", required=True, metavar="MODULE:OBJECT")
    run.add_argument("--app-dir", default=".", help="put this folder on sys.path (default .)")
    add_executor_flags(run)
    run.set_defaults(func=_run_command)
    register_executor_mcp(sub, add_executor_flags)


def add_executor_flags(
    parser: argparse.ArgumentParser, *, default_group: str | None = DEFAULT_GROUP
) -> None:
    """The flags every executor command shares (``executor run``, ``executor mcp``)."""
    add_connection_flags(parser)
    shown = default_group or "toolcall-mcp-<server name>"
    parser.add_argument("--group", default=default_group, help=f"consumer group ({shown})")
    parser.add_argument("--executor-id", help="this member's name (default host-pid)")
    parser.add_argument("--tools", help="tool registry: aliases, requires_confirmation, TTLs")
    parser.add_argument(
        "--keyring", action="append", help=f"{KEYRING_HELP} (PROCESSOR_KEYRING_FILE)"
    )
    parser.add_argument("--allow-unsigned-operators", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--create-topics", action="store_true", help="create missing topics first")
    parser.add_argument("--barrier-timeout", type=float, default=30.0, help="seconds")
    parser.add_argument(
        "--batch-size", type=int, help="dispatch records per poll (default: --max-in-flight)"
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        help="handlers running at once (PROCESSOR_EXECUTOR_MAX_IN_FLIGHT, default 64)",
    )
    parser.add_argument(
        "--claim-ahead",
        type=int,
        help="calls claimed beyond the free slots, waiting for one (PROCESSOR_EXECUTOR_CLAIM_AHEAD,"
        " default half of --max-in-flight; 0: claim only what starts at once)",
    )
    parser.add_argument("--metrics-port", type=int, help="serve /metrics, /healthz, /readyz")
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")


def _run_command(args: argparse.Namespace) -> int:
    settings = load_settings(
        args,
        "processor executor",
        tools_file=args.tools,
        keyring_file=args.keyring,
        metrics_port=args.metrics_port,
        executor_max_in_flight=args.max_in_flight,
        executor_claim_ahead=args.claim_ahead,
    )
    configure_logging(settings.log_level)
    app_dir = str(Path(args.app_dir).resolve())
    if app_dir not in sys.path:
        sys.path.insert(0, app_dir)
    handlers = load_handlers(args.handlers)
    verifier = verifier_for(settings, allow_unsigned=args.allow_unsigned_operators)
    registry = None
    if settings.tools_file is not None:
        from processor.cli.recursion import allow_deep_validation  # noqa: PLC0415
        from processor.registry_file import load_registry  # noqa: PLC0415

        allow_deep_validation()  # the tools load as in the worker, deep schemas included
        registry = load_registry(settings.tools_file)
    client = ExecutorClient(
        settings,
        handlers,
        verifier=verifier,
        group=args.group,
        executor_id=args.executor_id,
        registry=registry,
        barrier_timeout_seconds=args.barrier_timeout,
        batch_size=args.batch_size,
    )
    return asyncio.run(serve(client, create_topics=args.create_topics))


def verifier_for(settings: Settings, *, allow_unsigned: bool) -> CommandVerifier:
    if settings.keyring_file is not None:
        from processor.ops.signing import Keyring  # noqa: PLC0415

        return Keyring.load(*settings.keyring_file)
    if allow_unsigned:
        log.warning(UNSIGNED_WARNING)
        print(f"WARNING: {UNSIGNED_WARNING}", file=sys.stderr)
        from processor.observability import metrics  # noqa: PLC0415

        metrics.UNSIGNED_COMMANDS_ALLOWED.set(1)
        return AllowUnsigned()
    raise ProcessorError(
        "missing_keyring",
        "a keyring is required to authenticate operator commands "
        "(--keyring or PROCESSOR_KEYRING_FILE)",
    )


_verifier = verifier_for  # its earlier name


async def serve(client: ExecutorClient, *, create_topics: bool) -> int:
    """Run ``client`` until a signal or a lost broker: the body of every executor command."""
    from processor.kafka.clients import ignore_fenced_leftovers  # noqa: PLC0415
    from processor.kafka.reachability import BrokerWatch, wait_for_broker  # noqa: PLC0415

    settings = client.settings
    lost: list[CliError] = []

    running: asyncio.Task[None] | None = None

    def on_lost(error: CliError) -> None:
        lost.append(error)
        client.request_stop(abandon=True)
        # a record in hand may be waiting on the gone broker (a commit waits without a bound)
        if running is not None:
            asyncio.get_running_loop().call_later(ABANDON_GRACE_SECONDS, running.cancel)

    broker = BrokerWatch(settings, on_lost)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(ignore_fenced_leftovers)
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, client.request_stop)
    health = None
    if settings.metrics_port is not None:  # live while waiting for the broker, not ready
        from processor.observability.health import HealthServer  # noqa: PLC0415

        health = HealthServer(
            settings.metrics_host,
            settings.metrics_port,
            live=lambda: (
                client.seconds_since_progress() < settings.executor_stall_timeout_seconds,
                {"seconds_since_progress": round(client.seconds_since_progress(), 1)},
            ),
            ready=lambda: (
                broker.reachable and bool(client.owned_partitions()),
                {"partitions": client.owned_partitions(), "kafka_reachable": broker.reachable},
            ),
        )
        await health.start()
    watch: asyncio.Task[None] | None = None
    stalled = False
    try:
        await wait_for_broker(settings)
        if create_topics:
            async with admin_client(settings) as admin:
                await runtime_topics.create_topics(settings, admin)
        await client.start()
        watch = asyncio.create_task(broker.run())
        running = asyncio.create_task(client.run())
        try:
            try:
                await running
            except asyncio.CancelledError:
                if not lost or (task := asyncio.current_task()) is None or task.cancelling():
                    raise
            except ExecutorStalled:
                stalled = True  # its one line is logged; the partitions were abandoned
        finally:
            watch.cancel()
            await client.stop()
    except Exception as exc:
        if isinstance(exc, ProcessorError | CliError | runtime_topics.TopicLayoutError):
            raise
        if classify(exc, settings.bootstrap_servers) is not None:
            raise  # one line from the CLI's error boundary
        log.error("executor failed", extra=fields(error=type(exc).__name__, detail=str(exc)))
        return 1
    finally:
        if health is not None:
            await health.stop()
    if lost:
        raise lost[0]
    return 1 if stalled else 0


def register_executor_mcp(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    add_executor_flags: Any,
) -> None:
    """Add ``executor mcp`` (``add_executor_flags`` adds ``executor run``'s shared flags)."""
    mcp = sub.add_parser("mcp", help="run calls as tools/call on an MCP server")
    add_server_flags(mcp)
    add_executor_flags(mcp, default_group=None)
    mcp.add_argument("--call-timeout", type=float, help="seconds for one tools/call (60)")
    mcp.add_argument("--max-result-bytes", type=int, help="the largest result recorded (65536)")
    mcp.set_defaults(func=_mcp_command)


# ------------------------------------------------------------------------------ executor mcp


def _mcp_command(args: argparse.Namespace) -> int:

    settings = load_settings(
        args,
        "processor executor mcp",
        tools_file=args.tools,
        keyring_file=args.keyring,
        metrics_port=args.metrics_port,
        executor_max_in_flight=args.max_in_flight,
        executor_claim_ahead=args.claim_ahead,
    )
    configure_logging(settings.log_level)
    server = mcp_settings(args)
    spec = server_spec(server, args)
    if settings.tools_file is None:
        from processor.core.errors import ConfigurationError  # noqa: PLC0415

        raise ConfigurationError(
            "missing_tools", "executor mcp needs the registry (--tools or PROCESSOR_TOOLS_FILE)"
        )
    return asyncio.run(_run_mcp_executor(args, settings, server, spec))


async def _run_mcp_executor(
    args: argparse.Namespace, settings: Settings, server: McpSettings, spec: ServerSpec
) -> int:
    from processor.cli.recursion import allow_deep_validation  # noqa: PLC0415
    from processor.mcp.audit import AuditWriter  # noqa: PLC0415
    from processor.mcp.connection import McpConnection  # noqa: PLC0415
    from processor.mcp.tools import McpTools  # noqa: PLC0415
    from processor.registry_file import load_registry  # noqa: PLC0415

    allow_deep_validation()
    assert settings.tools_file is not None
    registry = load_registry(settings.tools_file)
    verifier = verifier_for(settings, allow_unsigned=args.allow_unsigned_operators)
    audit = AuditWriter(settings)
    tools: McpTools | None = None

    async def on_listing(listing: Any) -> None:
        if tools is not None:
            await tools.check_listing(listing)

    connection = McpConnection(
        spec, on_listing=on_listing, connect_timeout_seconds=args.connect_timeout
    )
    tools = McpTools(
        registry,
        connection,
        server_name=server.server_name,
        call_timeout_seconds=server.call_timeout_seconds,
        max_result_bytes=server.max_result_bytes,
        on_change=audit.write,
    )
    await connection.start()
    try:
        client = ExecutorClient(
            settings,
            tools.handlers(),
            verifier=verifier,
            group=args.group or f"toolcall-mcp-{tools.server}",
            executor_id=args.executor_id,
            registry=registry,
            barrier_timeout_seconds=args.barrier_timeout,
            batch_size=args.batch_size,
        )
        return await serve(client, create_topics=args.create_topics)
    finally:
        await connection.stop()
        await audit.stop()


# ------------------------------------------------------------------------------ standalone


def main() -> int:
    """``python -m processor.executor run|mcp ...``."""
    from processor.cli import errors as cli_errors  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m processor.executor")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register(subparsers)
    args = parser.parse_args(["executor", *sys.argv[1:]])
    debug = cli_errors.debug_requested(sys.argv[1:])
    return cli_errors.run("processor executor", lambda: int(args.func(args)), debug=debug)
