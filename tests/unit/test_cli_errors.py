"""Every command fails with one clear line and a documented exit code, never a traceback.

Each command runs as a subprocess, as a user runs it, with one bad input: no broker (at
127.0.0.1:1, nothing listens there; worker and executor wait PROCESSOR_STARTUP_TIMEOUT_SECONDS=1
first), a missing or unreadable file, a bad setting, a bad registry or keyring, a metrics port in
use. The exit code, the cause named on stderr and the absence of any traceback or resource
warning ("Unclosed AIOKafkaProducer") are asserted.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.cli import errors as cli_errors
from processor.exits import ExitCode
from tests.unit.cli_runs import NO_BROKER, ROOT, TOOLS, assert_one_line, run

SSE = str(ROOT / "tests" / "adapters" / "data" / "openai-chat" / "single-tool-gpt4o.sse")
ADAPT = ["adapt", "--provider", "openai-chat", "--tenant", "t", "--turn", "u", "--actor", "a"]
EXECUTOR = ["executor", "run", "--handlers", "examples.book_slot_executor:handlers"]
UNSIGNED = "--allow-unsigned-operators"
KAFKA_CAUSE = f"cannot reach Kafka at {NO_BROKER} (PROCESSOR_BOOTSTRAP_SERVERS)"
WAITED_CAUSE = f"cannot reach Kafka at {NO_BROKER} after 1 s (PROCESSOR_BOOTSTRAP_SERVERS)"


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def bad_keyring(tmp_path: Path) -> str:
    path = tmp_path / "bad.keyring.yaml"
    path.write_text("keys: 5\n")
    return str(path)


@pytest.fixture
def bad_registry(tmp_path: Path) -> str:
    path = tmp_path / "bad-tools.yaml"
    path.write_text("tools:\n  - name: broken\n    parameters: {type: string}\n")
    return str(path)


# ----------------------------------------------------------------------------- no broker


@pytest.mark.parametrize(
    ("argv", "cause"),
    [
        (["worker", "--tools", TOOLS], WAITED_CAUSE),
        ([*EXECUTOR, UNSIGNED], WAITED_CAUSE),
        (["ctl", "start-turn", "--tenant", "t", "--turn", "u", "--actor", "a"], "--command-id"),
        (["ctl", "cancel-turn", "--tenant", "t", "--turn", "u"], KAFKA_CAUSE),
        (["topics", "describe"], KAFKA_CAUSE),
        (["topics", "create"], KAFKA_CAUSE),
        (["tail", "dispatch"], KAFKA_CAUSE),
        (["audit"], KAFKA_CAUSE),
        ([*ADAPT, "--publish", SSE], KAFKA_CAUSE),
    ],
    ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else None,
)
def test_no_broker_is_one_line_exit_69(argv: list[str], cause: str) -> None:
    result = run(*argv)
    assert_one_line(result, ExitCode.UNAVAILABLE, cause, "`make kafka-start`")


def test_worker_logs_each_attempt_with_the_address() -> None:
    result = run("worker", "--tools", TOOLS, env={"PROCESSOR_STARTUP_TIMEOUT_SECONDS": "2"})
    attempts = [line for line in result.stderr.splitlines() if "kafka unreachable" in line]
    assert len(attempts) >= 2, result.stderr
    assert all(f'"bootstrap_servers":"{NO_BROKER}"' in line for line in attempts)
    assert result.returncode == ExitCode.UNAVAILABLE


# ----------------------------------------------------------------------------- files


@pytest.mark.parametrize(
    ("argv", "cause"),
    [
        ([*ADAPT, "missing.sse"], "cannot read missing.sse"),
        ([*ADAPT, "tests"], "cannot read tests: Is a directory"),
        (["replay", "--tools", TOOLS, "missing.jsonl"], "cannot read missing.jsonl"),
        (["replay", "--tools", "missing.yaml", "-"], "missing.yaml: cannot read"),
        (["replay", "--tools", "tests", "-"], "tests: cannot read"),
        (["worker", "--tools", "missing.yaml"], "missing.yaml: cannot read"),
        ([*EXECUTOR, UNSIGNED, "--tools", "missing.yaml"], "missing.yaml: cannot read"),
        (["worker", "--tools", TOOLS, "--keyring", "missing.keyring.yaml"], "missing.keyring"),
        (
            ["ctl", "stop-tenant", "--tenant", "t", "--reason", "r", "--key", "missing.pem",
             "--key-id", "k", "--operator", "o"],
            "missing.pem: cannot read",
        ),
    ],
    ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else None,
)
def test_missing_or_unreadable_file_exits_66(argv: list[str], cause: str) -> None:
    assert_one_line(run(*argv), ExitCode.NO_INPUT, cause, "check the path")


# ----------------------------------------------------------------------------- configuration


def test_bad_setting_names_the_variable() -> None:
    for argv in (["worker", "--tools", TOOLS], [*EXECUTOR, UNSIGNED], ["tail", "dispatch"]):
        result = run(*argv, env={"PROCESSOR_BATCH_MAX_RECORDS": "zero"})
        assert_one_line(result, ExitCode.CONFIG, "PROCESSOR_BATCH_MAX_RECORDS", "invalid settings")


def test_settings_that_contradict_each_other_are_one_line() -> None:
    result = run("worker", "--tools", TOOLS, env={"PROCESSOR_TRANSACTION_TIMEOUT_MS": "60000"})
    assert_one_line(result, ExitCode.CONFIG, "transaction_timeout_ms", "session_timeout_ms")


def test_bad_registry(bad_registry: str) -> None:
    for argv in (
        ["replay", "--tools", bad_registry, "-"],
        ["worker", "--tools", bad_registry],
        [*EXECUTOR, UNSIGNED, "--tools", bad_registry],
    ):
        assert_one_line(run(*argv), ExitCode.CONFIG, f"{bad_registry}: tool 'broken'", "--tools")


def test_worker_without_a_registry() -> None:
    assert_one_line(run("worker"), ExitCode.CONFIG, "a tools file is required", "--tools")


def test_bad_keyring(bad_keyring: str) -> None:
    for argv in (
        ["worker", "--tools", TOOLS, "--keyring", bad_keyring],
        [*EXECUTOR, "--keyring", bad_keyring],
    ):
        assert_one_line(run(*argv), ExitCode.CONFIG, "invalid_keyring", bad_keyring)


def test_executor_without_a_keyring() -> None:
    assert_one_line(run(*EXECUTOR), ExitCode.CONFIG, "missing_keyring", "PROCESSOR_KEYRING_FILE")


def test_metrics_port_in_use(busy_port: int) -> None:
    flags = ["--metrics-port", str(busy_port)]
    env = {"PROCESSOR_METRICS_HOST": "127.0.0.1"}
    for argv in (["worker", "--tools", TOOLS, *flags], [*EXECUTOR, UNSIGNED, *flags]):
        result = run(*argv, env=env)
        assert_one_line(result, ExitCode.CONFIG, "already in use", f":{busy_port}", "--metrics-port")


def test_adapt_bad_turn_context_is_usage() -> None:
    result = run("adapt", "--provider", "openai-chat", "--tenant", "", "--turn", "u", "--actor",
                 "a", SSE)  # fmt: skip
    assert_one_line(result, ExitCode.USAGE, "--tenant")


# ----------------------------------------------------------------------------- debug and bugs


def test_debug_shows_the_traceback() -> None:
    for argv, env in (
        (["--debug", "replay", "--tools", "missing.yaml", "-"], {}),
        (["replay", "--tools", "missing.yaml", "-", "--debug"], {}),
        (["replay", "--tools", "missing.yaml", "-"], {"PROCESSOR_LOG_LEVEL": "DEBUG"}),
    ):
        result = run(*argv, env=env)
        assert result.returncode == ExitCode.NO_INPUT
        assert "Traceback" in result.stderr
        assert "missing.yaml: cannot read" in result.stderr.strip().splitlines()[-1]


def test_an_unexpected_exception_is_one_line_and_a_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def buggy() -> int:
        raise KeyError("some_key")

    code = cli_errors.run("processor demo", buggy, debug=False)
    err = capsys.readouterr().err
    assert code == ExitCode.SOFTWARE
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "internal error: KeyError" in err
    report = Path(err.split("full report in ")[1].split(")")[0])
    try:
        assert "Traceback" in report.read_text() and "some_key" in report.read_text()
    finally:
        report.unlink()


def test_interrupt_exits_130(capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    assert cli_errors.run("processor demo", interrupted, debug=False) == ExitCode.INTERRUPTED
    assert capsys.readouterr().err == "processor demo: interrupted\n"


def test_usage_errors_exit_2() -> None:
    result = run("replay")
    assert result.returncode == ExitCode.USAGE
    assert "--tools" in result.stderr and "Traceback" not in result.stderr


# ----------------------------------------------------------------------------- lazy start


def test_the_parser_imports_only_the_command_it_runs() -> None:
    code = (
        "import sys; import processor.cli.parser as c; c.build_parser(sys.argv[1:]);"
        "print(sorted(m for m in ('pydantic', 'aiokafka', 'jsonschema') if m in sys.modules))"
    )
    for argv in ([], ["adapt", "--help"], ["replay"], ["states"], ["schemas"]):
        result = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True
        )
        assert result.stdout.strip() == "[]", (argv, result.stdout)


def test_the_command_table_matches_the_registered_commands() -> None:
    from processor.cli.parser import COMMANDS, build_parser

    parser = build_parser()  # every module registers its commands
    actions = [a for a in parser._actions if a.dest == "command"]
    registered = {c.dest: c.help for c in actions[0]._choices_actions}
    assert registered == {name: text for name, (_, text) in COMMANDS.items()}
