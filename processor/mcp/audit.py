"""The audit record of an MCP tool definition that departs from the registry's pin.

:func:`definition_audit` builds it (``command_type`` ``mcp.tool_changed``, ``mcp.tool_new`` or
``mcp.tool_removed``; outcome ``rejected``; issued by ``mcp:<server>``; the two digests in its
reason; no tenant, no call keys), and :class:`AuditWriter` writes it to ``audit`` (keyed
``mcp/<server>``) with an idempotent producer started on first use, renewed after a fatal
producer error (:mod:`processor.kafka.idempotent`; the record's ``audit_id`` is stable, so a
repeat is harmless). A failure to write is logged, never raised: the refusal of the tool's calls
holds either way.
"""

from __future__ import annotations

import logging
import time

from processor.core.events import Audit, AuditOutcome, encode, stable_id
from processor.kafka.idempotent import IdempotentProducer, Outgoing
from processor.mcp.tools import PinChange
from processor.observability.logging import fields
from processor.settings import Settings

__all__ = ["AuditWriter", "definition_audit"]

log = logging.getLogger(__name__)


def definition_audit(change: PinChange, now: float) -> Audit:
    state = change.state.value
    listed = change.listed or ""
    return Audit(
        audit_id=stable_id("audit", "mcp", change.server, change.tool, state, listed),
        command_id=stable_id("mcp", change.server, change.tool, state, listed),
        command_type=f"mcp.tool_{state}",
        issued_by=f"mcp:{change.server}"[:256],
        reason=(
            f"MCP server {change.server[:128]!r}, tool {change.tool[:128]!r}: {state} "
            f"(registry {change.pinned or 'none'}, server {change.listed or 'none'})"
        ),
        outcome=AuditOutcome.REJECTED,
        rejection=f"tool_{state}",
        ts=now,
    )


class AuditWriter(IdempotentProducer):
    """Writes :func:`definition_audit` records (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, settings.topics.audit, "mcp-audit")
        self._started = False

    async def write(self, change: PinChange) -> None:
        record = definition_audit(change, time.time())
        try:
            if not self._started:
                await self.start()
                self._started = True
            key = f"mcp/{change.server}".encode()
            await self.producers.send_all([Outgoing(self.topic, encode(record), key)])
        except Exception as exc:
            log.error(
                "could not write the audit record of an MCP definition change",
                extra=fields(tool=change.tool[:128], error=type(exc).__name__),
            )

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await super().stop()
