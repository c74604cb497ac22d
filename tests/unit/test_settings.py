"""Settings: environment prefix, aliases, flags over env, secrets masked, derived values."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from processor.core.policy import Limits
from processor.settings import LimitsSettings, Settings, TopicNames


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("PROCESSOR_") or name == "KAFKA_BOOTSTRAP_SERVERS":
            monkeypatch.delenv(name)


def test_defaults() -> None:
    s = Settings()
    assert s.bootstrap_servers == "127.0.0.1:9092"
    assert s.topic_prefix == "toolcalls."
    assert s.group_id == "toolcall-assemblers"
    assert s.topics.fragments == "toolcalls.fragments"
    assert s.topics.changelog == "toolcalls.assembler-changelog"
    assert s.transactional_id(3) == "toolcall-assembler-3"
    assert s.core_limits() == Limits()
    assert s.keyring_file is None and s.metrics_port is None


def test_environment_with_prefix_and_nested_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_TOPIC_PREFIX", "acme.")
    monkeypatch.setenv("PROCESSOR_GROUP_ID", "g1")
    monkeypatch.setenv("PROCESSOR_LIMITS__MAX_CALL_BYTES", "4096")
    monkeypatch.setenv("PROCESSOR_LIMITS__IDLE_TIMEOUT_SECONDS", "5")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker:9093")
    s = Settings()
    assert s.topics == TopicNames.from_prefix("acme.")
    assert s.group_id == "g1"
    assert s.bootstrap_servers == "broker:9093"
    assert s.core_limits().max_call_bytes == 4096
    assert s.core_limits().idle_timeout_seconds == 5.0


def test_keyword_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_BOOTSTRAP_SERVERS", "from-env:9092")
    monkeypatch.setenv("PROCESSOR_BATCH_MAX_RECORDS", "7")
    s = Settings(bootstrap_servers="from-flag:9092")
    assert s.bootstrap_servers == "from-flag:9092"
    assert s.batch_max_records == 7


def test_limits_settings_mirror_core_limits() -> None:
    assert set(LimitsSettings.model_fields) == {f.name for f in dataclasses.fields(Limits)}
    assert LimitsSettings().to_limits() == Limits()


def test_transaction_timeout_must_be_below_session_timeout() -> None:
    with pytest.raises(ValidationError, match="transaction_timeout_ms"):
        Settings(session_timeout_ms=10_000, transaction_timeout_ms=10_000)
    with pytest.raises(ValidationError, match="commit_timeout_seconds"):
        Settings(transaction_timeout_ms=5_000, commit_timeout_seconds=5)


def test_sasl_needs_complete_credentials() -> None:
    with pytest.raises(ValidationError, match="sasl_mechanism"):
        Settings(security_protocol="SASL_SSL")
    with pytest.raises(ValidationError, match="username and password"):
        Settings(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u")
    with pytest.raises(ValidationError, match="OAUTHBEARER"):
        Settings(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER")


def test_secrets_are_masked_and_passed_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_SASL_PASSWORD", "hunter2")
    s = Settings(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", sasl_username="w"
    )
    assert "hunter2" not in s.masked()
    assert "hunter2" not in repr(s) and "hunter2" not in str(s.masked_dict())
    assert "sasl_password=**********" in s.masked()
    assert "ssl_key_password=None" in s.masked()
    kwargs = s.kafka_client_kwargs()
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "w"
    assert kwargs["sasl_plain_password"] == "hunter2"
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert "ssl_context" not in kwargs


def test_plaintext_client_kwargs_are_minimal() -> None:
    kwargs = Settings(bootstrap_servers="b:1").kafka_client_kwargs()
    assert kwargs == {
        "bootstrap_servers": "b:1",
        "client_id": "toolcall-processor",
        "request_timeout_ms": 30_000,
        "security_protocol": "PLAINTEXT",
    }


async def test_oauthbearer_static_token() -> None:
    s = Settings(
        security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token="s3cr3t-token"
    )
    assert "s3cr3t-token" not in s.masked()
    provider = s.kafka_client_kwargs()["sasl_oauth_token_provider"]
    assert await provider.token() == "s3cr3t-token"


def test_executor_topics_are_named_with_the_others() -> None:
    names = TopicNames.from_prefix("p.")
    assert (names.results, names.executions) == ("p.results", "p.executions")
    assert list(names.all())[-2:] == ["results", "executions"]


def test_executions_retention_is_forever_or_at_least_the_dispatch_retention() -> None:
    assert Settings().executions_retention_ms == -1
    week = 7 * 24 * 3600 * 1000
    assert Settings(executions_retention_ms=week).executions_retention_ms == week
    with pytest.raises(ValidationError, match="executions_retention_ms"):
        Settings(output_retention_ms=week, executions_retention_ms=week - 1)


def test_keyring_file_takes_one_path_several_or_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert Settings(keyring_file=tmp_path / "k.yaml").keyring_file == (tmp_path / "k.yaml",)
    assert Settings(keyring_file=["a.yaml", "keys.d"]).keyring_file == (
        Path("a.yaml"),
        Path("keys.d"),
    )
    assert Settings(keyring_file="").keyring_file is None
    assert Settings(keyring_file=[]).keyring_file is None
    monkeypatch.setenv("PROCESSOR_KEYRING_FILE", f"a.yaml{os.pathsep}keys.d")
    assert Settings().keyring_file == (Path("a.yaml"), Path("keys.d"))
    monkeypatch.setenv("PROCESSOR_KEYRING_FILE", "/etc/processor/keyring.yaml")
    assert Settings().keyring_file == (Path("/etc/processor/keyring.yaml"),)
    assert "keyring_file=['/etc/processor/keyring.yaml']" in Settings().masked()


@pytest.mark.parametrize("command", [["worker"], ["executor", "run", "--handlers", "m:h"]])
def test_keyring_flag_repeats_and_takes_folders(tmp_path: Path, command: list[str]) -> None:
    """``--keyring`` (worker and executor): files and folders of keygen output, merged."""
    from processor.cli import executor as executor_commands
    from processor.cli import worker as runtime_commands
    from processor.cli.parser import build_parser
    from processor.ops.signing import Keyring, keygen

    folder = tmp_path / "keys"
    keygen(folder, "ops-a", "alice", ["acme"])
    keygen(folder, "ops-b", "bob", ["*"])
    _, single = keygen(tmp_path, "ops-c", "carol", ["globex"])
    args = build_parser().parse_args([*command, "--keyring", str(folder), "--keyring", str(single)])
    assert args.keyring == [str(folder), str(single)]
    settings = Settings(keyring_file=args.keyring)
    if command[0] == "worker":
        verifier = runtime_commands._verifier(settings)
    else:
        verifier = executor_commands._verifier(settings, allow_unsigned=False)
    assert isinstance(verifier, Keyring)
    assert all(key_id in verifier for key_id in ("ops-a", "ops-b", "ops-c"))


def test_max_depth_stays_encodable() -> None:
    """Deeper arguments than orjson writes (254 levels) would crash the dispatch encoder."""
    assert Settings(limits={"max_depth": 200}).limits.max_depth == 200
    with pytest.raises(ValidationError):
        Settings(limits={"max_depth": 300})
