"""Shared helpers for the adapter tests: load a recorded body, run an adapter, read its calls.

Other adapter test modules (Gemini, Bedrock) import these; keep the signatures stable.

``naive_calls`` is a deliberately tiny stand-in for the Assembler, enough to state what each
recording should produce. The lead will later route these tests through the real Assembler
(``processor.core``) instead; until then it applies only the rules the adapters rely on.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from processor.adapters.base import StreamAdapter, TurnContext
from processor.adapters.sse import iter_provider_events
from processor.core.events import CallDelta, CallEnded, CallStarted, FragmentEvent, ResponseEnded

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


def naive_calls(events: Iterable[FragmentEvent]) -> list[dict[str, Any]]:
    """The calls a naive assembler would complete, in the order their call.ended arrived.

    A call counts when it got ``call.ended`` before its response's ``response.ended``, its
    deltas cover positions 1..ended.seq-1 without conflicting duplicates (identical duplicates
    are ignored), the joined text parses as a JSON object, and it matches the provider's
    ``arguments`` when the terminal carries them. Each result has ``tool``, ``call_id``,
    ``response_id``, ``item_id`` and ``arguments`` (the parsed object).

    The lead will later route this through the real Assembler.
    """
    ended_responses: set[str] = set()
    calls: dict[tuple[str, str, str], dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, ResponseEnded):
            ended_responses.add(event.response_id)
            continue
        key = (event.response_id, event.item_id, event.call_id)
        if isinstance(event, CallStarted):
            calls.setdefault(key, {"tool": event.tool, "deltas": {}, "bad": False, "done": False})
        elif isinstance(event, CallDelta) and key in calls:
            _add_delta(calls[key], event)
        elif isinstance(event, CallEnded) and key in calls:
            state = calls[key]
            if not state["done"] and event.response_id not in ended_responses:
                state["done"] = True
                result = _complete(state, event)
                if result is not None:
                    out.append(result)
    return out


def _add_delta(state: dict[str, Any], event: CallDelta) -> None:
    known = state["deltas"].get(event.seq)
    if known is None:
        state["deltas"][event.seq] = event.delta
    elif known != event.delta:
        state["bad"] = True


def _complete(state: dict[str, Any], event: CallEnded) -> dict[str, Any] | None:
    deltas: dict[int, str] = state["deltas"]
    if state["bad"] or sorted(deltas) != list(range(1, event.seq)):
        return None
    try:
        arguments = orjson.loads("".join(deltas[i] for i in range(1, event.seq)))
        if event.arguments is not None and orjson.loads(event.arguments) != arguments:
            return None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(arguments, dict):
        return None
    return {
        "tool": state["tool"],
        "call_id": event.call_id,
        "response_id": event.response_id,
        "item_id": event.item_id,
        "arguments": arguments,
    }


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
