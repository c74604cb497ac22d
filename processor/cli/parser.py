"""The ``processor`` command's top-level parser: wiring only. Each command group has its module
in :mod:`processor.cli`; the libraries it drives parse no arguments and print nothing.

Every command module exposes ``register(subparsers)``, which adds its sub-commands and sets
``func`` on each parser to a callable taking the parsed arguments and returning an exit code.

Start-up stays short: :data:`COMMANDS` names each command's module and help, and only the module
of the command being run is imported (``processor --help`` imports none). Command modules keep
their heavy imports (aiokafka, pydantic models, jsonschema) inside the functions that need them.
Every command runs inside the error boundary of :mod:`processor.cli.errors`: one line on stderr
and a documented exit code, a traceback only with ``--debug``. ``processor --version`` prints the
package's version and the wire contract's (:data:`processor.core.events.WIRE_VERSION`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any, Final, Protocol

from processor.cli import errors as cli_errors


class _CommandModule(Protocol):
    def register(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...


#: command → (the module registering it, its one-line help), in ``--help`` order
COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "replay": ("processor.cli.offline", "run the Assembler over a JSON-lines event file"),
    "schemas": ("processor.cli.schemas", "JSON Schemas of the wire contract"),
    "states": ("processor.cli.offline", "print the call state machine (mermaid)"),
    "adapt": ("processor.cli.adapt", "normalise a provider stream into fragment events"),
    "worker": ("processor.cli.worker", "run one member of the assembler group"),
    "topics": ("processor.cli.topics", "create or describe the processor's topics"),
    "tail": ("processor.cli.tail", "print committed records of an output topic"),
    "executor": ("processor.cli.executor", "run tool handlers on dispatched calls"),
    "tools": ("processor.cli.tools", "tool registry files: import from an MCP server"),
    "ctl": ("processor.cli.ctl", "write control events and signed operator commands"),
    "audit": ("processor.cli.tail", "list the audit trail of control and operator commands"),
    "doctor": ("processor.cli.doctor", "diagnose the deployment (hanging transactions)"),
}
DEBUG_HELP: Final = "print the traceback of a failure (also PROCESSOR_LOG_LEVEL=DEBUG)"
VERSION_HELP: Final = "print the package's version and the wire contract's, and exit"


def version_line() -> str:
    """``processor <package version> (wire contract <WIRE_VERSION>)``."""
    from processor import __version__  # noqa: PLC0415
    from processor.core.events import WIRE_VERSION  # noqa: PLC0415  (pydantic: only when asked)

    return f"processor {__version__} (wire contract {WIRE_VERSION})"


class _Version(argparse.Action):
    """``--version``: like argparse's own, but the wire version is imported only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(version_line())
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser. With ``argv``, only the module of the command in it is imported; the other
    commands are listed by name and help. Without, every command is registered in full."""
    parser = argparse.ArgumentParser(
        prog="processor",
        description="Turn streamed LLM tool-call fragments into complete, validated calls.",
        epilog="exit codes: 0 ok, 1 failure, 2 usage, 66 no input, 69 Kafka unavailable, "
        "70 internal error, 77 not authorised, 78 configuration, 130 interrupted",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    parser.add_argument("--version", action=_Version, help=VERSION_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = _command_in(argv) if argv is not None else None
    modules = (
        {module for module, _ in COMMANDS.values()}
        if argv is None
        else {COMMANDS[wanted][0]}
        if wanted is not None
        else set()
    )
    registered: set[str] = set()
    for module_name in dict.fromkeys(module for module, _ in COMMANDS.values()):
        if module_name in modules:
            module: _CommandModule = importlib.import_module(module_name)
            before = set(subparsers.choices)
            module.register(subparsers)
            registered |= set(subparsers.choices) - before
    for name, (_, text) in COMMANDS.items():
        if name not in registered:
            subparsers.add_parser(name, help=text, add_help=False)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    debug = cli_errors.debug_requested(arguments)
    if "--debug" in arguments:  # accepted anywhere on the line
        arguments.remove("--debug")
        arguments.insert(0, "--debug")
    parser = build_parser(arguments)
    args = parser.parse_args(arguments)
    command = f"processor {args.command}"

    def servers() -> str | None:
        from processor.cli.flags import current_settings  # noqa: PLC0415

        settings = current_settings()
        return settings.bootstrap_servers if settings is not None else None

    return cli_errors.run(command, lambda: int(args.func(args)), debug=debug, servers=servers)


if __name__ == "__main__":
    sys.exit(main())
