"""A deployment driven through the operator CLI, for tests of signed operator commands: the
``ctl`` and ``audit`` commands run in-process (through the CLI's error boundary) with a runtime's
connection, two operators' keys and a keyring (alice: tenant acme; root: every tenant), a worker
subprocess and an in-process executor holding that keyring, and waits on what they write
(audit entries, status, results)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from processor.cli import ctl as ctl_cli
from processor.cli import errors as cli_errors
from processor.cli import tail as tail_cli
from processor.executor.records import ExecutionResult
from processor.ops.signing import Keyring, OperatorSigner
from processor.registry_file import load_registry
from tests.integration.conftest import Runtime, WorkerProcess, wait_until
from tests.integration.executor_harness import Executor, Recorder, group_of, results

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


def cli_parser() -> argparse.ArgumentParser:
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
    args = cli_parser().parse_args(full)

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
