"""``scripts/kafka-local stop|kill`` signal only a broker of their own state directory.

Issue 38 item 15: the pid file was trusted when the pid's command line merely contained
``kafka.Kafka``, so a stale pid file whose pid now belongs to another state directory's broker
(pid reuse) stopped that broker. Each test points a state directory's pid file at a live process
whose command line reads like a broker's (``kafka.Kafka <dir>/server.properties``) and runs the
real script against it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT

SCRIPT = ROOT / "scripts" / "kafka-local"


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def _broker_lookalike(started: list[subprocess.Popen[bytes]], props: Path) -> int:
    """A process whose command line names ``kafka.Kafka`` and ``props``, as a broker's does."""
    p = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "kafka.Kafka", str(props)]
    )
    started.append(p)
    threading.Thread(target=p.wait, daemon=True).start()  # reaped when it dies: no zombie
    return p.pid


def _run(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "KAFKA_LOCAL_DIR": str(state),
        "KAFKA_LOCAL_PORT": "1",  # nothing listens there
        "KAFKA_LOCAL_CONTROLLER_PORT": "11",
        "KAFKA_LOCAL_PYTHON": sys.executable,
    }
    return subprocess.run(
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


# (command line, where the pid file lies under the state directory)
LAYOUTS = [(("stop",), "kafka.pid"), (("kill",), "kafka.pid"),
           (("stop", "--nodes", "3", "--node", "2"), "node-2/kafka.pid"),
           (("kill", "--nodes", "3"), "node-2/kafka.pid")]  # fmt: skip


@pytest.mark.parametrize(("command", "pidfile"), LAYOUTS)
def test_another_state_directory_s_broker_is_never_signalled(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], command: tuple[str, ...], pidfile: str
) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    other = _broker_lookalike(processes, theirs / Path(pidfile).parent / "server.properties")
    (ours / pidfile).parent.mkdir(parents=True)
    (ours / pidfile).write_text(f"{other}\n")  # stale: the pid now names the other broker
    result = _run(ours, *command)
    assert result.returncode == 0, result.stderr
    assert processes[0].poll() is None, f"the other broker was signalled: {result.stderr}"


@pytest.mark.parametrize(("command", "pidfile"), LAYOUTS)
def test_this_state_directory_s_broker_is_signalled(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], command: tuple[str, ...], pidfile: str
) -> None:
    ours = tmp_path / "ours"
    pid = _broker_lookalike(processes, ours / Path(pidfile).parent / "server.properties")
    (ours / pidfile).parent.mkdir(parents=True)
    (ours / pidfile).write_text(f"{pid}\n")
    result = _run(ours, *command)
    assert result.returncode == 0, result.stderr
    assert processes[0].wait(timeout=30) != 0  # ended by its signal
    assert not (ours / pidfile).exists()
