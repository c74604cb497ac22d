"""The libraries print nothing: only :mod:`processor.cli` writes to the terminal.

``runtime``, ``executor``, ``ops``, ``mcp`` and ``core`` return values, raise errors and log;
the commands of :mod:`processor.cli` print. (That they import no argparse is an import-linter
contract in ``pyproject.toml``.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import processor

LIBRARIES = ("runtime", "executor", "ops", "mcp", "core")
TERMINAL = re.compile(r"\bprint\(|\bsys\.stdout\b|\bsys\.stderr\b")


@pytest.mark.parametrize("package", LIBRARIES)
def test_the_libraries_print_nothing(package: str) -> None:
    root = Path(processor.__file__).parent / package
    sources = sorted(root.rglob("*.py"))
    assert sources, root
    found = [
        f"{path.relative_to(root.parent)}:{number}: {line.strip()}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if TERMINAL.search(line)
    ]
    assert found == [], "\n".join(found)


def test_the_commands_live_in_the_cli_package() -> None:
    from processor.cli.parser import COMMANDS

    assert {module for module, _ in COMMANDS.values()} <= {
        f"processor.cli.{path.stem}"
        for path in (Path(processor.__file__).parent / "cli").glob("*.py")
    }


def test_the_entry_point_stays_a_function_once_the_parser_is_imported() -> None:
    """``processor = "processor.cli:main"``: no submodule of ``processor.cli`` shadows it."""
    import processor.cli
    import processor.cli.parser

    assert callable(processor.cli.main)
