"""Shared helpers for the adapter tests: load a recorded body, run an adapter, read its calls.

Other adapter test modules (Gemini, Bedrock) import these; keep the signatures stable.

``assembled_calls`` runs the adapter's events through the real Assembler, so every recording is
asserted end to end: provider bytes → adapter → Assembler → dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from processor.adapters.base import StreamAdapter, TurnContext
from processor.adapters.sse import iter_provider_events
from processor.core.assembler import Assembler
from processor.core.events import (
    CallEnded,
    CallStarted,
    Dispatch,
    FragmentEvent,
    ResponseEnded,
    TurnStarted,
)
from processor.core.registry import Registry

DATA = Path(__file__).parent / "data"

CTX = TurnContext(tenant="t1", turn_id="turn-1", actor="user-1", session="s1")


def load_events(path: str | Path) -> list[dict[str, Any]]:
    """The provider events of a recorded body (SSE or JSON lines), via iter_provider_events."""
    return list(iter_provider_events(Path(path).read_bytes()))


def run_adapter(
    adapter: StreamAdapter, events: Iterable[dict[str, Any] | str | bytes]
) -> list[FragmentEvent]:
    """Feed every event, then ``close()``; return all fragment events in order."""
    out: list[FragmentEvent] = []
    for event in events:
        out.extend(adapter.feed(event))
    out.extend(adapter.close())
    return out


def assembled_calls(events: Iterable[FragmentEvent]) -> list[dict[str, Any]]:
    """The calls the real Assembler dispatches from these events, in dispatch order.

    The turn is bound to the adapter's actor first (as the gateway would), and every tool name
    the stream mentions is declared with an open object schema, so what is asserted here is the
    adapter's framing, identity and terminal signals, not a tool registry. Each result has
    ``tool``, ``call_id``, ``response_id``, ``item_id`` and ``arguments`` (the parsed object).
    """
    events = list(events)
    tools = sorted({e.tool for e in events if isinstance(e, CallStarted)})
    registry = Registry.from_document(
        {"tools": [{"name": name, "parameters": {"type": "object"}} for name in tools]}
    )
    assembler = Assembler(registry)
    bind = TurnStarted(
        command_id="bind",
        issued_by="gateway",
        issued_at=0.0,
        tenant=CTX.tenant,
        turn_id=CTX.turn_id,
        actor=CTX.actor,
    )
    outputs = assembler.handle(bind, 0.0)
    for event in events:
        outputs += assembler.handle(event, 0.0)
    return [
        {
            "tool": d.tool,
            "call_id": d.call_id,
            "response_id": d.response_id,
            "item_id": d.item_id,
            "arguments": d.arguments,
        }
        for d in outputs
        if isinstance(d, Dispatch)
    ]


def assert_replays_identically(new_adapter: Callable[[], StreamAdapter], events: list[Any]) -> None:
    """Two fresh adapters over the same provider events: identical events, unique event ids."""
    first = run_adapter(new_adapter(), events)
    second = run_adapter(new_adapter(), events)
    assert dumped(first) == dumped(second)
    ids = [e.event_id for e in first]
    assert len(ids) == len(set(ids))


def response_endings(events: Iterable[FragmentEvent]) -> list[tuple[str, str, str]]:
    """``(response_id, status, reason)`` of every response.ended, in order."""
    return [
        (e.response_id, e.status.value, e.reason) for e in events if isinstance(e, ResponseEnded)
    ]


def ended_call_ids(events: Iterable[FragmentEvent]) -> list[str]:
    """The call ids that got call.ended, in order."""
    return [e.call_id for e in events if isinstance(e, CallEnded)]


def dumped(events: Iterable[FragmentEvent]) -> list[dict[str, Any]]:
    """The events as plain dicts (for determinism comparisons)."""
    return [e.model_dump(mode="json") for e in events]


def sse_body(*payloads: dict[str, Any] | str, event_names: bool = False) -> bytes:
    """An SSE body whose data lines are ``payloads`` (dicts are JSON-encoded)."""
    parts: list[str] = []
    for payload in payloads:
        data = payload if isinstance(payload, str) else orjson.dumps(payload).decode()
        name = payload.get("type") if isinstance(payload, dict) else None
        if event_names and isinstance(name, str):
            parts.append(f"event: {name}\n")
        parts.append(f"data: {data}\n\n")
    return "".join(parts).encode()
