"""The audit trail of control and operator commands, read back and filtered (the library of
``processor audit``, :mod:`processor.cli.tail`).

Reads the ``audit`` topic with ``read_committed`` from the beginning up to the end offsets seen at
start (so the listing is finite and holds only committed worker output), decodes each
:class:`~processor.core.events.Audit` record and filters::

    processor audit [--tenant T] [--command-type tenant.stopped] [--outcome rejected]
                    [--issued-by alice] [--command-id ID] [--since 2h|ISO-8601|epoch] [--json]

A tenant-wide or tool-wide command is fanned out to every control partition, so every worker
writes its own audit record of it (same ``audit_id``); the listing merges them into one entry with
the union of the affected call keys and ``copies`` = how many partitions reported it.

An audit record names the command, its issuer, reason, outcome, the rejection code when it was
rejected (``unsigned``, ``bad_signature``, ``expired``, ``replayed``, ``out_of_scope``, …) and the
affected call keys; never argument values.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from processor.core.events import Audit, CallKey
from processor.kafka.tail import read_records
from processor.observability.terminal import printable
from processor.settings import Settings

__all__ = ["AuditEntry", "AuditFilter", "merge", "parse_since", "read_audit"]

_RELATIVE: Final = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class AuditFilter:
    tenant: str | None = None
    command_type: str | None = None
    outcome: str | None = None
    issued_by: str | None = None
    command_id: str | None = None
    since: float | None = None

    def matches(self, record: Audit) -> bool:
        return (
            (self.tenant is None or record.tenant == self.tenant)
            and (self.command_type is None or record.command_type == self.command_type)
            and (self.outcome is None or record.outcome.value == self.outcome)
            and (self.issued_by is None or record.issued_by == self.issued_by)
            and (self.command_id is None or record.command_id == self.command_id)
            and (self.since is None or record.ts >= self.since)
        )


@dataclass
class AuditEntry:
    """One audited decision, merged over the partitions that reported it."""

    record: Audit
    copies: int = 1
    affected: set[CallKey] = field(default_factory=set)

    def as_json(self) -> dict[str, Any]:
        data = self.record.model_dump(mode="json")
        data["affected"] = [
            k.model_dump(mode="json") for k in sorted(self.affected, key=lambda k: k.as_tuple)
        ]
        data["copies"] = self.copies
        return data

    def line(self) -> str:
        r = self.record
        when = datetime.fromtimestamp(r.ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        text = (
            f"{when} {r.command_type:<20} {r.outcome.value:<8} by={r.issued_by} "
            f"tenant={r.tenant or '*'} cmd={r.command_id}"
        )
        if r.rejection:
            text += f" rejection={r.rejection}"
        text += f" affected={len(self.affected)}"
        if self.copies > 1:
            text += f" partitions={self.copies}"
        if r.reason:
            text += f" reason={r.reason!r}"
        return printable(text)


def merge(records: Iterable[Audit]) -> list[AuditEntry]:
    """Merge fan-out copies (same ``audit_id``) in first-seen order."""
    entries: dict[str, AuditEntry] = {}
    for record in records:
        entry = entries.get(record.audit_id)
        if entry is None:
            entries[record.audit_id] = AuditEntry(record, 1, set(record.affected))
        else:
            entry.copies += 1
            entry.affected.update(record.affected)
    return sorted(entries.values(), key=lambda e: e.record.ts)


def parse_since(text: str, now: float) -> float:
    """``15m``/``2h``/``1d`` ago, an ISO-8601 time (UTC when no zone), or epoch seconds."""
    text = text.strip()
    match = _RELATIVE.match(text)
    if match:
        return now - float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r}: expected e.g. 30m, 2h, 1d, 2025-01-31T12:00:00Z or epoch seconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


async def read_audit(settings: Settings, *, timeout: float = 60.0) -> AsyncIterator[Audit]:
    """Every committed audit record up to the end offsets seen at start (undecodable skipped)."""
    async for record in read_records(settings, settings.topics.audit, timeout=timeout):
        if record.value is None:
            continue
        try:
            yield Audit.model_validate_json(record.value)
        except ValidationError:
            continue


async def collect(settings: Settings, wanted: AuditFilter) -> list[AuditEntry]:
    return merge([r async for r in read_audit(settings) if wanted.matches(r)])
