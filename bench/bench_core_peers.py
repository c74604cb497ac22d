"""The core against what users pick to accumulate streamed tool calls (issue 11), no Kafka.

The same inputs, Chat Completions style (argument deltas of 4-32 characters, seeded), through:

* ``assembler``: the project's Assembler with schema validation (``turn.started``, then per call
  ``call.started``, the deltas, ``call.ended``; ``response.ended`` completed; one dispatch per
  call: scanning, one strict parse, Draft 2020-12 schema, digest, dispatch/status/ledger records);
* ``floor``: a dict of lists, one join and one ``orjson.loads`` per call at its end;
* ``scan-floor``: the floor plus a byte bound and the project's JSON syntax scanner per delta and
  one sha256 digest per call, and nothing else: not a peer but a bound, what any Python
  accumulator that keeps each call's syntax state costs at least (``bounds`` in the result);
* ``openai``: openai-python's ``ChatCompletionStreamState`` (``handle_chunk`` per chunk,
  ``get_final_completion`` at the end), without tools; ``openai-strict``: the same with strict
  pydantic tools (``openai.pydantic_function_tool``), which re-parse the arguments per delta with
  jiter and validate the final ones with pydantic;
* ``langchain``: LangChain ``AIMessageChunk`` merging (``full = full + chunk``, tool_call_chunks);
* ``partial-json-parser`` and ``jiter-partial``: the accumulated text re-parsed at every delta
  (``partial_json_parser.loads`` / ``jiter.from_json(b, partial_mode=True)``).

Each contestant gets its inputs pre-built in its own native form (fragment events for the
Assembler, ``ChatCompletionChunk`` objects for openai, ``AIMessageChunk`` objects for LangChain,
strings for the rest), so only accumulation is timed. Workloads: one call of 1 KB, 10 KB, 100 KB,
1 MB; and 10,000 calls of ~200 B, each in its own response, four streams open at a time with
their chunks interleaved (a Chat Completions response streams its parallel calls one after the
other, so interleaving is across streams).

Runs are interleaved (every round runs every workload through every contestant) and the median
of the rounds is reported. A peer whose run exceeds ``--budget`` seconds and five times the
Assembler's time on that workload is stopped there and not run again on it: its figure is a
lower bound (``>``), with the share of the deltas it got through. Per-delta re-parsers are
quadratic; at 1 MB they would take minutes.

    .venv/bin/python bench/bench_core_peers.py [--repeat 5] [--budget 3] [--small]

Writes bench/results/core_peers.json; ``markdown(result)`` renders the table for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from processor.core.assembler import Assembler
from processor.core.events import (
    CallDelta,
    CallEnded,
    CallStarted,
    Dispatch,
    ResponseEnded,
    ResponseStatus,
    TurnStarted,
)
from processor.core.jsonscan import JsonSyntaxScanner
from processor.core.policy import Limits
from processor.core.registry import Registry

RESULTS = Path(__file__).parent / "results" / "core_peers.json"
CHECK_EVERY = 256  # deltas between two looks at the clock (budget)

ROW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["rows"],
    "additionalProperties": False,
    "properties": {
        "rows": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "name", "price", "tags"],
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "integer"},
                    "name": {"type": "string"},
                    "price": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
    },
}
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["city", "units", "days", "note"],
    "additionalProperties": False,
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "units": {"enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "note": {"type": "string"},
    },
}
REGISTRY = Registry.from_document(
    {
        "tools": [
            {"name": "ingest", "parameters": ROW_SCHEMA},
            {"name": "get_weather", "parameters": WEATHER_SCHEMA},
        ]
    }
)
LIMITS = Limits(max_call_bytes=4 << 20, max_deltas=1_000_000)

TARGETS = {
    "ahead_of_every_peer": "every peer slower than the Assembler on every workload (ratio > 1)",
    "reparsers_100kb": ">= 10x faster than the per-delta re-parsers at 100 KB",
    "floor_small_calls": "<= 5x the floor on 10,000 small calls",
    "per_byte_flat": "per-byte cost at 1 MB <= 1.3x that at 1 KB",
}


# ============================================================================ workloads


@dataclass
class Call:
    response: int
    index: int  # tool-call index within its response (Chat Completions ``index``)
    call_id: str
    tool: str
    text: str
    pieces: list[str] = field(default_factory=list)


@dataclass
class Workload:
    name: str
    calls: list[Call]
    # the stream, in order: (call number, piece number); a piece number of -1 opens the call
    order: list[tuple[int, int]]
    responses: int

    @property
    def nbytes(self) -> int:
        return sum(len(c.text.encode()) for c in self.calls)

    @property
    def deltas(self) -> int:
        return sum(len(c.pieces) for c in self.calls)


def rows_document(target: int, rng: random.Random) -> str:
    rows: list[dict[str, Any]] = []
    size = len('{"rows":[]}')
    i = 0
    while size < target:
        row = {
            "id": i,
            "name": f'row "{i}" with unicode é and escapes \\n {rng.randrange(10**6)}',
            "price": round(i * 1.25 + rng.random(), 2),
            "tags": ["a", "bb", f"t{rng.randrange(100)}"],
        }
        rows.append(row)
        size += len(orjson.dumps(row)) + 1
        i += 1
    return orjson.dumps({"rows": rows}).decode()


def weather_document(rng: random.Random) -> str:
    city = rng.choice(["Paris", "Zürich", "São Paulo", "Reykjavík", "Kyoto", "Lagos"])
    note = "".join(rng.choice("abcdefghij klmnop") for _ in range(120 + rng.randrange(40)))
    doc = {"city": city, "units": rng.choice("cf"), "days": rng.randrange(1, 15), "note": note}
    return orjson.dumps(doc).decode()


def cut(text: str, rng: random.Random) -> list[str]:
    pieces = []
    i = 0
    while i < len(text):
        n = rng.randint(4, 32)
        pieces.append(text[i : i + n])
        i += n
    return pieces


def single(name: str, size: int, seed: int) -> Workload:
    rng = random.Random(seed)
    call = Call(0, 0, "call_0", "ingest", rows_document(size, rng))
    call.pieces = cut(call.text, rng)
    order = [(0, -1)] + [(0, p) for p in range(len(call.pieces))]
    return Workload(name, [call], order, 1)


def small_calls(name: str, count: int, seed: int, width: int = 4) -> Workload:
    rng = random.Random(seed)
    calls: list[Call] = []
    order: list[tuple[int, int]] = []
    responses = 0
    for first in range(0, count, width):
        group = []
        for n in range(first, min(first + width, count)):
            call = Call(n, 0, f"call_{n}", "get_weather", weather_document(rng))
            call.pieces = cut(call.text, rng)
            calls.append(call)
            group.append(n)
        order += [(n, -1) for n in group]
        longest = max(len(calls[n].pieces) for n in group)
        for p in range(longest):  # round robin over the open streams
            order += [(n, p) for n in group if p < len(calls[n].pieces)]
        responses += len(group)
    return Workload(name, calls, order, responses)


def workloads(small: bool) -> list[Workload]:
    if small:
        sizes = {"1KB": 1_000, "10KB": 10_000}
        many = 40
    else:
        sizes = {"1KB": 1_000, "10KB": 10_000, "100KB": 100_000, "1MB": 1_000_000}
        many = 10_000
    out = [single(label, size, seed) for seed, (label, size) in enumerate(sizes.items())]
    out.append(small_calls(f"{many:,} x 200B", many, 99))
    return out


# ============================================================================ contestants
# Each: prepare(workload) -> inputs (untimed); run(inputs, deadline) -> (done share, calls out)


class Stopped(Exception):
    def __init__(self, done: float) -> None:
        self.done = done


def _check(i: int, total: int, deadline: float) -> None:
    if i % CHECK_EVERY == 0 and time.perf_counter() > deadline:
        raise Stopped(i / total)


# --------------------------------------------------------------------------- the Assembler


def assembler_prepare(w: Workload) -> list[Any]:
    common = {"provider": "bench", "ts": 1.0, "tenant": "t"}
    events: list[Any] = []
    pending_end: dict[int, list[int]] = {}
    for c in w.calls:
        pending_end.setdefault(c.response, []).append(len(c.pieces))
    opened: set[int] = set()
    remaining = {n: len(c.pieces) for n, c in enumerate(w.calls)}
    for n, p in w.order:
        c = w.calls[n]
        ids = {**common, "turn_id": f"u{c.response}", "response_id": f"r{c.response}"}
        if p == -1:
            if c.response not in opened:
                opened.add(c.response)
                events.append(
                    TurnStarted(
                        command_id=f"s{c.response}",
                        issued_by="g",
                        issued_at=1.0,
                        tenant="t",
                        turn_id=f"u{c.response}",
                        actor="a",
                    )
                )
            events.append(
                CallStarted(
                    event_id=f"{c.call_id}.s",
                    tool=c.tool,
                    actor="a",
                    item_id=c.call_id,
                    call_id=c.call_id,
                    **ids,
                )
            )
            continue
        events.append(
            CallDelta(
                event_id=f"{c.call_id}.{p}",
                seq=p + 1,
                delta=c.pieces[p],
                item_id=c.call_id,
                call_id=c.call_id,
                **ids,
            )
        )
        remaining[n] -= 1
        if remaining[n] == 0:
            events.append(
                CallEnded(
                    event_id=f"{c.call_id}.e",
                    seq=len(c.pieces) + 1,
                    terminal_event_id=f"{c.call_id}.t",
                    item_id=c.call_id,
                    call_id=c.call_id,
                    **ids,
                )
            )
            pending_end[c.response].pop()
            if not pending_end[c.response]:
                events.append(
                    ResponseEnded(
                        event_id=f"r{c.response}.end",
                        status=ResponseStatus.COMPLETED,
                        reason="stop",
                        **ids,
                    )
                )
    return events


def assembler_run(events: list[Any], deadline: float) -> tuple[float, int]:
    assembler = Assembler(REGISTRY, LIMITS)
    handle = assembler.handle
    dispatched = 0
    total = len(events)
    for i, event in enumerate(events):
        _check(i, total, deadline)
        for out in handle(event, 2.0):
            if type(out) is Dispatch:
                dispatched += 1
    return 1.0, dispatched


# --------------------------------------------------------------------------- the floor


def strings_prepare(w: Workload) -> list[tuple[tuple[int, int], str | None, bool]]:
    """(call key, delta or None for a start, last delta of the call)."""
    out: list[tuple[tuple[int, int], str | None, bool]] = []
    for n, p in w.order:
        c = w.calls[n]
        key = (c.response, c.index)
        out.append((key, None if p == -1 else c.pieces[p], p == len(c.pieces) - 1))
    return out


def floor_run(
    items: list[tuple[tuple[int, int], str | None, bool]], deadline: float
) -> tuple[float, int]:
    parts: dict[tuple[int, int], list[str]] = {}
    done = 0
    total = len(items)
    for i, (key, delta, last) in enumerate(items):
        _check(i, total, deadline)
        if delta is None:
            parts[key] = []
            continue
        parts[key].append(delta)
        if last:
            orjson.loads("".join(parts.pop(key)))
            done += 1
    return 1.0, done


def scan_floor_run(
    items: list[tuple[tuple[int, int], str | None, bool]], deadline: float
) -> tuple[float, int]:
    """The least a Python accumulator that keeps each call's JSON syntax state does: the floor,
    plus a byte bound and the project's incremental scanner (``JsonSyntaxScanner``) per delta,
    plus one sha256 digest per call. No events, states, validation or output records: what the
    Assembler could cost if everything but scanning were free (the reason behind two targets)."""
    parts: dict[tuple[int, int], list[str]] = {}
    scanners: dict[tuple[int, int], JsonSyntaxScanner] = {}
    sizes: dict[tuple[int, int], int] = {}
    done = 0
    total = len(items)
    for i, (key, delta, last) in enumerate(items):
        _check(i, total, deadline)
        if delta is None:
            parts[key], scanners[key], sizes[key] = [], JsonSyntaxScanner(), 0
            continue
        size = sizes[key] + len(delta)
        if size > LIMITS.max_call_bytes:
            raise AssertionError("no call of the workloads is over the bound")
        sizes[key] = size
        scanners[key].feed(delta)
        parts[key].append(delta)
        if last:
            text = "".join(parts.pop(key))
            if not scanners.pop(key).complete:
                raise AssertionError("every call of the workloads is whole")
            del sizes[key]
            orjson.loads(text)
            hashlib.sha256(text.encode()).hexdigest()
            done += 1
    return 1.0, done


# --------------------------------------------------------------------------- re-parsers


def _reparse_run(
    parse: Callable[[str], Any],
) -> Callable[[list[tuple[tuple[int, int], str | None, bool]], float], tuple[float, int]]:
    def run(
        items: list[tuple[tuple[int, int], str | None, bool]], deadline: float
    ) -> tuple[float, int]:
        text: dict[tuple[int, int], str] = {}
        done = 0
        total = len(items)
        for i, (key, delta, last) in enumerate(items):
            _check(i, total, deadline)
            if delta is None:
                text[key] = ""
                continue
            text[key] = acc = text[key] + delta
            parse(acc)
            if last:
                del text[key]
                done += 1
        return 1.0, done

    return run


def _partial_json_parser(text: str) -> Any:
    import partial_json_parser  # noqa: PLC0415

    return partial_json_parser.loads(text)


def _jiter(text: str) -> Any:
    import jiter  # noqa: PLC0415

    return jiter.from_json(text.encode(), partial_mode=True)


# --------------------------------------------------------------------------- openai-python


def openai_prepare(w: Workload) -> list[tuple[int, Any, bool]]:
    """(response number, ChatCompletionChunk, last chunk of its response)."""
    from openai.types.chat import ChatCompletionChunk  # noqa: PLC0415

    def chunk(response: int, tool_calls: list[dict[str, Any]] | None, finish: str | None) -> Any:
        delta: dict[str, Any] = {}
        if tool_calls is not None:
            delta["tool_calls"] = tool_calls
        return ChatCompletionChunk.model_validate(
            {
                "id": f"chatcmpl-{response}",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "gpt-bench",
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
                ],
            }
        )

    out: list[tuple[int, Any, bool]] = []
    started: set[int] = set()
    remaining = {r: 0 for r in range(w.responses)}
    for c in w.calls:
        remaining[c.response] += len(c.pieces)
    for n, p in w.order:
        c = w.calls[n]
        if c.response not in started:
            started.add(c.response)
            first = chunk(c.response, None, None)
            first.choices[0].delta.role = "assistant"
            out.append((c.response, first, False))
        if p == -1:
            call = {
                "index": c.index,
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.tool, "arguments": ""},
            }
            out.append((c.response, chunk(c.response, [call], None), False))
            continue
        piece = {"index": c.index, "function": {"arguments": c.pieces[p]}}
        out.append((c.response, chunk(c.response, [piece], None), False))
        remaining[c.response] -= 1
        if remaining[c.response] == 0:
            out.append((c.response, chunk(c.response, None, "tool_calls"), True))
    return out


def _openai_tools(strict: bool) -> list[Any]:
    if not strict:
        return []
    import openai  # noqa: PLC0415
    from pydantic import BaseModel, Field  # noqa: PLC0415

    class Row(BaseModel):
        id: int
        name: str
        price: float
        tags: list[str]

    class ingest(BaseModel):  # noqa: N801 - the tool's name
        rows: list[Row]

    class get_weather(BaseModel):  # noqa: N801
        city: str = Field(min_length=1)
        units: str
        days: int = Field(ge=1, le=14)
        note: str

    return [openai.pydantic_function_tool(ingest), openai.pydantic_function_tool(get_weather)]


def _openai_run(strict: bool) -> Callable[[list[tuple[int, Any, bool]], float], tuple[float, int]]:
    from openai.lib.streaming.chat import ChatCompletionStreamState  # noqa: PLC0415

    tools = _openai_tools(strict)

    def run(chunks: list[tuple[int, Any, bool]], deadline: float) -> tuple[float, int]:
        states: dict[int, Any] = {}
        done = 0
        total = len(chunks)
        for i, (response, chunk, last) in enumerate(chunks):
            _check(i, total, deadline)
            state = states.get(response)
            if state is None:
                state = states[response] = (
                    ChatCompletionStreamState(input_tools=tools)
                    if tools
                    else ChatCompletionStreamState()
                )
            state.handle_chunk(chunk)
            if last:
                final = states.pop(response).get_final_completion()
                done += len(final.choices[0].message.tool_calls or [])
        return 1.0, done

    return run


# --------------------------------------------------------------------------- LangChain


def langchain_prepare(w: Workload) -> list[tuple[int, Any, bool]]:
    from langchain_core.messages import AIMessageChunk  # noqa: PLC0415

    out: list[tuple[int, Any, bool]] = []
    remaining = {r: 0 for r in range(w.responses)}
    for c in w.calls:
        remaining[c.response] += len(c.pieces)
    for n, p in w.order:
        c = w.calls[n]
        if p == -1:
            tcc = {"name": c.tool, "args": "", "id": c.call_id, "index": c.index}
        else:
            tcc = {"name": None, "args": c.pieces[p], "id": None, "index": c.index}
            remaining[c.response] -= 1
        last = p != -1 and remaining[c.response] == 0
        out.append((c.response, AIMessageChunk(content="", tool_call_chunks=[tcc]), last))
    return out


def langchain_run(chunks: list[tuple[int, Any, bool]], deadline: float) -> tuple[float, int]:
    merged: dict[int, Any] = {}
    done = 0
    total = len(chunks)
    for i, (response, chunk, last) in enumerate(chunks):
        _check(i, total, deadline)
        full = merged.get(response)
        merged[response] = chunk if full is None else full + chunk
        if last:
            done += len(merged.pop(response).tool_calls)
    return 1.0, done


# --------------------------------------------------------------------------- the table


@dataclass
class Contestant:
    name: str
    prepare: Callable[[Workload], Any]
    run: Callable[[Any, float], tuple[float, int]]
    peer: bool = True
    reparser: bool = False


def contestants() -> list[Contestant]:
    found = [
        Contestant("assembler", assembler_prepare, assembler_run, peer=False),
        Contestant("floor", strings_prepare, floor_run, peer=False),
        Contestant("scan-floor", strings_prepare, scan_floor_run, peer=False),
    ]
    try:
        import openai  # noqa: F401, PLC0415

        found += [
            Contestant("openai", openai_prepare, _openai_run(False)),
            Contestant("openai-strict", openai_prepare, _openai_run(True)),
        ]
    except ImportError:
        pass
    try:
        import langchain_core  # noqa: F401, PLC0415

        found.append(Contestant("langchain", langchain_prepare, langchain_run))
    except ImportError:
        pass
    try:
        import partial_json_parser  # noqa: F401, PLC0415

        found.append(
            Contestant(
                "partial-json-parser",
                strings_prepare,
                _reparse_run(_partial_json_parser),
                reparser=True,
            )
        )
    except ImportError:
        pass
    try:
        import jiter  # noqa: F401, PLC0415

        found.append(
            Contestant("jiter-partial", strings_prepare, _reparse_run(_jiter), reparser=True)
        )
    except ImportError:
        pass
    return found


# ============================================================================ running


def measure(repeat: int, budget: float, small: bool) -> dict[str, Any]:
    loads = workloads(small)
    people = contestants()
    inputs = {(w.name, c.name): c.prepare(w) for w in loads for c in people}
    times: dict[tuple[str, str], list[float]] = {k: [] for k in inputs}
    stopped: dict[tuple[str, str], tuple[float, float]] = {}  # (seconds, share done)
    warm = single("warm-up", 1_000, 99)  # untimed: lazy imports and models built on first use
    for c in people:
        c.run(c.prepare(warm), float("inf"))
    for _ in range(repeat):
        for w in loads:
            ours = float("inf")
            for c in people:
                key = (w.name, c.name)
                if key in stopped:
                    continue
                started = time.perf_counter()
                try:
                    # the project's own path and the floor always run to the end; a peer runs
                    # for --budget seconds or 5x the Assembler's time, whichever is longer, so
                    # a stopped peer is at least 5x behind
                    deadline = started + max(budget, 5 * ours) if c.peer else float("inf")
                    _, calls = c.run(inputs[key], deadline)
                except Stopped as stop:
                    stopped[key] = (time.perf_counter() - started, stop.done)
                    continue
                elapsed = time.perf_counter() - started
                if c.name == "assembler":
                    ours = elapsed
                if calls != len(w.calls):
                    raise AssertionError(f"{c.name} on {w.name}: {calls} of {len(w.calls)} calls")
                times[key].append(elapsed)
    rows = []
    for w in loads:
        ours = statistics.median(times[(w.name, "assembler")])
        for c in people:
            key = (w.name, c.name)
            row: dict[str, Any] = {
                "workload": w.name,
                "contestant": c.name,
                "peer": c.peer,
                "reparser": c.reparser,
                "bytes": w.nbytes,
                "calls": len(w.calls),
                "deltas": w.deltas,
            }
            if key in stopped:
                seconds, share = stopped[key]
                row.update(stopped=True, seconds=seconds, share_done=share, runs=0)
            else:
                row.update(
                    stopped=False, seconds=statistics.median(times[key]), runs=len(times[key])
                )
                row["runs_seconds"] = times[key]
            row["ratio_vs_assembler"] = row["seconds"] / ours
            rows.append(row)
    return {
        "benchmark": "core_peers",
        "python": platform.python_version(),
        "repeat": repeat,
        "budget_seconds": budget,
        "small": small,
        "rows": rows,
        "targets": verdicts(rows),
        "bounds": bounds(rows),
    }


def _row(rows: list[dict[str, Any]], workload: str, name: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["workload"] == workload and r["contestant"] == name), None)


def verdicts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each target: met (True/False, None when not measured) and the figure behind it."""
    out: dict[str, Any] = {}
    peers = [r for r in rows if r["peer"]]
    slowest_margin = min((r["ratio_vs_assembler"] for r in peers), default=None)
    behind = [
        f"{r['contestant']} on {r['workload']} ({r['ratio_vs_assembler']:.2f}x)"
        for r in peers
        if r["ratio_vs_assembler"] <= 1.0
    ]
    out["ahead_of_every_peer"] = {
        "met": None if slowest_margin is None else not behind,
        "figure": slowest_margin,
        "detail": "smallest peer/assembler time ratio"
        + (f"; behind: {', '.join(behind)}" if behind else ""),
    }
    reparsers = [r for r in rows if r["reparser"] and r["workload"] == "100KB"]
    if reparsers:
        worst = min(r["ratio_vs_assembler"] for r in reparsers)
        lower = any(r["stopped"] for r in reparsers if r["ratio_vs_assembler"] == worst)
        out["reparsers_100kb"] = {
            "met": worst >= 10,
            "figure": worst,
            "detail": "smallest re-parser/assembler ratio at 100 KB"
            + (" (lower bound)" if lower else ""),
        }
    else:
        out["reparsers_100kb"] = {"met": None, "figure": None, "detail": "not measured"}
    small = [r for r in rows if r["calls"] > 1]
    if small:
        name = small[0]["workload"]
        ours, floor = _row(rows, name, "assembler"), _row(rows, name, "floor")
        assert ours is not None and floor is not None
        ratio = ours["seconds"] / floor["seconds"]
        out["floor_small_calls"] = {
            "met": ratio <= 5,
            "figure": ratio,
            "detail": f"assembler/floor time on {name}",
        }
    one_kb, one_mb = _row(rows, "1KB", "assembler"), _row(rows, "1MB", "assembler")
    if one_kb and one_mb:
        per_kb = one_kb["seconds"] / one_kb["bytes"]
        per_mb = one_mb["seconds"] / one_mb["bytes"]
        out["per_byte_flat"] = {
            "met": per_mb / per_kb <= 1.3,
            "figure": per_mb / per_kb,
            "detail": "assembler seconds per byte, 1 MB over 1 KB",
        }
    else:
        out["per_byte_flat"] = {"met": None, "figure": None, "detail": "not measured"}
    return out


BOUNDS = {
    "scan_floor_vs_jiter": "jiter's time / the scan-floor's on {load} (> 1: an accumulator "
    "that only scans could be ahead of jiter)",
    "scan_floor_vs_floor": "the scan-floor's time / the floor's on {load} (<= 5: scanning "
    "alone leaves room within 5x of the floor)",
}


def bounds(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the scan-floor says of the two core targets a Python core can miss: how far ahead
    of jiter, and how near the floor, an accumulator could be if scanning were all it did."""
    out: dict[str, Any] = {}
    for load in dict.fromkeys(
        r["workload"] for r in rows if r["calls"] > 1 or r["workload"] == "1KB"
    ):
        scan = _row(rows, load, "scan-floor")
        jiter, floor = _row(rows, load, "jiter-partial"), _row(rows, load, "floor")
        if scan is None:
            continue
        if jiter is not None and not jiter["stopped"]:
            out[f"scan_floor_vs_jiter:{load}"] = {
                "figure": jiter["seconds"] / scan["seconds"],
                "detail": BOUNDS["scan_floor_vs_jiter"].format(load=load),
            }
        if floor is not None and load != "1KB":
            out[f"scan_floor_vs_floor:{load}"] = {
                "figure": scan["seconds"] / floor["seconds"],
                "detail": BOUNDS["scan_floor_vs_floor"].format(load=load),
            }
    return out


def _seconds(row: dict[str, Any]) -> str:
    s = row["seconds"]
    text = f"{s * 1000:.1f} ms" if s < 10 else f"{s:.1f} s"
    if row["stopped"]:
        return f"> {text} (stopped at {row['share_done']:.0%})"
    return text


def markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    names = list(dict.fromkeys(r["contestant"] for r in rows))
    loads = list(dict.fromkeys(r["workload"] for r in rows))
    lines = [
        "Median wall time per run (ratio to the Assembler: > 1 means the Assembler is faster).",
        "",
        "| contestant | " + " | ".join(loads) + " |",
        "|---|" + "---|" * len(loads),
    ]
    for name in names:
        cells = []
        for load in loads:
            row = _row(rows, load, name)
            assert row is not None
            ratio = row["ratio_vs_assembler"]
            mark = ">" if row["stopped"] else ""
            cells.append(_seconds(row) + ("" if name == "assembler" else f" ({mark}{ratio:.1f}x)"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ours = {r["workload"]: r for r in rows if r["contestant"] == "assembler"}
    lines += [
        "",
        "| workload | bytes | calls | deltas | assembler MB/s | assembler us/delta |",
        "|---|---|---|---|---|---|",
    ]
    for load, r in ours.items():
        mbs = r["bytes"] / r["seconds"] / 1e6
        lines.append(
            f"| {load} | {r['bytes']:,} | {r['calls']:,} | {r['deltas']:,} | {mbs:.2f} "
            f"| {r['seconds'] / r['deltas'] * 1e6:.2f} |"
        )
    lines += ["", "| target | figure | met |", "|---|---|---|"]
    for name, verdict in result["targets"].items():
        figure = verdict["figure"]
        shown = "n/a" if figure is None else f"{figure:.2f}"
        met = {True: "yes", False: "**NO**", None: "not measured"}[verdict["met"]]
        lines.append(f"| {TARGETS[name]} | {shown} ({verdict['detail']}) | {met} |")
    for bound in result.get("bounds", {}).values():
        lines.append(f"| bound, no target: {bound['detail']} | {bound['figure']:.2f} | - |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per run at most")
    parser.add_argument("--small", action="store_true", help="a tiny smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = measure(args.repeat, args.budget, args.small)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
