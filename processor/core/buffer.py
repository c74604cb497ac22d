"""One call's buffer: positioned deltas, limits, incremental syntax state, terminal facts.

A buffer accepts deltas by documented position. The contiguous prefix (positions 1..k) is fed to
the JSON syntax scanner as it grows, so each delta costs O(len(delta)) and a malformed stream
fails early; positions that arrive ahead of a gap wait in a bounded reordering window. A second
delta at an accepted position is a delivery condition: identical text is ignored (counted),
different text fails the call. Deltas of different calls never meet: each call has its own buffer.

Persistence is incremental: :meth:`CallBuffer.snapshot` holds the compact facts only, and each
delta text is its own changelog record, written once (and deleted once the text is dropped), so
a call's changelog volume is linear in its size. The scanner is not persisted: after a restore it
is rebuilt by re-scanning the contiguous prefix once, on the next delta or at the terminal.

The buffer knows nothing of turns, tools or Kafka; the Assembler decides what its outcomes mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from processor.core.errors import DuplicateConflict, LimitExceeded, MalformedJson, SequenceGap
from processor.core.events import CallKey, trusted_call_key
from processor.core.jsonscan import JsonSyntaxScanner
from processor.core.states import CallState, TerminalReason, Trigger, next_state


class DeltaOutcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"  # identical text at an accepted position: ignored


@dataclass(slots=True)
class CallBuffer:
    key: CallKey
    state: CallState = CallState.ABSENT
    tool: str | None = None  # the name as the model wrote it
    namespace: str | None = None  # the tool's namespace as the model wrote it (None: bare)
    actor: str | None = None
    provider: str | None = None
    texts: dict[int, str] = field(default_factory=dict)  # accepted deltas by position
    contiguous: int = 0  # positions 1..contiguous are scanned; later ones wait beyond a gap
    byte_count: int = 0
    fragment_count: int = 0
    duplicate_count: int = 0
    scanner: JsonSyntaxScanner | None = None
    started_at: float = 0.0
    last_activity: float = 0.0
    # the latest own ``ts`` of the events applied to the call (not persisted: a call restored
    # open takes ``last_activity`` plus the clock-skew allowance, the most its events carried)
    last_ts: float = field(default=0.0, compare=False)
    terminal_event_id: str | None = None
    provider_arguments: str | None = None
    # set once validated
    tool_name: str | None = None  # canonical tool name after resolution
    tool_version: str | None = None
    alias_used: str | None = None
    # the namespace of the tool it resolved to, when the call did not write it (a call by a
    # namespaced tool's flattened name, processor.core.flat_names); None otherwise
    tool_namespace: str | None = None
    arguments: dict[str, Any] | None = None
    args_digest: str | None = None
    expires_at: float | None = None  # confirmation deadline, when one is awaited
    awaiting_binding_since: float | None = None
    # control's end offset read once the binding wait had run out: the call fails for want of
    # its binding only when control is applied up to it (not persisted: after a restore it is
    # read again, later, which only waits longer; see ``expiry.binding_expired``)
    binding_fence: int | None = field(default=None, compare=False)
    validated_at: float | None = None  # entered awaiting_response (waits for the response end)
    # the control position (an offset of this partition's control topic) that must be applied
    # before the call may act: control's committed end when its terminal events were read
    barrier: int | None = None
    provider_reason: str | None = None  # the provider's stop reason, when it voided the call
    # set once terminal
    reason: TerminalReason | None = None
    dispatch_id: str | None = None
    parse_result: str | None = None
    validation_result: str | None = None
    ended_at: float | None = None
    counted: bool = field(default=False, compare=False)  # held against the open-buffer limits
    _encoded_key: str | None = field(default=None, compare=False, repr=False)
    _state_key: str | None = field(default=None, compare=False, repr=False)
    _text_key_prefix: str | None = field(default=None, compare=False, repr=False)

    @property
    def encoded_key(self) -> str:
        """``key.encoded()``, computed once (state keys and ids use it on every delta)."""
        if self._encoded_key is None:
            self._encoded_key = self.key.encoded()
        return self._encoded_key

    @property
    def state_key(self) -> str:
        """The changelog key of the call's facts, ``"call:" + encoded_key``, computed once."""
        if self._state_key is None:
            self._state_key = "call:" + self.encoded_key
        return self._state_key

    @property
    def text_key_prefix(self) -> str:
        """``"text:" + encoded_key`` without its closing ``]``, then ``,``: a text record's key
        is this, the position's digits and ``]`` (see ``assembly_state._text_key``)."""
        if self._text_key_prefix is None:
            self._text_key_prefix = f"text:{self.encoded_key[:-1]},"
        return self._text_key_prefix

    # -- transitions ---------------------------------------------------------------------

    def fire(self, trigger: Trigger) -> None:
        self.state = next_state(self.state, trigger)

    def terminate(self, reason: TerminalReason, now: float) -> list[int]:
        """Enter an absorbing state; returns the positions whose text was dropped."""
        self.fire(reason.trigger)
        self.reason = reason
        self.ended_at = now
        self.arguments = None  # dispatched, cancelled or failed: no argument value is kept
        return self.drop_text()

    def drop_text(self) -> list[int]:
        """Forget the argument text (after validation or at the end); returns its positions."""
        positions = sorted(self.texts)
        self.texts = {}
        self.contiguous = 0
        self.scanner = None
        return positions

    @property
    def open(self) -> bool:
        """Holds argument text and counts against the open-buffer limits."""
        return not self.state.absorbing and self.state is not CallState.ABSENT

    # -- deltas --------------------------------------------------------------------------

    def add_delta(
        self, seq: int, text: str, *, max_bytes: int, max_deltas: int, max_window: int, depth: int
    ) -> DeltaOutcome:
        """Place one delta. Raises LimitExceeded, MalformedJson or a duplicate conflict."""
        known = self.texts.get(seq)
        if known is not None:
            if known != text:
                raise DuplicateConflict(detail=f"position {seq} arrived twice with different text")
            self.duplicate_count += 1
            return DeltaOutcome.DUPLICATE
        try:  # ASCII (a flag CPython keeps): one byte per character, nothing to encode
            size = len(text) if text.isascii() else len(text.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: no JSON text can hold it (RFC 8259 §8.1)
            raise MalformedJson(detail=f"position {seq} holds a lone surrogate") from None
        if self.byte_count + size > max_bytes:
            raise LimitExceeded("size_limit", f"arguments exceed {max_bytes} bytes")
        if self.fragment_count + 1 > max_deltas:
            raise LimitExceeded("size_limit", f"more than {max_deltas} deltas")
        waiting = len(self.texts) - self.contiguous
        if seq > self.contiguous + 1 and waiting >= max_window:
            raise LimitExceeded("sequence_gap", f"reordering window of {max_window} exceeded")
        self.byte_count += size
        self.fragment_count += 1
        texts = self.texts
        texts[seq] = text
        scanner = self.scanner
        if scanner is not None and seq == self.contiguous + 1 and seq + 1 not in texts:
            scanner.feed(text)  # the common case of _advance: the next position, nothing after
            self.contiguous = seq
        else:
            self._advance(depth)
        return DeltaOutcome.ACCEPTED

    def check_bounds(self, *, max_bytes: int, max_deltas: int) -> None:
        """Raise LimitExceeded when what the buffer already holds exceeds these bounds.

        Deltas may arrive before ``call.started`` names the tool (positions are reassembled);
        until then they are held to the partition-wide limits. The Assembler calls this when the
        tool becomes known and again at the terminal, so a tool's own limits hold in any order.
        """
        if self.byte_count > max_bytes:
            raise LimitExceeded("size_limit", f"arguments exceed {max_bytes} bytes")
        if self.fragment_count > max_deltas:
            raise LimitExceeded("size_limit", f"more than {max_deltas} deltas")

    def _advance(self, depth: int) -> None:
        """Scan every position that has become contiguous (rebuilding the scanner if needed)."""
        if self.scanner is None:
            self.scanner = JsonSyntaxScanner(max_depth=depth)
            for position in range(1, self.contiguous + 1):  # once, after a restore
                self.scanner.feed(self.texts[position])
        while (nxt := self.contiguous + 1) in self.texts:
            self.scanner.feed(self.texts[nxt])
            self.contiguous = nxt

    def text(self) -> bytes:
        """The assembled UTF-8 text of positions 1..contiguous."""
        try:
            joined = "".join(self.texts[p] for p in range(1, self.contiguous + 1))
            return joined.encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedJson(detail="arguments contain a lone surrogate") from None

    def finish(self, end_seq: int, depth: int) -> bytes:
        """At the terminal event: every position 1..end_seq-1 present, the JSON complete.

        Returns the assembled UTF-8 text for the one strict parse.
        """
        self._advance(depth)
        if len(self.texts) != self.contiguous or self.contiguous != end_seq - 1:
            missing = end_seq - 1 - self.contiguous
            waiting = len(self.texts) - self.contiguous
            raise SequenceGap(
                detail=f"terminal at position {end_seq} with {self.contiguous} contiguous "
                f"deltas ({missing} missing, {waiting} beyond a gap)"
            )
        assert self.scanner is not None
        self.scanner.finish()
        return self.text()

    @property
    def resolved_namespace(self) -> str | None:
        """The namespace of the tool the call names: as written, or as resolved."""
        return self.tool_namespace if self.tool_namespace is not None else self.namespace

    # -- persistence (the state changelog) -----------------------------------------------

    _FACTS = (
        "tool", "actor", "provider", "contiguous", "byte_count", "fragment_count",
        "duplicate_count", "started_at", "last_activity", "terminal_event_id",
        "provider_arguments", "tool_name", "tool_version", "alias_used", "arguments",
        "args_digest", "expires_at", "awaiting_binding_since", "validated_at", "barrier",
        "provider_reason", "dispatch_id", "parse_result", "validation_result", "ended_at",
    )  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """The compact facts (delta texts are separate records, see the module docstring)."""
        data: dict[str, Any] = {"key": list(self.key.as_tuple), "state": self.state.value}
        data.update({name: getattr(self, name) for name in self._FACTS})
        data["reason"] = self.reason.value if self.reason else None
        if self.namespace is not None:  # written only when set: a bare tool's value is as before
            data["namespace"] = self.namespace
        if self.tool_namespace is not None:  # the same
            data["tool_namespace"] = self.tool_namespace
        return data

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> CallBuffer:
        t, u, r, i, c = data["key"]
        # validated when the call was first seen; the changelog gives it back as it was
        buf = cls(key=trusted_call_key(t, u, r, i, c))
        buf.state = CallState(data["state"])
        for name in cls._FACTS:
            setattr(buf, name, data.get(name))
        buf.namespace = data.get("namespace")
        buf.tool_namespace = data.get("tool_namespace")
        buf.contiguous = buf.contiguous or 0
        buf.reason = TerminalReason(data["reason"]) if data.get("reason") else None
        return buf
