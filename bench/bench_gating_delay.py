"""How long response gating holds a call, on the recorded provider streams (issue 15).

A validated call waits for its response's normal end (``response.ended`` completed) unless its
tool declares ``dispatch_on: call_end``. For every recording in ``tests/adapters/data`` this
feeds the provider events one at a time through the adapter and two Assemblers (every tool
``response_end``, and every tool ``call_end``) and records where in the provider stream each
call is dispatched under each policy: the gap, in provider events and in body bytes, is what
gating waits for. The recordings carry no timestamps, so the gap is given in stream units; in
wall time it is how long the provider takes to send those last events (the closing
``message_delta``/``message_stop``, ``response.completed``, a ``finish_reason`` chunk...).

Since issue 29 a response completes only at its stream's documented end (Chat Completions'
``[DONE]`` or EOF, Gemini's last chunk, Bedrock's ``metadata`` then EOF): ``close()`` is that
end, and it counts as one event of its own and no bytes (the ``[DONE]`` line, which the SSE
decoder consumes, is not counted either).

    python bench/bench_gating_delay.py            # a markdown table, and bench/results/...json
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from processor.adapters.anthropic import AnthropicMessagesAdapter
from processor.adapters.base import StreamAdapter, TurnContext
from processor.adapters.bedrock import BedrockConverseAdapter
from processor.adapters.gemini import GeminiAdapter
from processor.adapters.openai_chat import OpenAIChatAdapter
from processor.adapters.openai_responses import OpenAIResponsesAdapter
from processor.adapters.sse import iter_provider_events
from processor.core.assembler import Assembler
from processor.core.errors import AdapterError
from processor.core.events import CallStarted, Dispatch, FragmentEvent, TurnStarted
from processor.core.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "adapters" / "data"
RESULTS = ROOT / "bench" / "results" / "gating_delay.json"
CTX = TurnContext(tenant="t", turn_id="turn", actor="a")
ADAPTERS: dict[str, tuple[str, type[StreamAdapter]]] = {
    "anthropic": ("anthropic", AnthropicMessagesAdapter),
    "openai-chat": ("openai-chat", OpenAIChatAdapter),
    "openai-compat-chat": ("openai-chat", OpenAIChatAdapter),
    "groq": ("openai-chat", OpenAIChatAdapter),
    "openai-responses": ("openai-responses", OpenAIResponsesAdapter),
    "gemini": ("gemini", GeminiAdapter),
    "bedrock-converse": ("bedrock", BedrockConverseAdapter),
}


def provider_events(path: Path) -> Iterator[tuple[Any, int]]:
    """(event to feed, its size in bytes) in stream order."""
    body = path.read_bytes()
    if path.suffix == ".eventstream":
        step = 64  # raw bytes: the adapter frames them; position is counted in bytes
        for i in range(0, len(body), step):
            yield body[i : i + step], len(body[i : i + step])
        return
    for event in iter_provider_events(body):
        yield event, len(orjson.dumps(event))


def dispatch_points(
    path: Path, cls: type[StreamAdapter]
) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """Per call id: (event index, byte offset) of its dispatch, gated and at call end."""
    adapter = cls(CTX, now=lambda: 0.0)
    fragments: list[tuple[FragmentEvent, int, int]] = []  # (event, index, offset)
    offset = 0
    index = -1
    try:
        for index, (event, size) in enumerate(provider_events(path)):
            offset += size
            feed = adapter.feed_bytes if isinstance(event, bytes) else adapter.feed  # type: ignore[attr-defined]
            fragments += [(f, index, offset) for f in feed(event)]
        fragments += [(f, index + 1, offset) for f in adapter.close()]
    except AdapterError as exc:
        fragments += [(f, index, offset) for f in adapter.abort(exc.reason)]
    tools = sorted({f.tool for f, _, _ in fragments if isinstance(f, CallStarted)})
    results = []
    for dispatch_on in ("response_end", "call_end"):
        registry = Registry.from_document(
            {
                "tools": [
                    {"name": t, "parameters": {"type": "object"}, "dispatch_on": dispatch_on}
                    for t in tools
                ]
            }
        )
        assembler = Assembler(registry)
        bind = TurnStarted(
            command_id="b", issued_by="g", issued_at=0.0, tenant="t", turn_id="turn", actor="a"
        )
        assembler.handle(bind, 0.0)
        points: dict[str, tuple[int, int]] = {}
        for fragment, i, off in fragments:
            for out in assembler.handle(fragment, 0.0):
                if isinstance(out, Dispatch):
                    points[f"{out.response_id}/{out.call_id}"] = (i, off)
        results.append(points)
    return results[0], results[1]


def main() -> dict[str, Any]:
    rows = []
    for folder, (provider, cls) in ADAPTERS.items():
        for path in sorted((DATA / folder).iterdir()):
            if path.suffix not in (".sse", ".jsonl", ".eventstream") or "decoded" in path.name:
                continue
            gated, early = dispatch_points(path, cls)
            for call, (g_index, g_offset) in gated.items():
                e_index, e_offset = early[call]
                rows.append(
                    {
                        "provider": provider,
                        "recording": f"{folder}/{path.name}",
                        "call": call,
                        "events_held": g_index - e_index,
                        "bytes_held": g_offset - e_offset,
                    }
                )
    by_provider: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_provider.setdefault(row["provider"], []).append(row)
    summary = {
        p: {
            "calls": len(rs),
            "events_held_median": statistics.median(r["events_held"] for r in rs),
            "events_held_max": max(r["events_held"] for r in rs),
            "bytes_held_median": statistics.median(r["bytes_held"] for r in rs),
            "bytes_held_max": max(r["bytes_held"] for r in rs),
        }
        for p, rs in sorted(by_provider.items())
    }
    return {"rows": rows, "summary": summary}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| provider | calls | events held (median / max) | bytes held (median / max) |",
        "|---|---|---|---|",
    ]
    for provider, s in result["summary"].items():
        lines.append(
            f"| {provider} | {s['calls']} | {s['events_held_median']} / {s['events_held_max']} "
            f"| {s['bytes_held_median']} / {s['bytes_held_max']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    result = main()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
