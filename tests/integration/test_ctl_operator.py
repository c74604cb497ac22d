"""Signed operator commands through ``processor ctl`` and ``processor audit``, end to end.

A real broker, an assembler worker subprocess holding a keyring, and an in-process executor
holding the same keyring. Commands are written by the ``ctl`` command code itself (fan-out to
every control partition for tenant- and tool-wide commands).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from processor.cli import ctl as ctl_cli
from processor.core.events import TenantStopped, decode_input
from processor.exits import ExitCode
from processor.kafka.tail import read_records
from processor.ops import audit as audit_cli
from processor.ops.ctl import ControlWriter, sign_command
from processor.ops.signing import OperatorSigner, generate_keypair
from tests.integration.conftest import Runtime, call_events, wait_until
from tests.integration.operator_harness import (
    BOOKING,
    audit_json,
    calls_of,
    cli,
    cli_parser,
    deployment,
    result_for,
    start_turn,
    wait_audit,
    wait_status,
    written,
)

pytestmark = pytest.mark.integration

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
        cli_parser().parse_args(["ctl", "stop-tenant", "--tenant", "acme"])


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
