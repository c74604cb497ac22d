"""What every provider adapter shares: the turn context, the adapter interface, event builders.

An adapter is pure and stateful per provider stream: ``feed(chunk)`` takes one provider event (a
decoded JSON object, or its JSON text) and returns the fragment events it implies; ``close()``
ends the stream and makes every call still open inert through ``response.ended``. Adapters name
calls and cut their argument text into positioned deltas; they never assemble or judge arguments.

Event ids are deterministic (derived from the turn, the call key, the kind and the position), so a
reconnect replay of the same provider events produces the same ids and the Assembler dedupes it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from processor.core.errors import AdapterError
from processor.core.events import (
    CallDelta,
    CallEnded,
    CallStarted,
    FragmentEvent,
    ResponseEnded,
    ResponseStatus,
    stable_id,
)


@dataclass(frozen=True)
class TurnContext:
    """Who and where: the authenticated turn this provider stream belongs to."""

    tenant: str
    turn_id: str
    actor: str
    session: str | None = None


@dataclass
class OpenCall:
    """An adapter's view of one call it has started and not yet ended."""

    response_id: str
    item_id: str
    call_id: str
    tool: str
    next_seq: int = 1
    ended: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class StreamAdapter(ABC):
    """One provider stream (one HTTP response, or several concatenated) → fragment events."""

    provider: ClassVar[str]

    def __init__(self, ctx: TurnContext, *, now: Callable[[], float] | None = None) -> None:
        self.ctx = ctx
        self._now = now or (lambda: 0.0)
        self.anomalies: list[str] = []

    # -- the interface -------------------------------------------------------------------

    @abstractmethod
    def feed_event(self, event: dict[str, Any]) -> list[FragmentEvent]:
        """Take one decoded provider event; return the fragment events it implies."""

    @abstractmethod
    def close(self) -> list[FragmentEvent]:
        """The stream is over: every call still open becomes inert via ``response.ended``."""

    def feed(self, chunk: dict[str, Any] | str | bytes) -> list[FragmentEvent]:
        """Take one provider event as a dict or JSON text. A bad chunk raises AdapterError."""
        if isinstance(chunk, dict):
            return self.feed_event(chunk)
        try:
            decoded = orjson.loads(chunk)
        except orjson.JSONDecodeError as exc:
            raise AdapterError("bad_chunk", f"{self.provider}: chunk is not JSON ({exc.msg})") from None
        if not isinstance(decoded, dict):
            raise AdapterError("bad_chunk", f"{self.provider}: chunk is not a JSON object")
        return self.feed_event(decoded)

    # -- builders: every event goes through these so ids stay deterministic --------------

    def _event_id(self, *parts: str | int) -> str:
        return stable_id(
            self.provider, self.ctx.tenant, self.ctx.turn_id, *(str(p) for p in parts)
        )

    def started(self, call: OpenCall) -> CallStarted:
        return CallStarted(
            event_id=self._event_id(call.response_id, call.item_id, call.call_id, "started"),
            tenant=self.ctx.tenant,
            turn_id=self.ctx.turn_id,
            response_id=call.response_id,
            item_id=call.item_id,
            call_id=call.call_id,
            provider=self.provider,
            ts=self._now(),
            tool=call.tool,
            actor=self.ctx.actor,
            session=self.ctx.session,
        )

    def delta(self, call: OpenCall, text: str, seq: int | None = None) -> CallDelta:
        """A delta at ``seq`` (protocol position) or, when None, the next arrival position."""
        if seq is None:
            seq = call.next_seq
        call.next_seq = max(call.next_seq, seq + 1)
        return CallDelta(
            event_id=self._event_id(call.response_id, call.item_id, call.call_id, "delta", seq),
            tenant=self.ctx.tenant,
            turn_id=self.ctx.turn_id,
            response_id=call.response_id,
            item_id=call.item_id,
            call_id=call.call_id,
            provider=self.provider,
            ts=self._now(),
            seq=seq,
            delta=text,
        )

    def ended(self, call: OpenCall, terminal: str, arguments: str | None = None) -> CallEnded:
        """The protocol's terminal signal; ``terminal`` names the provider event that gave it."""
        call.ended = True
        event_id = self._event_id(call.response_id, call.item_id, call.call_id, "ended")
        return CallEnded(
            event_id=event_id,
            tenant=self.ctx.tenant,
            turn_id=self.ctx.turn_id,
            response_id=call.response_id,
            item_id=call.item_id,
            call_id=call.call_id,
            provider=self.provider,
            ts=self._now(),
            seq=call.next_seq,
            terminal_event_id=self._event_id(call.response_id, call.call_id, "terminal", terminal),
            arguments=arguments,
        )

    def response_ended(self, response_id: str, status: ResponseStatus, reason: str) -> ResponseEnded:
        return ResponseEnded(
            event_id=self._event_id(response_id, "response.ended"),
            tenant=self.ctx.tenant,
            turn_id=self.ctx.turn_id,
            response_id=response_id,
            provider=self.provider,
            ts=self._now(),
            status=status,
            reason=reason,
        )

    def anomaly(self, text: str) -> None:
        """Record something odd but harmless (a repeated name, an unknown event type)."""
        self.anomalies.append(text)
