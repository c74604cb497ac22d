"""``processor tools import-mcp``, and the MCP server flags it shares with ``processor executor
mcp`` (:mod:`processor.cli.executor`).

::

    processor tools import-mcp --server-command "python -m bookings_server" -o tools.yaml
    processor executor mcp --server-command "python -m bookings_server" --tools tools.yaml \\
        --keyring keyring.yaml

``tools import-mcp`` writes a registry file from the server's ``tools/list`` (see
:func:`processor.core.mcp_import.import_entries`): in the server's namespace, or bare with
``--no-namespace``. Each refused tool and each warning (text written escaped, names that look
alike) is one line on stderr. With ``-o`` naming an existing registry, its entries of other
servers and of no server are kept and this server's are replaced (a re-import): what that
changes is said on stderr (:func:`processor.core.mcp_import.reimport_changes`), and any change
is refused without ``--allow-changes``. Nothing is written unless the whole registry would
load (a bare or namespaced name that clashes with a kept entry is refused). A program that is
not an MCP server, or a server without a name, is one line and exit 78.

``executor mcp`` (registered and run by :mod:`processor.cli.executor`) runs an executor group
(default ``toolcall-mcp-<server name>``) whose handler for every tool the registry pins to this
server is a ``tools/call`` (:mod:`processor.mcp.tools`), with the executor client's fence and
at-most-once ledger. A tool whose definition departs from its pin is refused, and each departure
writes an audit record (``command_type`` ``mcp.tool_changed`` / ``mcp.tool_new`` /
``mcp.tool_removed``, outcome ``rejected``). Reaching the server: :mod:`processor.mcp.settings`.
Exit codes as ``processor executor run``.

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

__all__ = [
    "add_server_flags",
    "mcp_settings",
    "missing_sdk",
    "positive_seconds",
    "register",
    "server_spec",
]

MISSING_SDK: Final = "the MCP commands need the mcp SDK: pip install 'toolcall-processor[mcp]'"


def add_server_flags(parser: argparse.ArgumentParser) -> None:
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
        "--connect-timeout",
        type=positive_seconds,
        default=30.0,
        help="seconds for initialize (30)",
    )


def positive_seconds(text: str) -> float:
    """A flag's number of seconds: finite and above zero (``nan``, ``inf``, ``0`` and ``-1``
    are usage errors)."""
    import math  # noqa: PLC0415

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of seconds above 0")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tools = subparsers.add_parser("tools", help="tool registry files: import from an MCP server")
    sub = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    imp = sub.add_parser("import-mcp", help="write a registry from an MCP server's tools/list")
    add_server_flags(imp)
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
    imp.add_argument(
        "--allow-changes",
        action="store_true",
        help="let a re-import change the server's reviewed entries in -o (tools added, removed "
        "or changed, requires_confirmation turned off); without it any change is refused",
    )
    imp.set_defaults(func=_import_command)


# ------------------------------------------------------------------------------ shared


def mcp_settings(args: argparse.Namespace) -> McpSettings:
    try:
        from processor.mcp.settings import McpSettings  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - the base install
        raise missing_sdk() from exc
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
        raise settings_error(exc, prefix=str(McpSettings.model_config.get("env_prefix"))) from None
    if args.server_command is not None:
        settings.server_url = None
    if args.server_url is not None:
        settings.server_command = None
    return settings


def server_spec(settings: McpSettings, args: argparse.Namespace) -> ServerSpec:
    from processor.core.errors import ConfigurationError  # noqa: PLC0415

    try:
        import mcp  # noqa: F401, PLC0415
    except ImportError:
        raise missing_sdk() from None
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


def missing_sdk() -> Exception:
    from processor.core.errors import ConfigurationError  # noqa: PLC0415

    return ConfigurationError("missing_extra", MISSING_SDK)


# ------------------------------------------------------------------------------ import-mcp


def _import_command(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415
    import logging  # noqa: PLC0415

    from processor.cli.errors import debug_requested  # noqa: PLC0415

    # the SDK's and the transport's lines about what a server wrote (a traceback, a dropped
    # line) are not this command's output: its error says it in one line (--debug shows them)
    if not debug_requested(sys.argv[1:]):
        for name in ("mcp", "processor.mcp.transport"):
            quiet = logging.getLogger(name)
            quiet.addHandler(logging.NullHandler())
            quiet.propagate = False
    settings = mcp_settings(args)
    spec = server_spec(settings, args)
    return asyncio.run(_import(args, settings, spec))


async def _import(args: argparse.Namespace, settings: McpSettings, spec: ServerSpec) -> int:
    from processor.core.lookalikes import describe, hidden_characters  # noqa: PLC0415
    from processor.core.mcp_import import import_entries  # noqa: PLC0415
    from processor.exits import ConfigInvalid  # noqa: PLC0415
    from processor.mcp.connection import McpConnection  # noqa: PLC0415
    from processor.observability.terminal import printable  # noqa: PLC0415

    async with McpConnection(spec, connect_timeout_seconds=args.connect_timeout) as connection:
        listing = await connection.list_tools()
        server = settings.server_name or connection.server_name or ""
    if not server:
        raise ConfigInvalid(
            "the server reported no name",
            where="--server-name / PROCESSOR_MCP_SERVER_NAME",
            hint="give the name its tools are registered under",
        )
    if hidden := hidden_characters(server):
        raise ConfigInvalid(
            f"the server's name {server!r} hides characters ({describe(hidden)})",
            where="--server-name / PROCESSOR_MCP_SERVER_NAME",
            hint="give the name its tools are registered under",
        )
    result = import_entries(
        server,
        listing,
        confirm_destructive=not args.no_confirm_destructive,
        namespace_key=not args.no_namespace,
        escape=printable,
    )
    for line in result.refused + result.warnings:
        _say(line)
    kept, previous = _existing(args.output, server)
    _warn_lookalikes(result.entries, kept)
    _check_reimport(args, server, previous, result.entries)
    _check_loads(args.output, kept + result.entries, kept)
    _write(args.output, server, kept + result.entries)
    _say(
        f"{len(result.entries)} tool(s) of server {server!r} imported, "
        f"{len(result.refused)} refused"
    )
    return 0 if result.entries or not result.refused else 1


def _say(line: str) -> None:
    from processor.observability.terminal import printable  # noqa: PLC0415

    print(f"processor tools import-mcp: {printable(line)}", file=sys.stderr)


def _existing(output: str | None, server: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """The entries of the registry at ``output`` that are not ``server``'s (kept), and those
    that are (what a re-import replaces)."""
    from pathlib import Path  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    from processor.core.errors import RegistryError  # noqa: PLC0415

    if output in (None, "-") or not Path(output).exists():
        return [], []
    doc = yaml.safe_load(Path(output).read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("tools", []), list):
        raise RegistryError(detail=f"{output}: expected a top-level 'tools' list")
    kept: list[Any] = []
    previous: list[dict[str, Any]] = []
    for entry in doc.get("tools", []):
        pin = entry.get("mcp") if isinstance(entry, dict) else None
        (previous if isinstance(pin, dict) and pin.get("server") == server else kept).append(entry)
    return kept, previous


def _warn_lookalikes(imported: list[dict[str, Any]], kept: list[Any]) -> None:
    """Warn of an imported name that looks like a kept entry's (another server's, or a
    hand-written one): the listing's own pairs were warned of by the import."""
    from processor.core.lookalikes import confusable_pairs  # noqa: PLC0415

    names = {e["name"] for e in imported}
    others = {e.get("name") for e in kept if isinstance(e, dict)} - names
    for a, b in confusable_pairs(names, (n for n in others if isinstance(n, str))):
        if a in others or b in others:
            _say(f"tools {a!a} and {b!a} look alike (confusable names, one already in the file)")


def _check_reimport(
    args: argparse.Namespace,
    server: str,
    previous: list[dict[str, Any]],
    imported: list[dict[str, Any]],
) -> None:
    """Say what a re-import changes in the server's reviewed entries; without
    ``--allow-changes``, any change at all is refused (a server that calls itself by a reviewed
    server's name must not replace its entries unseen)."""
    from processor.core.mcp_import import reimport_changes  # noqa: PLC0415
    from processor.exits import CliError  # noqa: PLC0415

    if not previous:
        return
    changes = reimport_changes(previous, imported)
    for line in changes:
        _say(f"re-import of server {server!r}: {line}")
    if changes and not args.allow_changes:
        raise CliError(
            f"the re-import would change {len(changes)} reviewed entr"
            f"{'y' if len(changes) == 1 else 'ies'} of server {server!r} (listed above); "
            f"{args.output} is unchanged",
            hint="if that is the server you reviewed and these changes are meant, "
            "run again with --allow-changes",
        )


def _check_loads(output: str | None, tools: list[Any], kept: list[Any]) -> None:
    """Refuse to write a registry that would not load. Business validators are not imported
    here (the import's environment need not hold them): only their dotted paths are taken."""
    from processor.core.errors import RegistryError  # noqa: PLC0415
    from processor.core.registry import Registry  # noqa: PLC0415
    from processor.exits import ConfigInvalid  # noqa: PLC0415

    def unresolved(path: str) -> Any:
        return lambda arguments, ctx: ()

    where = output if output not in (None, "-") else "the imported registry"
    try:
        Registry.from_document({"tools": tools}, source=where, resolve_validator=unresolved)
    except RegistryError as exc:
        beside = " beside its other entries" if kept else ""
        raise ConfigInvalid(
            f"the registry with these tools{beside} would not load: {exc.detail}",
            where=output if output not in (None, "-") else None,
            hint="nothing was written; rename or remove the clashing entry "
            "(or import into its own namespace: without --no-namespace)",
        ) from None


def _write(output: str | None, server: str, tools: list[Any]) -> None:
    from pathlib import Path  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    text = yaml.safe_dump({"tools": tools}, sort_keys=False, allow_unicode=True, width=100)
    header = (
        f"# tools of MCP server {server!r}, imported by `processor tools import-mcp`.\n"
        "# Review each definition: the executor refuses a tool whose definition on the\n"
        "# server no longer matches its mcp.digest until this file is re-imported.\n"
    )
    if output in (None, "-"):
        sys.stdout.write(header + text)
    else:
        Path(output).write_text(header + text, encoding="utf-8")
