"""One call's buffer: positioned deltas, limits, incremental syntax state, terminal facts.

A buffer accepts deltas by documented position. The contiguous prefix (positions 1..k) is fed to
the JSON syntax scanner as it grows, so each delta costs O(len(delta)) and a malformed stream
fails early; positions that arrive ahead of a gap wait in a bounded reordering window. A second
delta at an accepted position is a delivery condition: identical text is ignored (counted),
different text fails the call. Deltas of different calls never meet: each call has its own buffer.

The buffer knows nothing of turns, tools or Kafka; the Assembler decides what its outcomes mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from processor.core.errors import DuplicateConflict, LimitExceeded, MalformedJson, SequenceGap
from processor.core.events import CallKey
from processor.core.jsonscan import JsonSyntaxScanner
from processor.core.states import CallState, TerminalReason, Trigger, next_state


class DeltaOutcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"  # identical text at an accepted position: ignored


@dataclass
class CallBuffer:
    key: CallKey
    state: CallState = CallState.ABSENT
    tool: str | None = None  # the name as the model wrote it
    actor: str | None = None
    provider: str | None = None
    chunks: list[str] = field(default_factory=list)  # positions 1..len(chunks), contiguous
    pending: dict[int, str] = field(default_factory=dict)  # positions beyond a gap
    byte_count: int = 0
    fragment_count: int = 0
    duplicate_count: int = 0
    scanner: JsonSyntaxScanner | None = None
    started_at: float = 0.0
    last_activity: float = 0.0
    terminal_event_id: str | None = None
    provider_arguments: str | None = None
    # set once validated
    tool_name: str | None = None  # canonical tool name after resolution
    tool_version: str | None = None
    alias_used: str | None = None
    arguments: dict[str, Any] | None = None
    args_digest: str | None = None
    expires_at: float | None = None  # confirmation deadline, when one is awaited
    awaiting_binding_since: float | None = None
    # set once terminal
    reason: TerminalReason | None = None
    dispatch_id: str | None = None
    parse_result: str | None = None
    validation_result: str | None = None
    ended_at: float | None = None
    counted: bool = field(default=False, compare=False)  # held against the open-buffer limits

    # -- transitions ---------------------------------------------------------------------

    def fire(self, trigger: Trigger) -> None:
        self.state = next_state(self.state, trigger)

    def terminate(self, reason: TerminalReason, now: float) -> None:
        self.fire(reason.trigger)
        self.reason = reason
        self.ended_at = now
        self.release()

    def release(self) -> None:
        """Drop argument text: an inert or dispatched call keeps only its compact facts."""
        self.chunks = []
        self.pending = {}
        self.scanner = None
        if self.state in (CallState.CANCELLED, CallState.FAILED):
            self.arguments = None
        if self.state is CallState.DISPATCHED:
            self.arguments = None

    @property
    def open(self) -> bool:
        """Holds argument text and counts against the open-buffer limits."""
        return not self.state.absorbing and self.state is not CallState.ABSENT

    # -- deltas --------------------------------------------------------------------------

    def add_delta(
        self, seq: int, text: str, *, max_bytes: int, max_deltas: int, max_window: int, depth: int
    ) -> DeltaOutcome:
        """Place one delta. Raises LimitExceeded, MalformedJson or a duplicate conflict."""
        known = self._text_at(seq)
        if known is not None:
            if known != text:
                raise DuplicateConflict(detail=f"position {seq} arrived twice with different text")
            self.duplicate_count += 1
            return DeltaOutcome.DUPLICATE
        size = len(text.encode("utf-8", "surrogatepass"))
        if self.byte_count + size > max_bytes:
            raise LimitExceeded("size_limit", f"arguments exceed {max_bytes} bytes")
        if self.fragment_count + 1 > max_deltas:
            raise LimitExceeded("size_limit", f"more than {max_deltas} deltas")
        if seq > len(self.chunks) + 1 and len(self.pending) >= max_window:
            raise LimitExceeded("sequence_gap", f"reordering window of {max_window} exceeded")
        self.byte_count += size
        self.fragment_count += 1
        self.pending[seq] = text
        self._advance(depth)
        return DeltaOutcome.ACCEPTED

    def _text_at(self, seq: int) -> str | None:
        if seq <= len(self.chunks):
            return self.chunks[seq - 1]
        return self.pending.get(seq)

    def _advance(self, depth: int) -> None:
        if self.scanner is None:
            self.scanner = JsonSyntaxScanner(max_depth=depth)
        while (nxt := len(self.chunks) + 1) in self.pending:
            text = self.pending.pop(nxt)
            self.scanner.feed(text)
            self.chunks.append(text)

    def finish(self, end_seq: int, depth: int) -> bytes:
        """At the terminal event: every position 1..end_seq-1 present, the JSON complete.

        Returns the assembled UTF-8 text for the one strict parse.
        """
        if self.pending or len(self.chunks) != end_seq - 1:
            missing = end_seq - 1 - len(self.chunks)
            raise SequenceGap(
                detail=f"terminal at position {end_seq} with {len(self.chunks)} contiguous "
                f"deltas ({missing} missing, {len(self.pending)} beyond a gap)"
            )
        if self.scanner is None:
            self.scanner = JsonSyntaxScanner(max_depth=depth)
        self.scanner.finish()
        try:
            return "".join(self.chunks).encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedJson(detail="arguments contain a lone surrogate") from None

    # -- persistence (the state changelog) -----------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "key": list(self.key.as_tuple),
            "state": self.state.value,
            "tool": self.tool,
            "actor": self.actor,
            "provider": self.provider,
            "byte_count": self.byte_count,
            "fragment_count": self.fragment_count,
            "duplicate_count": self.duplicate_count,
            "started_at": self.started_at,
            "last_activity": self.last_activity,
            "terminal_event_id": self.terminal_event_id,
            "tool_name": self.tool_name,
            "tool_version": self.tool_version,
            "alias_used": self.alias_used,
            "args_digest": self.args_digest,
            "expires_at": self.expires_at,
            "awaiting_binding_since": self.awaiting_binding_since,
            "reason": self.reason.value if self.reason else None,
            "dispatch_id": self.dispatch_id,
            "parse_result": self.parse_result,
            "validation_result": self.validation_result,
            "ended_at": self.ended_at,
        }
        if self.open:
            data["chunks"] = self.chunks
            data["pending"] = {str(k): v for k, v in self.pending.items()}
            data["scanner"] = self.scanner.snapshot() if self.scanner else None
            data["provider_arguments"] = self.provider_arguments
            data["arguments"] = self.arguments
        return data

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> CallBuffer:
        t, u, r, i, c = data["key"]
        buf = cls(key=CallKey(tenant=t, turn_id=u, response_id=r, item_id=i, call_id=c))
        buf.state = CallState(data["state"])
        for name in (
            "tool", "actor", "provider", "byte_count", "fragment_count", "duplicate_count",
            "started_at", "last_activity", "terminal_event_id", "tool_name", "tool_version",
            "alias_used", "args_digest", "expires_at", "awaiting_binding_since", "dispatch_id",
            "parse_result", "validation_result", "ended_at",
        ):  # fmt: skip
            setattr(buf, name, data.get(name))
        buf.reason = TerminalReason(data["reason"]) if data.get("reason") else None
        buf.chunks = list(data.get("chunks") or [])
        buf.pending = {int(k): v for k, v in (data.get("pending") or {}).items()}
        scanner = data.get("scanner")
        buf.scanner = JsonSyntaxScanner.from_snapshot(scanner) if scanner else None
        buf.provider_arguments = data.get("provider_arguments")
        buf.arguments = data.get("arguments")
        return buf
