"""``python -m processor.executor run ...`` (the same command as ``processor executor run``)."""

import argparse
import sys

from processor.executor import commands


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m processor.executor")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.register(subparsers)
    args = parser.parse_args(["executor", *sys.argv[1:]])
    code: int = args.func(args)
    return code


sys.exit(main())
