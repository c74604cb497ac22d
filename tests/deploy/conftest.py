"""Shared helpers of the deployment tests: the repository root, the CLI parser, helm."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from processor.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "toolcall-processor"


def cli_accepts(argv: Sequence[str]) -> str | None:
    """None when ``processor ARGV`` parses with the real CLI parser, else argparse's message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = build_parser().parse_args(list(argv))
    except SystemExit as exc:
        return err.getvalue().strip() or f"exit {exc.code}"
    if not callable(getattr(args, "func", None)):
        return "no command function"
    return None


@pytest.fixture(scope="session")
def helm() -> str:
    """The helm binary: $HELM, else .tools/bin/helm (``make tools`` builds it), else PATH."""
    for candidate in (os.environ.get("HELM"), str(ROOT / ".tools" / "bin" / "helm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("helm")
    if found is None:
        pytest.fail("helm not found: run `make tools` (builds .tools/bin/helm) or set HELM")
    return found
