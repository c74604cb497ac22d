"""The ``processor`` command run as a user runs it, for unit tests: a subprocess with no broker
to reach (127.0.0.1:1, nothing listens there; worker and executor wait
PROCESSOR_STARTUP_TIMEOUT_SECONDS=1 first), and the check that it failed with one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
TOOLS = str(ROOT / "examples" / "tools.yaml")
NO_BROKER = "127.0.0.1:1"


def run(
    *argv: str, env: dict[str, str] | None = None, input: bytes = b""
) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "PROCESSOR_BOOTSTRAP_SERVERS": NO_BROKER,
        "KAFKA_BOOTSTRAP_SERVERS": NO_BROKER,
        "PROCESSOR_STARTUP_TIMEOUT_SECONDS": "1",
        "PROCESSOR_TOPIC_PREFIX": "cli-errors-test.",
        **(env or {}),
    }
    if "PROCESSOR_LOG_LEVEL" not in (env or {}):
        environment.pop("PROCESSOR_LOG_LEVEL", None)
    result = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-m", "processor.cli", *argv],
        input=input,
        capture_output=True,
        cwd=ROOT,
        env=environment,
        timeout=60,
        check=False,
    )
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
    )


def assert_one_line(result: subprocess.CompletedProcess[str], code: int, *cause: str) -> None:
    err = result.stderr
    assert result.returncode == code, err
    for text in cause:
        assert text in err, err
    for noise in ("Traceback", "Unclosed", "ResourceWarning", "Exception ignored"):
        assert noise not in err, err
    final = err.strip().splitlines()[-1]
    assert final.startswith("processor "), err  # the boundary's line comes last
