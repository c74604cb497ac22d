"""``python -m processor.executor run ...`` (the same command as ``processor executor run``)."""

import argparse
import sys

from processor.cli import errors as cli_errors
from processor.executor import commands


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m processor.executor")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.register(subparsers)
    args = parser.parse_args(["executor", *sys.argv[1:]])
    debug = cli_errors.debug_requested(sys.argv[1:])
    return cli_errors.run("processor executor", lambda: int(args.func(args)), debug=debug)


sys.exit(main())
