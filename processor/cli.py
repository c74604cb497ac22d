"""The ``processor`` command: wiring only. Each command group lives with the code it drives.

Every command module exposes ``register(subparsers)``, which adds its sub-commands and sets
``func`` on each parser to a callable taking the parsed arguments and returning an exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Protocol

from processor import commands_adapt, commands_offline
from processor.executor import commands as executor_commands
from processor.ops import audit as audit_commands
from processor.ops import ctl as ctl_commands
from processor.runtime import commands as runtime_commands


class _CommandModule(Protocol):
    def register(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...


COMMAND_MODULES: tuple[_CommandModule, ...] = (
    commands_offline,
    commands_adapt,
    runtime_commands,
    executor_commands,
    ctl_commands,
    audit_commands,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="processor",
        description="Turn streamed LLM tool-call fragments into complete, validated calls.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
