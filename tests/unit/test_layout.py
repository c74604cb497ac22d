"""The layout's rules: the libraries print nothing, import no command, and modules stay small.

``runtime``, ``executor``, ``ops``, ``mcp`` and ``core`` return values, raise errors and log;
the commands of :mod:`processor.cli` print. (That they import no argparse and no command is an
import-linter contract in ``pyproject.toml``; that no library module is exempt from it is
checked here.) A module over ``MAX_LINES`` lines says in its docstring why it stays whole.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import processor

ROOT = Path(processor.__file__).parent
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


def _contracts() -> list[dict[str, Any]]:
    with (ROOT.parent / "pyproject.toml").open("rb") as file:
        contracts: list[dict[str, Any]] = tomllib.load(file)["tool"]["importlinter"]["contracts"]
    return contracts


def test_no_library_module_is_exempt_from_importing_the_commands() -> None:
    """The libraries take the exit-code taxonomy from :mod:`processor.exits`, not from
    ``processor.cli``: only the ``python -m`` launchers may import a command, and no contract
    lets any other module through."""
    guards = [c for c in _contracts() if "processor.cli" in c.get("forbidden_modules", ())]
    guarded = {m.removeprefix("processor.") for c in guards for m in c["source_modules"]}
    assert {*LIBRARIES, "exits"} <= guarded, "a library may import processor.cli"
    for contract in guards:
        exempt = [
            rule
            for rule in contract.get("ignore_imports", ())
            if not rule.split("->")[0].strip().endswith(".__main__")
        ]
        assert exempt == [], f"{contract['name']}: {exempt}"


def test_the_exit_code_taxonomy_is_a_library_module() -> None:
    import processor.cli.errors
    import processor.exits

    assert processor.exits.CliError.__module__ == "processor.exits"
    assert processor.cli.errors.ExitCode is processor.exits.ExitCode


MAX_LINES = 500
WHY = "Why one module:"


def _module_docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def test_a_module_over_500_lines_says_why_it_stays_one() -> None:
    """Small modules, one owner each: a module of ``processor`` over ``MAX_LINES`` lines is split
    along its seams, or its docstring has a paragraph starting "Why one module:" that says why
    a split would hurt (a hot path kept in one place, one state machine)."""
    unexplained = [
        f"{path.relative_to(ROOT.parent)}: {lines} lines"
        for path in sorted(ROOT.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
        and not any(line.startswith(WHY) for line in _module_docstring(path).splitlines())
    ]
    assert unexplained == [], (
        f"split these modules, or start a docstring paragraph with {WHY!r}:\n"
        + "\n".join(unexplained)
    )


def test_the_size_rule_reads_the_module_docstring_only(tmp_path: Path) -> None:
    """The marker counts in the module docstring, not in a comment or a function's docstring."""
    body = "x = 1\n" * MAX_LINES
    inside = tmp_path / "inside.py"
    inside.write_text(f'"""Owns x.\n\n{WHY} one table.\n"""\n{body}', encoding="utf-8")
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text(f'"""Owns x."""\n# {WHY} a comment\n{body}', encoding="utf-8")
    assert any(line.startswith(WHY) for line in _module_docstring(inside).splitlines())
    assert not any(line.startswith(WHY) for line in _module_docstring(elsewhere).splitlines())
