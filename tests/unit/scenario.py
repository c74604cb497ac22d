"""A small builder for Assembler scenarios: events with sensible defaults, and output queries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import (
    CallConfirmed,
    CallDelta,
    CallDenied,
    CallEnded,
    CallStarted,
    Dispatch,
    InputEvent,
    Ledger,
    OutputRecord,
    ResponseEnded,
    ResponseStatus,
    Status,
    TurnCancelled,
    TurnStarted,
)
from processor.core.policy import Limits
from processor.core.registry import Registry

TOOLS: dict[str, Any] = {
    "tools": [
        {
            "name": "get_weather",
            "version": "2",
            "aliases": ["getWeather"],
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string", "minLength": 1}},
                "additionalProperties": False,
            },
        },
        {
            "name": "book_slot",
            "version": "1",
            "requires_confirmation": True,
            "confirmation_ttl_seconds": 60,
            "parameters": {
                "type": "object",
                "required": ["date", "party_size"],
                "properties": {
                    "date": {"type": "string", "format": "date"},
                    "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
                },
                "additionalProperties": False,
            },
        },
        {
            "name": "admin_reset",
            "parameters": {"type": "object"},
            "allowed_actors": ["root"],
        },
    ]
}


def registry(doc: dict[str, Any] | None = None, **kwargs: Any) -> Registry:
    return Registry.from_document(doc or TOOLS, **kwargs)


def in_namespace(namespace: str, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """``doc`` (default :data:`TOOLS`) with every tool declared in ``namespace``."""
    return {"tools": [{**t, "namespace": namespace} for t in (doc or TOOLS)["tools"]]}


@dataclass
class Call:
    """Builds the fragment events of one call."""

    call_id: str = "call_0"
    tenant: str = "acme"
    turn_id: str = "turn-1"
    response_id: str = "resp-1"
    item_id: str = "item-0"
    provider: str = "test"
    ts: float = 100.0
    namespace: str | None = None  # the tool's namespace in call.started

    @property
    def ids(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "turn_id": self.turn_id,
            "response_id": self.response_id,
            "item_id": self.item_id,
            "call_id": self.call_id,
            "provider": self.provider,
            "ts": self.ts,
        }

    @property
    def key(self) -> Any:
        return self.start().key

    def start(self, tool: str = "get_weather", actor: str = "alice") -> CallStarted:
        return CallStarted(
            event_id=f"{self.call_id}:s",
            tool=tool,
            actor=actor,
            namespace=self.namespace,
            **self.ids,
        )

    def delta(self, seq: int, text: str) -> CallDelta:
        return CallDelta(event_id=f"{self.call_id}:d{seq}", seq=seq, delta=text, **self.ids)

    def end(self, seq: int, terminal: str = "T", arguments: str | None = None) -> CallEnded:
        return CallEnded(
            event_id=f"{self.call_id}:e",
            seq=seq,
            terminal_event_id=f"{self.call_id}:{terminal}",
            arguments=arguments,
            **self.ids,
        )

    def stream(
        self, text: str, pieces: int = 3, tool: str = "get_weather", *, complete: bool = True
    ) -> list[InputEvent]:
        """start, the text cut into ``pieces`` deltas, end, and (``complete``) the response's
        normal end: a validated call acts only once its response completed."""
        size = max(1, -(-len(text) // pieces))
        chunks = [text[i : i + size] for i in range(0, len(text), size)] or [""]
        events: list[InputEvent] = [self.start(tool)]
        events += [self.delta(i + 1, c) for i, c in enumerate(chunks)]
        events.append(self.end(len(chunks) + 1))
        if complete:
            events.append(self.done())
        return events

    def done(self) -> ResponseEnded:
        """The response's normal end (``response.ended`` completed)."""
        return self.response_ended(ResponseStatus.COMPLETED)

    def response_ended(self, status: ResponseStatus) -> ResponseEnded:
        return ResponseEnded(
            event_id=f"{self.response_id}:end",
            tenant=self.tenant,
            turn_id=self.turn_id,
            response_id=self.response_id,
            provider=self.provider,
            ts=self.ts,
            status=status,
            reason="stop" if status is ResponseStatus.COMPLETED else status.value,
        )

    def confirm(self, digest: str, actor: str = "alice", cid: str = "conf-1") -> CallConfirmed:
        return CallConfirmed(
            command_id=cid,
            issued_by=actor,
            issued_at=self.ts,
            actor=actor,
            args_digest=digest,
            **{k: v for k, v in self.ids.items() if k not in ("provider", "ts")},
        )

    def deny(self, actor: str = "alice", cid: str = "deny-1") -> CallDenied:
        return CallDenied(
            command_id=cid,
            issued_by=actor,
            issued_at=self.ts,
            actor=actor,
            **{k: v for k, v in self.ids.items() if k not in ("provider", "ts")},
        )


def turn_started(
    turn_id: str = "turn-1", actor: str = "alice", tenant: str = "acme"
) -> TurnStarted:
    return TurnStarted(
        command_id=f"start:{tenant}:{turn_id}",
        issued_by="gateway",
        issued_at=99.0,
        tenant=tenant,
        turn_id=turn_id,
        actor=actor,
    )


def turn_cancelled(
    turn_id: str = "turn-1", reason: str = "user_stop", tenant: str = "acme"
) -> TurnCancelled:
    return TurnCancelled(
        command_id=f"cancel:{tenant}:{turn_id}:{reason}",
        issued_by="gateway",
        issued_at=100.0,
        tenant=tenant,
        turn_id=turn_id,
        reason=reason,
    )


@dataclass
class Run:
    """An Assembler and everything it has output so far."""

    assembler: Assembler = field(
        default_factory=lambda: Assembler(registry(), Limits(), verifier=AllowUnsigned())
    )
    outputs: list[OutputRecord] = field(default_factory=list)
    now: float = 100.0

    def feed(self, *events: InputEvent, now: float | None = None) -> list[OutputRecord]:
        produced: list[OutputRecord] = []
        for event in events:
            if now is not None:
                self.now = now
            produced += self.assembler.handle(event, self.now)
        self.outputs += produced
        return produced

    def tick(self, now: float) -> list[OutputRecord]:
        self.now = now
        produced = self.assembler.tick(now)
        self.outputs += produced
        return produced

    def of(self, kind: type[Any]) -> list[Any]:
        return [o for o in self.outputs if isinstance(o, kind)]

    @property
    def dispatches(self) -> list[Dispatch]:
        return self.of(Dispatch)

    def ledger(self, call_id: str, turn_id: str | None = None) -> Ledger:
        found = [
            entry
            for entry in self.of(Ledger)
            if entry.call_id == call_id and (turn_id is None or entry.turn_id == turn_id)
        ]
        assert len(found) == 1, f"expected one ledger entry for {call_id}, got {len(found)}"
        return found[0]

    def statuses(self, call_id: str) -> list[Status]:
        return [s for s in self.of(Status) if s.call_id == call_id]
