"""Writing control events — user/gateway events and signed operator commands — to ``control``:
the library of ``processor ctl`` (whose flags and output are :mod:`processor.cli.ctl`'s).

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

import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from processor.core.errors import ConfigurationError
from processor.core.events import (
    ControlEvent,
    OperatorCommand,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    encode,
    turn_key,
)
from processor.kafka.idempotent import IdempotentProducer, Outgoing
from processor.ops.signing import OperatorSigner
from processor.settings import Settings

__all__ = [
    "DEFAULT_TTL_SECONDS",
    "ControlWriter",
    "Written",
    "fans_out",
    "load_signer",
    "new_command_id",
    "sign_command",
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
        return sorted(await self.producers.partitions_for(self.topic))

    async def write(self, event: ControlEvent) -> Written:
        """Write one event (to every partition when it fans out); wait for every ack. A fatal
        producer error renews the producer and writes every copy again (the copies are
        idempotent by ``command_id``: :mod:`processor.kafka.idempotent`)."""
        value = encode(event)
        key = control_key(event)
        if fans_out(event):
            records = [Outgoing(self.topic, value, key, p) for p in await self.partitions()]
        else:
            records = [Outgoing(self.topic, value, key)]
        metadata = await self.producers.send_all(records)
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
        command_id=command_id or new_command_id(),
        issued_by=signer.issued_by,
        issued_at=now,
        expires_at=now + ttl_seconds,
        reason=reason,
        **target,
    )
    return signer.sign(command)


def new_command_id() -> str:
    """A fresh random command id."""
    return uuid.uuid4().hex
