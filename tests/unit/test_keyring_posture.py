"""An empty keyring never means "no signature checks"; no keyring means "refuse", by default.

Issue 30 item 1: a keyring whose files hold ``keys: []`` loaded, the ``Keyring`` was falsy, and
``verifier or AllowUnsigned()`` in the worker and the Assembler then applied unsigned operator
commands (an unsigned ``tenant.resumed`` un-stopped a stopped tenant). Now an empty keyring is
refused at load (exit 78 from the CLI), a verifier is never tested for truth, and a worker
without a keyring refuses and audits every operator command unless started with the
development flag ``--allow-unsigned-commands`` (warned, and ``/metrics`` says so).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from processor.cli import worker as worker_commands
from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned, NoKeyring
from processor.core.errors import ConfigurationError
from processor.core.events import Audit, Dispatch, TenantResumed, TenantStopped
from processor.core.policy import Limits
from processor.exits import ExitCode
from processor.observability import metrics
from processor.ops.signing import Keyring, OperatorSigner, generate_keypair
from processor.settings import Settings
from tests.unit.cli_runs import TOOLS, assert_one_line, run
from tests.unit.scenario import Call, registry, turn_started

NOW = 1_000.0
PEM, PUBLIC = generate_keypair()
SIGNER = OperatorSigner(PEM, "k1", "oncall")


def _entry() -> dict[str, Any]:
    return {"key_id": "k1", "operator": "oncall", "public_key": PUBLIC, "tenants": ["acme"]}


def _command(cls: type[Any], command_id: str, tenant: str = "acme") -> Any:
    return cls(
        tenant=tenant, command_id=command_id, issued_by="oncall", issued_at=NOW,
        expires_at=NOW + 300, reason="incident",
    )  # fmt: skip


def _dispatches(assembler: Assembler, call_id: str, tenant: str = "acme") -> int:
    outputs = assembler.handle(turn_started(tenant=tenant), NOW + 5)
    for event in Call(call_id=call_id, tenant=tenant, ts=NOW + 5).stream('{"city": "Oslo"}'):
        outputs += assembler.handle(event, NOW + 5)
    return len([o for o in outputs if isinstance(o, Dispatch)])


def test_an_empty_keyring_does_not_let_an_unsigned_resume_through() -> None:
    """The attack of the issue: a signed stop, then the keyring emptied (its last key leaked)
    and the worker restarted; an unsigned resume must not un-stop the tenant."""
    full = Keyring.from_document({"keys": [_entry()]}, source="ring")
    before = Assembler(registry(), Limits(), verifier=full)
    [stopped] = before.handle(SIGNER.sign(_command(TenantStopped, "s1")), NOW)
    assert isinstance(stopped, Audit) and stopped.rejection is None
    after = Assembler(registry(), Limits(), verifier=Keyring([], source="emptied"))
    for change in before.drain_changes():
        assert after.restore(change.key, change.value) is None
    [audit] = after.handle(_command(TenantResumed, "r1"), NOW + 1)
    assert isinstance(audit, Audit) and audit.rejection == "unsigned"
    [stop] = after.handle(_command(TenantStopped, "s2", tenant="globex"), NOW + 2)
    assert isinstance(stop, Audit) and stop.rejection == "unsigned"
    assert _dispatches(after, "c1") == 0  # acme is still stopped
    assert _dispatches(after, "c2", tenant="globex") == 1  # and globex was never stopped


def test_the_assembler_without_a_verifier_refuses_operator_commands() -> None:
    assembler = Assembler(registry(), Limits())
    [audit] = assembler.handle(_command(TenantStopped, "s1"), NOW)
    assert isinstance(audit, Audit) and audit.rejection == "unsigned"
    [signed] = assembler.handle(SIGNER.sign(_command(TenantStopped, "s2")), NOW)
    assert isinstance(signed, Audit) and signed.rejection == "unknown_key"
    assert _dispatches(assembler, "c1") == 1  # nobody was stopped


def test_no_keyring_refuses_and_an_explicit_allow_applies() -> None:
    cmd = _command(TenantStopped, "s1")
    assert NoKeyring().verify(cmd, NOW) == "unsigned"
    assert NoKeyring().verify(SIGNER.sign(cmd), NOW) == "unknown_key"
    assert AllowUnsigned().verify(cmd, NOW) is None


def _write(path: Path, doc: object) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_an_empty_keyring_is_refused_at_load(tmp_path: Path) -> None:
    folder = tmp_path / "ring"
    folder.mkdir()
    _write(folder / "a.keyring.yaml", {"keys": []})
    _write(folder / "b.keyring.yaml", {"keys": []})
    for paths in ((folder,), (folder / "a.keyring.yaml",)):
        with pytest.raises(ConfigurationError, match="holds no key"):
            Keyring.load(*paths)
    _write(folder / "c.keyring.yaml", {"keys": [_entry()]})  # one key left: fine
    assert len(Keyring.load(folder)) == 1


def test_the_cli_exits_78_on_an_empty_keyring(tmp_path: Path) -> None:
    folder = tmp_path / "ring"
    folder.mkdir()
    _write(folder / "ops-1.keyring.yaml", {"keys": []})
    executor = ["executor", "run", "--handlers", "examples.book_slot_executor:handlers"]
    for argv in (["worker", "--tools", TOOLS, "--keyring", str(folder)], [*executor]):
        env = {"PROCESSOR_KEYRING_FILE": str(folder)} if argv[0] == "executor" else None
        assert_one_line(run(*argv, env=env), ExitCode.CONFIG, "holds no key", str(folder))


def _settings(**values: Any) -> Settings:
    clean = {k: v for k, v in os.environ.items() if k.startswith("PROCESSOR_")}
    for key in clean:
        os.environ.pop(key)
    try:
        return Settings(**values)
    finally:
        os.environ.update(clean)


def _gauge() -> float | None:
    return REGISTRY.get_sample_value("toolcall_unsigned_commands_allowed")


def test_the_worker_refuses_by_default_and_allows_only_when_asked() -> None:
    metrics.UNSIGNED_COMMANDS_ALLOWED.set(0)
    assert isinstance(worker_commands._verifier(_settings()), NoKeyring)
    assert _gauge() == 0.0
    try:
        allowed = worker_commands._verifier(_settings(allow_unsigned_commands=True))
        assert isinstance(allowed, AllowUnsigned)
        assert _gauge() == 1.0
    finally:
        metrics.UNSIGNED_COMMANDS_ALLOWED.set(0)


def test_the_worker_warns_at_start_only_with_the_development_flag() -> None:
    plain = run("worker", "--tools", TOOLS)
    assert plain.returncode == ExitCode.UNAVAILABLE, plain.stderr
    assert "WITHOUT SIGNATURE CHECKS" not in plain.stderr
    flagged = run("worker", "--tools", TOOLS, "--allow-unsigned-commands")
    assert flagged.returncode == ExitCode.UNAVAILABLE, flagged.stderr
    assert "WARNING: --allow-unsigned-commands" in flagged.stderr
    by_setting = run("worker", "--tools", TOOLS, env={"PROCESSOR_ALLOW_UNSIGNED_COMMANDS": "1"})
    assert "WARNING: --allow-unsigned-commands" in by_setting.stderr
