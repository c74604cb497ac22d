"""``processor schemas export|check``: the JSON Schemas of the wire contract in ``schemas/``.

The generation and the drift check are :mod:`processor.cli.schema_export`'s (imported when the
command runs: pydantic stays off the parser's path).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schemas = subparsers.add_parser("schemas", help="JSON Schemas of the wire contract")
    schemas_sub = schemas.add_subparsers(dest="schemas_command", required=True)
    export = schemas_sub.add_parser("export", help="write schemas/*.schema.json")
    export.add_argument("--out", default="schemas", help="output folder")
    export.set_defaults(func=lambda a: _export(Path(a.out)))
    check = schemas_sub.add_parser("check", help="fail when schemas/ drifted from the models")
    check.add_argument("--dir", default="schemas")
    check.set_defaults(func=lambda a: _check(Path(a.dir)))


def _export(folder: Path) -> int:
    from processor.cli.schema_export import export_schemas  # noqa: PLC0415

    for path in export_schemas(folder):
        print(path)
    return 0


def _check(folder: Path) -> int:
    from processor.cli.schema_export import check_schemas  # noqa: PLC0415

    drift = check_schemas(folder)
    for line in drift:
        print(line, file=sys.stderr)
    return 1 if drift else 0
