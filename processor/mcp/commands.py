"""``processor executor mcp`` and ``processor tools import-mcp``: MCP servers, two commands.

::

    processor tools import-mcp --server-command "python -m bookings_server" -o tools.yaml
    processor executor mcp --server-command "python -m bookings_server" --tools tools.yaml \\
        --keyring keyring.yaml

``tools import-mcp`` writes a registry file from the server's ``tools/list`` (see
:func:`processor.core.mcp_pins.import_entries`); with ``-o`` naming an existing registry, its
entries of other servers and of no server are kept and this server's are replaced (a
re-import). Each refused tool is one line on stderr.

``executor mcp`` runs an executor group (default ``toolcall-mcp-<server name>``) whose handler
for every tool the registry pins to this server is a ``tools/call``
(:mod:`processor.mcp.tools`), with the executor client's fence and at-most-once ledger. A tool
whose definition departs from its pin is refused, and each departure writes an audit record
(``command_type`` ``mcp.tool_changed`` / ``mcp.tool_new`` / ``mcp.tool_removed``, outcome
``rejected``). Reaching the server: :mod:`processor.mcp.settings`. Exit codes as ``processor
executor run``.

Only ``argparse`` is imported with this module: the ``mcp`` SDK, aiokafka and the rest load
inside the commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from processor.mcp.connection import ServerSpec
    from processor.mcp.settings import McpSettings
    from processor.settings import Settings

__all__ = ["register", "register_executor_mcp"]

MISSING_SDK: Final = "the MCP commands need the mcp SDK: pip install 'toolcall-processor[mcp]'"


def _add_server_flags(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--server-command", help="start this command line as a stdio MCP server")
    where.add_argument("--server-url", help="a Streamable HTTP MCP endpoint")
    parser.add_argument(
        "--header",
        action="append",
        metavar="NAME=ENV_VAR",
        help="an HTTP header whose value is read from ENV_VAR (also PROCESSOR_MCP_HEADERS)",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        metavar="NAME",
        help="pass this environment variable to a stdio server (it gets only a safe default "
        "set: HOME, PATH, …)",
    )
    parser.add_argument("--server-name", help="the server's name in the registry")
    parser.add_argument(
        "--connect-timeout", type=float, default=30.0, help="seconds for initialize (30)"
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tools = subparsers.add_parser("tools", help="tool registry files: import from an MCP server")
    sub = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    imp = sub.add_parser("import-mcp", help="write a registry from an MCP server's tools/list")
    _add_server_flags(imp)
    imp.add_argument("-o", "--output", help="the registry file to write or update (- = stdout)")
    imp.add_argument(
        "--no-confirm-destructive",
        action="store_true",
        help="do not require confirmation for destructive tools (destructiveHint)",
    )
    imp.add_argument(
        "--no-namespace",
        action="store_true",
        help="declare the tools bare, not in the server's namespace (its name)",
    )
    imp.set_defaults(func=_import_command)


def register_executor_mcp(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    add_executor_flags: Any,
) -> None:
    """Add ``executor mcp`` (``add_executor_flags`` adds ``executor run``'s shared flags)."""
    mcp = sub.add_parser("mcp", help="run calls as tools/call on an MCP server")
    _add_server_flags(mcp)
    add_executor_flags(mcp, default_group=None)
    mcp.add_argument("--call-timeout", type=float, help="seconds for one tools/call (60)")
    mcp.add_argument("--max-result-bytes", type=int, help="the largest result recorded (65536)")
    mcp.set_defaults(func=_executor_command)


# ------------------------------------------------------------------------------ shared


def _mcp_settings(args: argparse.Namespace) -> McpSettings:
    try:
        from processor.mcp.settings import McpSettings  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - the base install
        raise _missing_sdk() from exc
    overrides = {
        "server_command": args.server_command,
        "server_url": args.server_url,
        "server_name": args.server_name,
        "call_timeout_seconds": getattr(args, "call_timeout", None),
        "max_result_bytes": getattr(args, "max_result_bytes", None),
    }
    from pydantic import ValidationError  # noqa: PLC0415

    from processor.cli.flags import settings_error  # noqa: PLC0415

    try:
        settings = McpSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise settings_error(exc) from None
    if args.server_command is not None:
        settings.server_url = None
    if args.server_url is not None:
        settings.server_command = None
    return settings


def _spec(settings: McpSettings, args: argparse.Namespace) -> ServerSpec:
    from processor.core.errors import ConfigurationError  # noqa: PLC0415

    try:
        import mcp  # noqa: F401, PLC0415
    except ImportError:
        raise _missing_sdk() from None
    from processor.mcp.connection import ServerSpec  # noqa: PLC0415
    from processor.mcp.settings import headers_from_flags  # noqa: PLC0415

    headers = settings.header_values(headers_from_flags(args.header))
    env = {name: os.environ[name] for name in args.server_env or () if name in os.environ}
    try:
        return ServerSpec(
            command=settings.server_command, url=settings.server_url, headers=headers, env=env
        )
    except ValueError as exc:
        raise ConfigurationError(
            "mcp_server", f"{exc} (--server-command / --server-url, PROCESSOR_MCP_SERVER_*)"
        ) from None


def _missing_sdk() -> Exception:
    from processor.core.errors import ConfigurationError  # noqa: PLC0415

    return ConfigurationError("missing_extra", MISSING_SDK)


# ------------------------------------------------------------------------------ import-mcp


def _import_command(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415

    settings = _mcp_settings(args)
    spec = _spec(settings, args)
    return asyncio.run(_import(args, settings, spec))


async def _import(args: argparse.Namespace, settings: McpSettings, spec: ServerSpec) -> int:
    from pathlib import Path  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    from processor.core.errors import RegistryError  # noqa: PLC0415
    from processor.core.mcp_pins import import_entries  # noqa: PLC0415
    from processor.mcp.connection import McpConnection  # noqa: PLC0415

    async with McpConnection(spec, connect_timeout_seconds=args.connect_timeout) as connection:
        listing = await connection.list_tools()
        server = settings.server_name or connection.server_name or ""
    if not server:
        print("processor tools import-mcp: the server reported no name; give --server-name")
        return 78
    result = import_entries(server, listing, confirm_destructive=not args.no_confirm_destructive)
    for line in result.refused:
        print(f"processor tools import-mcp: {line}", file=sys.stderr)
    kept: list[Any] = []
    output = args.output
    if output not in (None, "-") and Path(output).exists():
        doc = yaml.safe_load(Path(output).read_text(encoding="utf-8")) or {}
        if not isinstance(doc, dict) or not isinstance(doc.get("tools", []), list):
            raise RegistryError(detail=f"{output}: expected a top-level 'tools' list")
        kept = [
            t
            for t in doc.get("tools", [])
            if not (isinstance(t, dict) and (t.get("mcp") or {}).get("server") == server)
        ]
    text = yaml.safe_dump(
        {"tools": kept + result.entries}, sort_keys=False, allow_unicode=True, width=100
    )
    header = (
        f"# tools of MCP server {server!r}, imported by `processor tools import-mcp`.\n"
        "# Review each definition: the executor refuses a tool whose definition on the\n"
        "# server no longer matches its mcp.digest until this file is re-imported.\n"
    )
    if output in (None, "-"):
        sys.stdout.write(header + text)
    else:
        Path(output).write_text(header + text, encoding="utf-8")
    print(
        f"processor tools import-mcp: {len(result.entries)} tool(s) of server {server!r} "
        f"imported, {len(result.refused)} refused",
        file=sys.stderr,
    )
    return 0 if result.entries or not result.refused else 1


# ------------------------------------------------------------------------------ executor mcp


def _executor_command(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415

    from processor.cli.flags import load_settings  # noqa: PLC0415
    from processor.observability.logging import configure_logging  # noqa: PLC0415

    settings = load_settings(
        args,
        "processor executor mcp",
        tools_file=args.tools,
        keyring_file=args.keyring,
        metrics_port=args.metrics_port,
    )
    configure_logging(settings.log_level)
    mcp_settings = _mcp_settings(args)
    spec = _spec(mcp_settings, args)
    if settings.tools_file is None:
        from processor.core.errors import ConfigurationError  # noqa: PLC0415

        raise ConfigurationError(
            "missing_tools", "executor mcp needs the registry (--tools or PROCESSOR_TOOLS_FILE)"
        )
    return asyncio.run(_run_executor(args, settings, mcp_settings, spec))


async def _run_executor(
    args: argparse.Namespace, settings: Settings, mcp_settings: McpSettings, spec: ServerSpec
) -> int:
    from processor.cli.recursion import allow_deep_validation  # noqa: PLC0415
    from processor.cli.toolsfile import load_registry  # noqa: PLC0415
    from processor.executor.client import ExecutorClient  # noqa: PLC0415
    from processor.executor.commands import serve, verifier_for  # noqa: PLC0415
    from processor.mcp.audit import AuditWriter  # noqa: PLC0415
    from processor.mcp.connection import McpConnection  # noqa: PLC0415
    from processor.mcp.tools import McpTools  # noqa: PLC0415

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
        server_name=mcp_settings.server_name,
        call_timeout_seconds=mcp_settings.call_timeout_seconds,
        max_result_bytes=mcp_settings.max_result_bytes,
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
