"""`processor tools import-mcp` run as a command against a real stdio MCP server that lists what
each test gives it (:mod:`tests.integration.mcp_listing_server`): odd servers and inputs, hidden
text, names the wire refuses, bare names and re-imports onto a reviewed registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("mcp")

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER = f"{sys.executable} -m tests.integration.mcp_listing_server"
OBJECT = {"type": "object", "properties": {"slot": {"type": "string"}}}
SAFE = {"destructiveHint": False}


def listed(name: str, description: str | None = "Book a slot.", **extra: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "inputSchema": OBJECT, "annotations": SAFE}
    if description is not None:
        tool["description"] = description
    tool.update(extra)
    return tool


def run_import(
    tmp: Path,
    tools: list[dict[str, Any]],
    *flags: str,
    server: str = "bookings",
    command: str = SERVER,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    listing = tmp / f"listing-{len(list(tmp.glob('listing-*')))}.json"
    listing.write_text(json.dumps({"name": server, "tools": tools}), encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "processor.cli",
            "tools",
            "import-mcp",
            "--server-command",
            command,
            "--server-env",
            "MCP_LISTING",
            "--server-env",
            "PYTHONPATH",
            *flags,
        ],
        cwd=REPO_ROOT,
        env={
            **os.environ,
            "MCP_LISTING": str(listing),
            "PYTHONPATH": str(REPO_ROOT),
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def registry_doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return doc


# ------------------------------------------------------------------ item 16: odd inputs


def test_a_program_that_is_not_an_mcp_server_is_one_line(tmp_path: Path) -> None:
    done = run_import(tmp_path, [], command=f"{sys.executable} -c \"print('hello there')\"")
    assert done.returncode == 78, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "is not an MCP server" in lines[0]
    assert "hello there" not in done.stderr and "Traceback" not in done.stderr


def test_a_server_without_a_name_is_told_on_stderr_not_the_registry_stream(
    tmp_path: Path,
) -> None:
    done = run_import(tmp_path, [listed("book_slot")], "-o", "-", server="")
    assert done.returncode == 78, done.stderr
    assert done.stdout == ""
    assert "the server reported no name" in done.stderr
    assert "--server-name" in done.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [("PROCESSOR_MCP_MAX_RESULT_BYTES", "-1"), ("PROCESSOR_MCP_CALL_TIMEOUT_SECONDS", "inf")],
)
def test_a_settings_error_names_the_real_variable(
    tmp_path: Path, variable: str, value: str
) -> None:
    done = run_import(tmp_path, [listed("book_slot")], env={variable: value})
    assert done.returncode == 78, done.stderr
    assert variable in done.stderr
    assert "PROCESSOR_MAX_RESULT_BYTES" not in done.stderr
    assert "PROCESSOR_CALL_TIMEOUT_SECONDS" not in done.stderr


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "0"])
def test_a_connect_timeout_that_is_no_positive_duration_is_a_usage_error(
    tmp_path: Path, timeout: str
) -> None:
    done = run_import(tmp_path, [listed("book_slot")], f"--connect-timeout={timeout}")
    assert done.returncode == 2, done.stderr
    assert "--connect-timeout" in done.stderr
