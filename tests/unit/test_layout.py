"""The layout's rules: the libraries print nothing, import no command, every package has a layer.

``runtime``, ``kafka``, ``executor``, ``ops``, ``mcp`` and ``core`` return values, raise errors and log;
the commands of :mod:`processor.cli` print. (That they import no argparse and no command is an
import-linter contract in ``pyproject.toml``; that no library module is exempt from it is
checked here.) The package's layering is import-linter's ``layers`` contract; that it places
every package is checked here. How big a module may grow is a review question
(docs/contributing.md), not a line count.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import processor

ROOT = Path(processor.__file__).parent
LIBRARIES = ("runtime", "kafka", "executor", "ops", "mcp", "core")
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


def test_the_layers_contract_covers_every_package() -> None:
    """Issue 41: the layering is a contract, not a size rule. Every package and top-level
    module of ``processor`` stands in one layer of the ``layers`` contract (so a new one cannot
    sit outside it), and nothing but the ``python -m`` launchers is exempt."""
    [layers] = [
        c for c in _contracts() if c["type"] == "layers" and "processor.cli" in c["layers"]
    ]
    placed = {m.strip() for layer in layers["layers"] for m in re.split(r"[|:]", layer)}
    present = {
        f"processor.{path.stem if path.is_file() else path.name}"
        for path in ROOT.iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.stem not in ("__init__",))
    }
    # the exit-code taxonomy is below every layer (its own contract keeps it import-free)
    assert present - placed == {"processor.exits"}, present - placed
    exempt = [r for r in layers.get("ignore_imports", ()) if ".__main__ ->" not in r]
    assert exempt == []


def test_no_file_holds_a_merge_conflict() -> None:
    """A conflict left in a doc (docs/mcp.md held one for a whole stop) is caught here."""
    markers = re.compile(r"^(<{7} |>{7} |={7}$)")
    repo = ROOT.parent
    found = [
        f"{path.relative_to(repo)}:{number}"
        for folder in ("processor", "docs", "tests", "examples", "bench", "scripts", "deploy")
        for path in sorted((repo / folder).rglob("*"))
        if path.suffix in {".py", ".md", ".yaml", ".yml", ".toml", ".tpl", ".txt"}
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if markers.match(line)
    ] + [
        f"{name}:{number}"
        for name in ("README.md", "pyproject.toml", "Makefile")
        for number, line in enumerate((repo / name).read_text(encoding="utf-8").splitlines(), 1)
        if markers.match(line)
    ]
    assert found == [], found
