"""``processor ctl``: the flags and output of writing control events and signed operator
commands; what each action writes, where and how is :mod:`processor.ops.ctl`'s.

Nothing here prints argument values: confirm/deny name a call key and a digest only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from processor.cli.flags import add_connection_flags, load_settings
from processor.core.errors import ProcessorError
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
)
from processor.exits import CliError, ConfigInvalid, UsageError, classify
from processor.ops.ctl import (
    DEFAULT_TTL_SECONDS,
    ENV_KEY_FILE,
    ENV_KEY_ID,
    ENV_OPERATOR,
    load_signer,
    new_command_id,
    sign_command,
    write_control,
)
from processor.ops.signing import keygen

__all__ = ["ENV_KEY_FILE", "ENV_KEY_ID", "ENV_OPERATOR", "register"]


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
                command_id=new_command_id(),
                issued_by=args.issued_by,
                issued_at=now,
                reason="superseded",
                tenant=args.tenant,
                turn_id=args.supersedes,
            )
        )
    events.append(
        TurnStarted(
            command_id=args.command_id or new_command_id(),
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
        command_id=args.command_id or new_command_id(),
        issued_by=args.issued_by,
        issued_at=time.time(),
        reason=args.reason,
        tenant=args.tenant,
        turn_id=args.turn,
    )
    return _send(args, [event])


def _call_fields(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "command_id": args.command_id or new_command_id(),
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
