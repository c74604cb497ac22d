"""Signed operator commands through ``processor ctl`` and ``processor audit``, end to end.

A real broker, an assembler worker subprocess holding a keyring, and an in-process executor
holding the same keyring. Commands are written by the ``ctl`` command code itself (fan-out to
every control partition for tenant- and tool-wide commands).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from processor.cli import ctl as ctl_cli
from processor.cli import errors as cli_errors
from processor.cli import tail as tail_cli
from processor.core.events import TenantStopped, decode_input
from processor.executor.records import ExecutionResult
from processor.exits import ExitCode
from processor.kafka.tail import read_records
from processor.ops import audit as audit_cli
from processor.ops.ctl import ControlWriter, sign_command
from processor.ops.signing import Keyring, OperatorSigner, generate_keypair
from processor.registry_file import load_registry
from tests.integration.conftest import Runtime, WorkerProcess, call_events, wait_until
from tests.integration.executor_harness import (
    Executor,
    Recorder,
    group_of,
    results,
)

pytestmark = pytest.mark.integration

TOOLS = """
tools:
  - name: get_weather
    version: "2"
    parameters:
      type: object
      properties:
        city: {type: string, minLength: 1}
      additionalProperties: false
  - name: book_slot
    version: "1"
    requires_confirmation: true
    confirmation_ttl_seconds: 300
    parameters:
      type: object
      required: [date, time, party_size]
      properties:
        date: {type: string, format: date}
        time: {type: string, pattern: "^[0-2][0-9]:[0-5][0-9]$"}
        party_size: {type: integer, minimum: 1, maximum: 20}
      additionalProperties: false
  - name: hold_table
    version: "1"
    requires_confirmation: true
    confirmation_ttl_seconds: 2
    parameters:
      type: object
      properties:
        party_size: {type: integer}
      additionalProperties: false
"""
BOOKING = '{"date": "2031-05-04", "time": "19:30", "party_size": 4}'


# ---------------------------------------------------------------------------- CLI in-process


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="processor")
    sub = parser.add_subparsers(dest="command", required=True)
    ctl_cli.register(sub)
    tail_cli.register_audit(sub)
    return parser


async def cli(rt: Runtime, *argv: str) -> tuple[int, str]:
    """Run ``processor <argv>`` (ctl / audit) with this runtime's connection; (code, stdout)."""
    conn = ["--bootstrap-servers", rt.settings.bootstrap_servers, "--topic-prefix", rt.prefix]
    head = 2 if argv[0] == "ctl" else 1
    full = [*argv[:head], *([] if argv[1:2] == ("keygen",) else conn), *argv[head:]]
    args = _parser().parse_args(full)

    def run() -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):  # through the CLI's error boundary, as `processor`
            code = cli_errors.run("processor", lambda: int(args.func(args)), debug=False)
        return code, out.getvalue()

    return await asyncio.to_thread(run)


@dataclass
class Operators:
    """Two operators: alice (tenant acme only) and root (every tenant, global commands)."""

    folder: Path
    keyring: Path

    def flags(self, who: str = "alice") -> list[str]:
        key_id = {"alice": "ops-alice", "root": "ops-root"}[who]
        return ["--key", str(self.folder / f"{key_id}.pem"), "--key-id", key_id, "--operator", who]

    def signer(self, who: str = "alice") -> OperatorSigner:
        key_id = {"alice": "ops-alice", "root": "ops-root"}[who]
        return OperatorSigner((self.folder / f"{key_id}.pem").read_bytes(), key_id, who)


async def make_operators(rt: Runtime, folder: Path) -> Operators:
    docs = []
    for key_id, operator, tenants in (("ops-alice", "alice", "acme"), ("ops-root", "root", "*")):
        code, out = await cli(
            rt,
            "ctl",
            "keygen",
            "--key-id",
            key_id,
            "--operator",
            operator,
            "--tenants",
            tenants,
            "--out",
            str(folder),
        )
        assert code == 0, out
        docs.append(yaml.safe_load((folder / f"{key_id}.keyring.yaml").read_text()))
    keyring = folder / "keyring.yaml"
    keyring.write_text(yaml.safe_dump({"keys": [k for d in docs for k in d["keys"]]}))
    return Operators(folder, keyring)


@dataclass
class Deployment:
    rt: Runtime
    operators: Operators
    worker: WorkerProcess
    recorder: Recorder
    executor: Executor
    tools_file: Path

    def start_worker(self, name: str) -> WorkerProcess:
        self.worker = self.rt.start_worker(
            name,
            PROCESSOR_TOOLS_FILE=str(self.tools_file),
            PROCESSOR_KEYRING_FILE=str(self.operators.keyring),
        )
        return self.worker


@contextlib.asynccontextmanager
async def deployment(
    rt: Runtime, tmp_path: Path, *, start_executor: bool = True
) -> AsyncIterator[Deployment]:
    """Keys, a keyring, a worker (subprocess) and an executor (in-process) sharing it."""
    operators = await make_operators(rt, tmp_path / "keys")
    tools_file = tmp_path / "ctl-tools.yaml"
    tools_file.write_text(TOOLS)
    recorder = Recorder("get_weather", "book_slot", "hold_table", requires_confirmation=None)
    executor = Executor(
        rt.settings,
        recorder.handlers,
        group=group_of(rt),
        verifier=Keyring.load(operators.keyring),
        registry=load_registry(tools_file),
    )
    dep = Deployment(rt, operators, None, recorder, executor, tools_file)  # type: ignore[arg-type]
    worker = dep.start_worker("w1")
    if start_executor:
        await asyncio.gather(worker.wait_ready(90), executor.start())
    else:
        await worker.wait_ready(90)
    try:
        yield dep
    finally:
        if executor.task is not None:
            await executor.stop()


async def audit_json(rt: Runtime, *filters: str) -> list[dict[str, Any]]:
    code, out = await cli(rt, "audit", "--json", *filters)
    assert code == 0
    return [orjson.loads(line) for line in out.splitlines() if line.strip()]


async def wait_audit(
    rt: Runtime, command_id: str, outcome: str, timeout: float = 60, copies: int = 1
) -> dict:
    """The merged audit entry of a command, once ``copies`` partitions have reported it (each
    worker partition commits its own audit record of a fanned-out command)."""

    async def check() -> dict | None:
        for entry in await audit_json(rt, "--command-id", command_id):
            if entry["outcome"] == outcome and entry["copies"] >= copies:
                return entry
        return None

    found: dict[str, Any] = await wait_until(
        check, timeout=timeout, what=f"audit {outcome} of {command_id}"
    )
    return found


async def start_turn(rt: Runtime, tenant: str, turn: str, actor: str = "user-1") -> None:
    code, _ = await cli(
        rt, "ctl", "start-turn", "--tenant", tenant, "--turn", turn, "--actor", actor
    )
    assert code == 0


async def calls_of(rt: Runtime, role: str, turn: str) -> list[dict[str, Any]]:
    return [r for r in await rt.read(role) if r["turn_id"] == turn]


async def wait_status(rt: Runtime, turn: str, state: str, timeout: float = 60) -> dict:
    async def check() -> dict | None:
        for s in await calls_of(rt, "status", turn):
            if s["state"] == state:
                return s
        return None

    found: dict[str, Any] = await wait_until(check, timeout=timeout, what=f"{turn} {state}")
    return found


async def result_for(rt: Runtime, turn: str, timeout: float = 60) -> ExecutionResult:
    async def check() -> ExecutionResult | None:
        return next((r for r in await results(rt.settings) if r.turn_id == turn), None)

    found: ExecutionResult = await wait_until(check, timeout=timeout, what=f"result of {turn}")
    return found


def written(out: str) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(out.strip().splitlines()[-1])
    return data


# ---------------------------------------------------------------------------- tests


@pytest.mark.partitions(3)
async def test_forged_unsigned_expired_replayed_and_cross_tenant_commands_change_nothing(
    runtime: Runtime, tmp_path: Path
) -> None:
    rt = runtime
    async with deployment(rt, tmp_path) as dep:
        ops = dep.operators
        rejected: dict[str, str] = {}
        async with ControlWriter(rt.settings) as writer:
            unsigned = TenantStopped(
                command_id="unsigned-1",
                issued_by="alice",
                issued_at=time.time(),
                expires_at=time.time() + 60,
                reason="no signature",
                tenant="acme",
            )
            forged = sign_command(
                _forger(),
                TenantStopped,
                reason="forged",
                ttl_seconds=60,
                now=time.time(),
                command_id="forged-1",
                tenant="acme",
            )
            expired = sign_command(
                ops.signer("alice"),
                TenantStopped,
                reason="too late",
                ttl_seconds=60,
                now=time.time() - 600,
                command_id="expired-1",
                tenant="acme",
            )
            for command in (unsigned, forged, expired):
                w = await writer.write(command)
                assert len(w.copies) == rt.partitions  # fanned out to every partition
            rejected |= {"unsigned-1": "unsigned", "forged-1": "bad_signature"}
            rejected |= {"expired-1": "expired"}

        # alice may not command globex, nor issue global commands
        code, out = await cli(
            rt, "ctl", "stop-tenant", "--tenant", "globex", "--reason", "not mine",
            "--command-id", "cross-1", "--json", *ops.flags("alice"),
        )  # fmt: skip
        assert code == 0 and written(out)["partitions"] == list(range(rt.partitions))
        rejected["cross-1"] = "out_of_scope"
        code, _ = await cli(
            rt, "ctl", "disable-tool", "--tool", "get_weather", "--all-tenants",
            "--reason", "global", "--command-id", "global-1", *ops.flags("alice"),
        )  # fmt: skip
        assert code == 0
        rejected["global-1"] = "out_of_scope"

        # a valid disable, a valid enable, then the disable replayed (same id and signature)
        code, _ = await cli(
            rt, "ctl", "disable-tool", "--tool", "get_weather", "--tenant", "acme",
            "--reason", "flaky", "--command-id", "disable-1", *ops.flags("alice"),
        )  # fmt: skip
        assert code == 0
        await wait_audit(rt, "disable-1", "applied")
        code, _ = await cli(
            rt, "ctl", "enable-tool", "--tool", "get_weather", "--tenant", "acme",
            "--reason", "fixed", "--command-id", "enable-1", *ops.flags("alice"),
        )  # fmt: skip
        assert code == 0
        await wait_audit(rt, "enable-1", "applied")
        replay = await _original_command(rt, "disable-1")
        async with ControlWriter(rt.settings) as writer:
            await writer.write(replay)
        # a safety command repeated identically is a no-op: audited duplicate, the tool stays on
        duplicate = await wait_audit(rt, "disable-1", "duplicate", copies=rt.partitions)
        assert duplicate["affected"] == [] and duplicate["rejection"] is None

        for command_id, code_ in rejected.items():
            # every worker partition audits its copy
            entry = await wait_audit(rt, command_id, "rejected", copies=rt.partitions)
            assert entry["rejection"] == code_, command_id
            assert entry["copies"] == rt.partitions
            assert entry["affected"] == []

        # nothing was applied: both tenants' calls dispatch and execute
        for tenant in ("acme", "globex"):
            await start_turn(rt, tenant, f"{tenant}-after")
            await rt.publish(call_events(tenant, f"{tenant}-after", "call_0", '{"city": "Oslo"}'))
        for tenant in ("acme", "globex"):
            result = await result_for(rt, f"{tenant}-after")
            assert result.outcome == "succeeded"

        listing = await audit_json(rt, "--outcome", "rejected")
        assert {e["command_id"]: e["rejection"] for e in listing} == rejected
        code, text = await cli(rt, "audit", "--outcome", "rejected", "--tenant", "globex")
        assert code == 0 and "rejection=out_of_scope" in text and "cross-1" in text
        assert "Oslo" not in text


def _forger() -> OperatorSigner:
    """A signer that claims alice's key id but holds another private key."""
    pem, _ = generate_keypair()
    return OperatorSigner(pem, "ops-alice", "alice")


async def _original_command(rt: Runtime, command_id: str) -> Any:
    """The exact record ctl wrote (read back from control), for a byte-for-byte replay."""
    consumer = AIOKafkaConsumer(group_id=None, **rt.settings.kafka_client_kwargs())
    await consumer.start()
    try:
        tp = TopicPartition(rt.topics.control, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    event = decode_input(record.value)
                    if getattr(event, "command_id", None) == command_id:
                        return event
    finally:
        await consumer.stop()
    raise AssertionError(f"{command_id} not found in control")


@pytest.mark.partitions(3)
async def test_emergency_stop_during_collecting_and_terminal_validation(
    runtime: Runtime, tmp_path: Path
) -> None:
    rt = runtime
    async with deployment(rt, tmp_path) as dep:
        ops = dep.operators
        # collecting: everything but the terminal event
        await start_turn(rt, "acme", "collecting")
        collecting = call_events("acme", "collecting", "call_0", '{"city": "Oslo"}')
        await rt.publish(collecting[:-2])
        # terminal validation: the call ended, its turn is not bound yet (validation waits)
        validating = call_events("acme", "validating", "call_0", '{"city": "Rome"}')
        await rt.publish(validating)
        # awaiting confirmation: validated, a proposal out
        await start_turn(rt, "acme", "proposed")
        await rt.publish(call_events("acme", "proposed", "call_0", BOOKING, tool="book_slot"))
        # a quarantined response, while collecting
        await start_turn(rt, "acme", "held")
        held = call_events("acme", "held", "call_0", '{"city": "Lima"}', response="resp-H")
        await rt.publish(held[:-2])
        await wait_status(rt, "collecting", "preparing")
        await wait_status(rt, "validating", "preparing")
        await wait_status(rt, "held", "preparing")
        [proposal] = await wait_until(
            lambda: calls_of(rt, "proposals", "proposed"), timeout=60, what="proposal"
        )
        await rt.wait_caught_up()

        code, out = await cli(
            rt, "ctl", "stop-tenant", "--tenant", "acme", "--reason", "incident 7",
            "--command-id", "stop-1", "--json", *ops.flags("alice"),
        )  # fmt: skip
        assert code == 0, out
        code, out = await cli(
            rt, "ctl", "quarantine-response", "--tenant", "acme", "--turn", "held",
            "--response", "resp-H", "--reason", "prompt injection suspected",
            "--command-id", "hold-1", *ops.flags("alice"),
        )  # fmt: skip
        assert code == 0, out
        stop = await wait_audit(rt, "stop-1", "applied", copies=rt.partitions)
        affected = {(k["turn_id"], k["call_id"]) for k in stop["affected"]}
        assert affected >= {
            ("collecting", "call_0"),
            ("validating", "call_0"),
            ("proposed", "call_0"),
        }
        assert stop["reason"] == "incident 7" and stop["issued_by"] == "alice"

        # the rest arrives after the stop: terminal event, binding, confirmation
        await rt.publish(collecting[-2:])
        await start_turn(rt, "acme", "validating")
        await rt.publish(held[-2:])
        code, _ = await cli(
            rt, "ctl", "confirm", "--tenant", "acme", "--turn", "proposed",
            "--response", proposal["response_id"], "--item", proposal["item_id"],
            "--call", proposal["call_id"], "--actor", "user-1",
            "--digest", proposal["args_digest"],
        )  # fmt: skip
        assert code == 0
        await rt.wait_caught_up()

        for turn in ("collecting", "validating", "proposed"):
            status = await wait_status(rt, turn, "cancelled")
            assert status["retry_possible"] is False
            assert "person will follow up" in status["message"]  # a truthful hand-off
        ledger = {r["turn_id"]: r for r in await rt.read("ledger")}
        assert ledger["collecting"]["terminal_reason"] == "tenant_stopped"
        assert ledger["held"]["terminal_reason"] in ("tenant_stopped", "quarantined")

        # resume; a subsequent turn is unaffected
        code, _ = await cli(
            rt, "ctl", "resume-tenant", "--tenant", "acme", "--reason", "incident over",
            "--command-id", "resume-1", *ops.flags("alice"),
        )  # fmt: skip
        assert code == 0
        await wait_audit(rt, "resume-1", "applied", copies=rt.partitions)
        await start_turn(rt, "acme", "after")
        await rt.publish(call_events("acme", "after", "call_0", '{"city": "Bern"}'))
        assert (await result_for(rt, "after")).outcome == "succeeded"
        assert await rt.dispatches() and {d["turn_id"] for d in await rt.dispatches()} == {"after"}

        # restart the worker: stopped and quarantined buffers stay terminal when the adapter
        # replays everything; a new turn starts with a fresh call identity
        dep.worker.terminate()
        assert await dep.worker.wait_exit(30) == 0
        worker = dep.start_worker("w2")
        await worker.wait_ready(90)
        for events in (collecting, validating, held):
            await rt.publish(events)
        await start_turn(rt, "acme", "fresh")
        await rt.publish(call_events("acme", "fresh", "call_0", '{"city": "Oslo"}'))
        assert (await result_for(rt, "fresh")).outcome == "succeeded"
        await rt.wait_caught_up()
        assert {d["turn_id"] for d in await rt.dispatches()} == {"after", "fresh"}

        ran = {c.key.turn_id for c in dep.recorder.calls}
        assert ran == {"after", "fresh"}  # no executor ever received a stopped call

        text = orjson.dumps(await audit_json(rt, "--tenant", "acme")).decode()
        for secret in ("Oslo", "Rome", "Lima", "19:30", "2031-05-04"):
            assert secret not in text  # the audit never reveals arguments
        code, listing = await cli(rt, "audit", "--command-type", "tenant.stopped")
        assert code == 0 and "stop-1" in listing and "incident 7" in listing


# ---------------------------------------------------------------------------- no broker needed


async def test_operator_commands_refuse_to_run_unsigned(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (ctl_cli.ENV_KEY_FILE, ctl_cli.ENV_KEY_ID, ctl_cli.ENV_OPERATOR):
        monkeypatch.delenv(name, raising=False)
    code, out = await cli(runtime, "ctl", "stop-tenant", "--tenant", "acme", "--reason", "x")
    assert code == ExitCode.CONFIG and out == ""
    assert "operator commands are signed" in capsys.readouterr().err
    assert [r async for r in read_records(runtime.settings, runtime.topics.control)] == []
    with pytest.raises(SystemExit):  # a reason is required
        _parser().parse_args(["ctl", "stop-tenant", "--tenant", "acme"])


def test_audit_merges_fan_out_copies_and_parses_since() -> None:
    from processor.core.events import Audit, AuditOutcome, CallKey

    def copy(call: str) -> Audit:
        key = CallKey(tenant="acme", turn_id="t", response_id="r", item_id=call, call_id=call)
        return Audit(
            audit_id="a1",
            command_id="stop-1",
            command_type="tenant.stopped",
            issued_by="alice",
            tenant="acme",
            reason="incident",
            outcome=AuditOutcome.APPLIED,
            affected=[key],
            ts=100.0,
        )

    [entry] = audit_cli.merge([copy("c1"), copy("c2"), copy("c1")])
    assert entry.copies == 3
    assert [k["call_id"] for k in entry.as_json()["affected"]] == ["c1", "c2"]
    assert "partitions=3" in entry.line() and "affected=2" in entry.line()
    assert audit_cli.parse_since("2h", 10_000.0) == 10_000.0 - 7200
    assert audit_cli.parse_since("1700000000", 0.0) == 1_700_000_000.0
    assert audit_cli.parse_since("2023-11-14T22:13:20Z", 0.0) == 1_700_000_000.0
    with pytest.raises(ValueError, match="--since"):
        audit_cli.parse_since("yesterday", 0.0)
