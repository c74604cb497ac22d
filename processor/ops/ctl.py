"""``processor ctl``: write control events — user/gateway events and signed operator commands.

User and gateway events (not signed: the gateway authenticates users; these bind to the turn's
authenticated actor, which the worker checks):

- ``start-turn``   ``turn.started`` binds the actor to a turn (``--supersedes OLD`` first writes
  ``turn.cancelled`` reason ``superseded`` to the previous turn's key: two turns of one session may
  live on different partitions);
- ``cancel-turn``  ``turn.cancelled`` (``user_stop`` by default);
- ``confirm`` / ``deny``  ``call.confirmed`` / ``call.denied`` for one call key, binding the exact
  ``args_digest`` the user saw and the actor.

Operator commands (Ed25519-signed, ARCHITECTURE.md §6; each needs ``--reason``):

- ``quarantine-response``  ``response.quarantined`` (turn-scoped);
- ``disable-tool`` / ``enable-tool``  ``tool.disabled`` / ``tool.enabled`` for one tenant, or for
  every tenant with ``--all-tenants`` (a global command: needs a key scoped ``*``);
- ``stop-tenant`` / ``resume-tenant``  ``tenant.stopped`` / ``tenant.resumed``.

Signing: ``--key FILE --key-id ID --operator NAME`` (or ``PROCESSOR_OPERATOR_KEY_FILE``,
``PROCESSOR_OPERATOR_KEY_ID``, ``PROCESSOR_OPERATOR_NAME``). A command carries ``key_id``,
``issued_by``, ``command_id`` (random, or ``--command-id`` to re-send the same command after a
partial failure), ``issued_at``, ``expires_at`` (``--ttl``, default 300 s) and its target. The
worker rejects and audits unsigned, forged, expired, replayed and out-of-scope commands.

Where records go. Turn-scoped events are keyed by the turn key ``tenant/turn_id`` (the default
partitioner puts them on the turn's partition, next to its fragments). Tenant-wide and tool-wide
commands are written to EVERY partition of ``control`` (same ``command_id`` in each copy), so every
worker applies them in order with its own fragments and every executor's fence sees them in the
control partition of any turn. The producer is idempotent with ``acks=all``; the command exits
non-zero unless every copy was acknowledged (re-run with the same ``--command-id``: a partition
that has the command already rejects the copy as a replay, so re-sending is safe).

``keygen`` makes an operator key pair (see :func:`processor.ops.signing.keygen`).

Nothing here prints argument values: confirm/deny name a call key and a digest only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from processor.cli.errors import CliError, ConfigInvalid, UsageError, classify
from processor.cli.flags import add_connection_flags, load_settings
from processor.core.errors import ConfigurationError, ProcessorError
from processor.core.events import (
    CallConfirmed,
    CallDenied,
    ControlEvent,
    OperatorCommand,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    TurnStarted,
    describe_validation_error,
    encode,
    turn_key,
)
from processor.ops.signing import OperatorSigner, keygen
from processor.runtime.clients import IdempotentProducer
from processor.settings import Settings

__all__ = [
    "DEFAULT_TTL_SECONDS",
    "ControlWriter",
    "Written",
    "fans_out",
    "load_signer",
    "register",
    "write_control",
]

DEFAULT_TTL_SECONDS: Final = 300.0
ENV_KEY_FILE: Final = "PROCESSOR_OPERATOR_KEY_FILE"
ENV_KEY_ID: Final = "PROCESSOR_OPERATOR_KEY_ID"
ENV_OPERATOR: Final = "PROCESSOR_OPERATOR_NAME"

_FAN_OUT_TYPES: Final = (ToolDisabled, ToolEnabled, TenantStopped, TenantResumed)


def fans_out(event: ControlEvent) -> bool:
    """Whether ``event`` goes to every control partition (tenant- or tool-wide commands)."""
    return isinstance(event, _FAN_OUT_TYPES)


def control_key(event: ControlEvent) -> bytes:
    """The record key: the turn key for turn-scoped events, the tenant (or ``*``) otherwise."""
    if isinstance(event, _FAN_OUT_TYPES):
        return (event.tenant or "*").encode()
    return turn_key(event.tenant, event.turn_id).encode()


@dataclass(frozen=True)
class Written:
    """Where one control event was written: ``(partition, offset)`` of every copy."""

    command_id: str
    type: str
    copies: tuple[tuple[int, int], ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "command_id": self.command_id,
            "type": self.type,
            "partitions": [p for p, _ in self.copies],
            "offsets": [o for _, o in self.copies],
        }


class ControlWriter(IdempotentProducer):
    """An idempotent producer for ``control`` (``async with ControlWriter(settings) as w``)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, settings.topics.control, "ctl")

    async def partitions(self) -> list[int]:
        parts = await self._producer.partitions_for(self.topic)
        return sorted(parts)

    async def write(self, event: ControlEvent) -> Written:
        """Write one event (to every partition when it fans out); wait for every ack."""
        value = encode(event)
        key = control_key(event)
        if fans_out(event):
            futures = [
                await self._producer.send(self.topic, value=value, key=key, partition=p)
                for p in await self.partitions()
            ]
        else:
            futures = [await self._producer.send(self.topic, value=value, key=key)]
        metadata = await asyncio.gather(*futures)
        copies = tuple(sorted((m.partition, m.offset) for m in metadata))
        return Written(command_id=event.command_id, type=event.type, copies=copies)


async def write_control(settings: Settings, events: Iterable[ControlEvent]) -> list[Written]:
    """Write ``events`` in order with one short-lived producer."""
    async with ControlWriter(settings) as writer:
        return [await writer.write(event) for event in events]


# --------------------------------------------------------------------------- signing


def load_signer(key_file: str | None, key_id: str | None, operator: str | None) -> OperatorSigner:
    """The operator's signer from flags, falling back to the ``PROCESSOR_OPERATOR_*`` variables."""
    key_file = key_file or os.environ.get(ENV_KEY_FILE)
    key_id = key_id or os.environ.get(ENV_KEY_ID)
    operator = operator or os.environ.get(ENV_OPERATOR)
    missing = [
        name
        for name, value in (
            (f"--key / {ENV_KEY_FILE}", key_file),
            (f"--key-id / {ENV_KEY_ID}", key_id),
            (f"--operator / {ENV_OPERATOR}", operator),
        )
        if not value
    ]
    if missing:
        raise ConfigurationError(
            "missing_signing_key", "operator commands are signed; missing " + ", ".join(missing)
        )
    assert key_file is not None and key_id is not None and operator is not None
    try:
        pem = Path(key_file).read_bytes()
    except OSError as exc:
        raise ConfigurationError(
            "missing_signing_key", f"{key_file}: cannot read: {exc.strerror or exc}"
        ) from None
    return OperatorSigner(pem, key_id=key_id, issued_by=operator)


def sign_command(
    signer: OperatorSigner,
    cls: type[OperatorCommand],
    *,
    reason: str,
    ttl_seconds: float,
    now: float,
    command_id: str | None = None,
    **target: Any,
) -> OperatorCommand:
    """Build and sign an operator command issued ``now`` and expiring ``ttl_seconds`` later."""
    command = cls(
        command_id=command_id or _new_id(),
        issued_by=signer.issued_by,
        issued_at=now,
        expires_at=now + ttl_seconds,
        reason=reason,
        **target,
    )
    return signer.sign(command)


def _new_id() -> str:
    return uuid.uuid4().hex


# --------------------------------------------------------------------------- CLI


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ctl = subparsers.add_parser("ctl", help="write control events and signed operator commands")
    sub = ctl.add_subparsers(dest="ctl_command", required=True, metavar="ACTION")

    def action(name: str, text: str, *, signed: bool) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=text, description=text)
        add_connection_flags(parser)
        parser.add_argument("--command-id", help="command id (default: random)")
        parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
        if signed:
            parser.add_argument("--reason", required=True, help="why (goes to the audit)")
            parser.add_argument("--key", help=f"operator private key PEM ({ENV_KEY_FILE})")
            parser.add_argument("--key-id", help=f"key id in the workers' keyring ({ENV_KEY_ID})")
            parser.add_argument("--operator", help=f"operator name ({ENV_OPERATOR})")
            parser.add_argument(
                "--ttl", type=float, default=DEFAULT_TTL_SECONDS, help="seconds until it expires"
            )
        else:
            parser.add_argument("--issued-by", default="ctl", help="issuer (default ctl)")
        return parser

    def call_target(parser: argparse.ArgumentParser) -> None:
        for flag in ("--tenant", "--turn", "--response", "--item", "--call"):
            parser.add_argument(flag, required=True)
        parser.add_argument("--actor", required=True, help="the authenticated actor")

    p = action("start-turn", "bind the authenticated actor to a turn", signed=False)
    p.add_argument("--tenant", required=True)
    p.add_argument("--turn", required=True)
    p.add_argument("--actor", required=True)
    p.add_argument("--session")
    p.add_argument("--supersedes", metavar="OLD_TURN", help="cancel this earlier turn first")
    p.set_defaults(func=_start_turn)

    p = action("cancel-turn", "cancel a turn (absorbing)", signed=False)
    p.add_argument("--tenant", required=True)
    p.add_argument("--turn", required=True)
    p.add_argument("--reason", default="user_stop", help="user_stop | superseded | …")
    p.set_defaults(func=_cancel_turn)

    p = action("confirm", "confirm one proposed call (exact digest and actor)", signed=False)
    call_target(p)
    p.add_argument("--digest", required=True, help="the args_digest the user saw")
    p.set_defaults(func=_confirm)

    p = action("deny", "deny one proposed call", signed=False)
    call_target(p)
    p.add_argument("--digest", help="the args_digest the user saw")
    p.add_argument("--reason", default="", help="why")
    p.set_defaults(func=_deny)

    p = action("quarantine-response", "stop every call of one response", signed=True)
    p.add_argument("--tenant", required=True)
    p.add_argument("--turn", required=True)
    p.add_argument("--response", required=True)
    p.set_defaults(func=_operator(ResponseQuarantined))

    commands: tuple[tuple[str, type[OperatorCommand], str], ...] = (
        ("disable-tool", ToolDisabled, "disable a tool (stops its open calls)"),
        ("enable-tool", ToolEnabled, "enable a disabled tool again"),
    )
    for name, cls, text in commands:
        p = action(name, text, signed=True)
        p.add_argument("--tool", required=True)
        scope = p.add_mutually_exclusive_group(required=True)
        scope.add_argument("--tenant")
        scope.add_argument("--all-tenants", action="store_true", help="global (needs scope *)")
        p.set_defaults(func=_operator(cls))

    commands = (
        ("stop-tenant", TenantStopped, "emergency stop: every call of a tenant, until resumed"),
        ("resume-tenant", TenantResumed, "resume a stopped tenant"),
    )
    for name, cls, text in commands:
        p = action(name, text, signed=True)
        p.add_argument("--tenant", required=True)
        p.set_defaults(func=_operator(cls))

    p = sub.add_parser("keygen", help="make an operator Ed25519 key pair")
    p.add_argument("--key-id", required=True, help="names the files and the keyring entry")
    p.add_argument("--operator", required=True, help="the operator's name (issued_by)")
    p.add_argument("--tenants", required=True, help="comma-separated tenants, or *")
    p.add_argument("--out", default=".", help="folder for <key-id>.pem and .keyring.yaml")
    p.add_argument("--max-ttl", type=float, help="longest command lifetime (seconds)")
    p.set_defaults(func=_keygen)


def _clear_errors(
    build: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """A command the wire contract refuses (an id outside the alphabet, …) is a clear error."""

    def run(args: argparse.Namespace) -> int:
        try:
            return build(args)
        except ValidationError as exc:
            print(
                f"processor ctl: invalid command: {describe_validation_error(exc)}", file=sys.stderr
            )
            return 2

    return run


@_clear_errors
def _start_turn(args: argparse.Namespace) -> int:
    now = time.time()
    events: list[ControlEvent] = []
    if args.supersedes:
        events.append(
            TurnCancelled(
                command_id=_new_id(),
                issued_by=args.issued_by,
                issued_at=now,
                reason="superseded",
                tenant=args.tenant,
                turn_id=args.supersedes,
            )
        )
    events.append(
        TurnStarted(
            command_id=args.command_id or _new_id(),
            issued_by=args.issued_by,
            issued_at=now,
            tenant=args.tenant,
            turn_id=args.turn,
            actor=args.actor,
            session=args.session,
        )
    )
    return _send(args, events)


@_clear_errors
def _cancel_turn(args: argparse.Namespace) -> int:
    event = TurnCancelled(
        command_id=args.command_id or _new_id(),
        issued_by=args.issued_by,
        issued_at=time.time(),
        reason=args.reason,
        tenant=args.tenant,
        turn_id=args.turn,
    )
    return _send(args, [event])


def _call_fields(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "command_id": args.command_id or _new_id(),
        "issued_by": args.issued_by,
        "issued_at": time.time(),
        "tenant": args.tenant,
        "turn_id": args.turn,
        "response_id": args.response,
        "item_id": args.item,
        "call_id": args.call,
        "actor": args.actor,
    }


@_clear_errors
def _confirm(args: argparse.Namespace) -> int:
    return _send(args, [CallConfirmed(**_call_fields(args), args_digest=args.digest)])


@_clear_errors
def _deny(args: argparse.Namespace) -> int:
    event = CallDenied(**_call_fields(args), args_digest=args.digest, reason=args.reason)
    return _send(args, [event])


def _operator(cls: type[OperatorCommand]) -> Any:
    def run(args: argparse.Namespace) -> int:
        signer = load_signer(args.key, args.key_id, args.operator)  # errors: one line, exit 78
        target: dict[str, Any]
        if cls is ResponseQuarantined:
            target = {"tenant": args.tenant, "turn_id": args.turn, "response_id": args.response}
        elif cls in (ToolDisabled, ToolEnabled):
            target = {"tool": args.tool, "tenant": None if args.all_tenants else args.tenant}
        else:
            target = {"tenant": args.tenant}
        try:
            command = sign_command(
                signer,
                cls,
                reason=args.reason,
                ttl_seconds=args.ttl,
                now=time.time(),
                command_id=args.command_id,
                **target,
            )
        except ValidationError as exc:
            raise UsageError(f"invalid command: {describe_validation_error(exc)}") from None
        return _send(args, [command])

    return run


def _send(args: argparse.Namespace, events: Sequence[ControlEvent]) -> int:
    settings = load_settings(args, "processor ctl")
    try:
        written = asyncio.run(write_control(settings, events))
    except (KafkaError, OSError) as exc:
        retry = f"re-run with --command-id {events[-1].command_id} to retry safely"
        known = classify(exc, settings.bootstrap_servers)
        if known is not None:  # e.g. the broker is unreachable: its code, and how to retry
            known.hint = f"{known.hint}; then {retry}" if known.hint else retry
            raise known from None
        raise CliError(
            f"writing to {settings.topics.control} failed ({type(exc).__name__}: {exc})",
            hint=retry,
        ) from None
    for item in written:
        if args.json:
            print(orjson.dumps(item.as_json()).decode())
        else:
            parts = ",".join(str(p) for p, _ in item.copies)
            print(f"wrote {item.type} {item.command_id} to {settings.topics.control}[{parts}]")
    return 0


def _keygen(args: argparse.Namespace) -> int:
    tenants = [t.strip() for t in args.tenants.split(",") if t.strip()]
    try:
        pem, entry = keygen(
            Path(args.out), args.key_id, args.operator, tenants, max_ttl_seconds=args.max_ttl
        )
    except ProcessorError as exc:
        raise ConfigInvalid(str(exc), where="--out, --key-id, --tenants") from None
    print(f"private key (keep it, mode 0600): {pem}")
    print(f"keyring entry (put it in the workers' keyring folder, or merge it): {entry}")
    return 0
