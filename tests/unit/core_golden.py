"""A seeded random workload through the Assembler, and the digest of everything it emits.

Used by ``test_core_golden.py`` to pin the exact bytes of every output record and every changelog
record, event by event, so that a change made for speed cannot change behaviour unnoticed. The
workload is generated independently of the Assembler (confirmation digests are computed from the
arguments the generator wrote): many calls of several tenants, interleaved across responses,
with cancellations, bad JSON, schema and business failures, size limits, unknown tools and
aliases, reordered, duplicated and missing deltas, provider-argument mismatches, voiding
response verdicts, confirmations and denials, operator switches, raw undecodable records, ticks
and expiries.

Regenerate the golden file (only when a change of behaviour is intended)::

    .venv/bin/python -m tests.unit.core_golden --write
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import orjson

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import (
    CallConfirmed,
    CallDelta,
    CallDenied,
    CallEnded,
    CallStarted,
    ResponseEnded,
    ResponseStatus,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    TurnStarted,
    encode,
)
from processor.core.outputs import RecordSource
from processor.core.policy import Limits
from processor.core.registry import Registry
from processor.core.validation import args_digest

GOLDEN = Path(__file__).parent / "data" / "core_golden.json"

WEATHER = {
    "type": "object",
    "required": ["city", "units", "days"],
    "additionalProperties": False,
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "units": {"enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "note": {"type": "string"},
        "when": {"type": "string", "format": "date"},
    },
}
PAY = {
    "type": "object",
    "required": ["to", "amount"],
    "properties": {
        "to": {"type": "string", "pattern": "^[a-z]+$"},
        "amount": {"type": "number", "exclusiveMinimum": 0},
        "memo": {"type": ["string", "null"], "maxLength": 20},
    },
}
ROWS = {
    "type": "object",
    "required": ["rows"],
    "properties": {
        "rows": {
            "type": "array",
            "maxItems": 6,
            "items": {
                "type": "object",
                "required": ["id"],
                "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}},
            },
        }
    },
}


def _no_bob(arguments: Any, ctx: Any) -> list[str]:
    return ["recipient not allowed"] if arguments.get("to") == "bob" else []


def registry() -> Registry:
    return Registry.from_document(
        {
            "tools": [
                {"name": "get_weather", "parameters": WEATHER, "aliases": ["weather_v0"]},
                {
                    "name": "pay",
                    "version": "3",
                    "parameters": PAY,
                    "requires_confirmation": True,
                    "confirmation_ttl_seconds": 5.0,
                    "validators": ["no_bob"],
                },
                {"name": "ingest", "parameters": ROWS, "limits": {"max_bytes": 120}},
                {
                    "name": "lookup",
                    "parameters": {"type": "object"},
                    "dispatch_on": "call_end",
                    "allowed_actors": ["alice", "bob"],
                },
            ]
        },
        resolve_validator=lambda path: _no_bob,
    )


LIMITS = Limits(
    max_call_bytes=400,
    max_deltas=60,
    max_reorder_window=4,
    idle_timeout_seconds=3.0,
    max_open_buffers=24,
    max_open_buffers_per_tenant=10,
    binding_wait_seconds=4.0,
    response_wait_seconds=8.0,
    retention_seconds=40.0,
    max_inert_calls=150,
    max_turns=60,
    max_turns_per_tenant=25,
)


def _arguments(tool: str, rng: random.Random) -> tuple[str, dict[str, Any] | None]:
    """The argument text a model writes (sometimes wrong) and, when it is JSON, its value."""
    kind = rng.random()
    if tool in ("get_weather", "weather_v0", "nosuch"):
        doc: dict[str, Any] = {
            "city": rng.choice(["Paris", "Zürich", "São Paulo", "", 'Kyoto \\ "q"']),
            "units": rng.choice("cccffk"),
            "days": rng.choice([1, 3, 7, 14, 15, 0, 2.0, True, "3"]),
        }
        if rng.random() < 0.5:
            doc["note"] = "".join(rng.choice("abc xyz\n\té😀") for _ in range(rng.randrange(60)))
        if rng.random() < 0.2:
            doc["when"] = rng.choice(["2024-02-29", "2023-02-29", "tomorrow"])
        if rng.random() < 0.1:
            doc["extra"] = 1
    elif tool == "pay":
        doc = {
            "to": rng.choice(["alice", "bob", "Carol", "dave"]),
            "amount": rng.choice([1, 2.5, 0, -3]),
        }
        if rng.random() < 0.5:
            doc["memo"] = rng.choice([None, "rent", "x" * 25])
    elif tool == "ingest":
        doc = {
            "rows": [
                {"id": i, "tags": ["a"] * rng.randrange(3)} for i in range(rng.randrange(1, 8))
            ]
        }
    else:
        doc = {"q": rng.choice(["a", "b"]), "n": rng.randrange(100)}
    text = orjson.dumps(doc).decode()
    if rng.random() < 0.3:
        text = json.dumps(doc, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5)
    if kind < 0.06:
        return text[: max(1, len(text) - rng.randrange(1, 5))], None  # truncated
    if kind < 0.09:
        return text + rng.choice(["}", ",", " x", "{}"]), None
    if kind < 0.11:
        return text.replace(":", "::", 1), None
    if kind < 0.13:
        return '{"a":1,"a":2}', None  # duplicate member
    return text, doc


def _cut(text: str, rng: random.Random) -> list[str]:
    pieces = []
    i = 0
    while i < len(text):
        n = rng.randint(1, 24)
        pieces.append(text[i : i + n])
        i += n
    return pieces or [""]


class Workload:
    """Generates the events, one response at a time, several responses open at once."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 1000.0
        self.n = 0
        self.streams: list[list[Any]] = []  # per open response: pending actions
        self.confirmable: list[tuple[Any, str, str]] = []  # (key fields, actor, digest)

    def _next(self) -> int:
        self.n += 1
        return self.n

    def response(self) -> list[Any]:
        rng = self.rng
        n = self._next()
        tenant = f"t{rng.randrange(4)}"
        turn = f"u{rng.randrange(n // 3 + 1)}" if rng.random() < 0.3 else f"u{n}"
        rid = f"r{n}"
        actor = rng.choice(["alice", "alice", "alice", "bob", "mallory"])
        actions: list[Any] = []
        bind = rng.random()
        if bind < 0.7:
            actions.append(("turn", tenant, turn, actor if rng.random() < 0.95 else "eve"))
        calls = []
        for c in range(rng.choice([1, 1, 2, 3])):
            tool = rng.choice(
                ["get_weather"] * 5 + ["weather_v0", "pay", "pay", "ingest", "lookup", "nosuch"]
            )
            text, doc = _arguments(tool, rng)
            cid = f"c{n}.{c}"
            ids = {
                "tenant": tenant,
                "turn_id": turn,
                "response_id": rid,
                "item_id": f"i{c}",
                "call_id": cid,
            }
            pieces = _cut(text, rng)
            seqs = list(range(1, len(pieces) + 1))
            ops: list[Any] = [("start", ids, tool, actor)]
            deltas = [("delta", ids, s, p) for s, p in zip(seqs, pieces, strict=True)]
            r = rng.random()
            if r < 0.08 and len(deltas) > 2:  # reordered
                i = rng.randrange(len(deltas) - 1)
                deltas[i], deltas[i + 1] = deltas[i + 1], deltas[i]
            elif r < 0.12 and len(deltas) > 2:  # a gap
                del deltas[rng.randrange(len(deltas))]
            elif r < 0.18 and deltas:  # a duplicate, sometimes conflicting
                d = rng.choice(deltas)
                dup = d if rng.random() < 0.7 else (d[0], d[1], d[2], d[3] + "x")
                deltas.insert(rng.randrange(len(deltas) + 1), dup)
            if rng.random() < 0.05:  # the start overtaken by deltas
                ops = deltas[:2] + ops + deltas[2:]
            else:
                ops += deltas
            if rng.random() < 0.9:
                provider = None
                if rng.random() < 0.15:
                    provider = text if rng.random() < 0.7 else '{"other":1}'
                ops.append(("end", ids, len(pieces) + 1, provider))
                if rng.random() < 0.04:
                    ops.append(("end", ids, len(pieces) + 1, provider))  # redelivered
            if doc is not None and tool == "pay":
                self.confirmable.append((ids, actor, args_digest(doc)))
            calls.append(ops)
        confirms = []
        while self.confirmable and rng.random() < 0.85:
            ids, who, digest = self.confirmable.pop()
            if rng.random() < 0.1:
                digest = "sha256:" + "0" * 64
            if rng.random() < 0.05:
                who = "eve"
            confirms.append(("confirm" if rng.random() < 0.8 else "deny", ids, who, digest))
        # interleave the calls of the response (each in order)
        merged: list[Any] = []
        while any(calls):
            pick = rng.choice([c for c in calls if c])
            merged.append(pick.pop(0))
        actions += merged
        if bind >= 0.7 and bind < 0.9:
            actions.append(("turn", tenant, turn, actor))  # bound after the terminals
        r = rng.random()
        if r < 0.75:
            actions.append(("rend", tenant, turn, rid, "completed"))
        elif r < 0.9:
            actions.append(
                (
                    "rend",
                    tenant,
                    turn,
                    rid,
                    rng.choice(["failed", "incomplete", "not_chosen", "cancelled", "error"]),
                )
            )
        if rng.random() < 0.06:
            actions.insert(rng.randrange(len(actions) + 1), ("cancel", tenant, turn))
        if rng.random() < 0.04:
            actions.append(("rend", tenant, turn, rid, "completed"))
        actions += confirms
        return actions

    def control(self) -> Any:
        rng = self.rng
        r = rng.random()
        if r < 0.4:
            return ("tick",)
        if r < 0.55:
            return (
                "tool_off",
                rng.choice(["get_weather", "weather_v0", "pay"]),
                rng.choice([None, "t1"]),
            )
        if r < 0.7:
            return ("tool_on", rng.choice(["get_weather", "pay"]), rng.choice([None, "t1"]))
        if r < 0.75:
            return ("stop", f"t{rng.randrange(4)}")
        if r < 0.95:
            return ("resume", f"t{rng.randrange(4)}")
        return ("raw", rng.choice([b"not json", b"[]", b'{"v":1,"type":"call.delta"}', b'{"v":2}']))

    def actions(self, responses: int) -> list[Any]:
        rng = self.rng
        out: list[Any] = []
        made = 0
        open_streams: list[list[Any]] = []
        while made < responses or open_streams:
            while made < responses and len(open_streams) < rng.randint(1, 6):
                open_streams.append(self.response())
                made += 1
            s = rng.choice(open_streams)
            out.append(s.pop(0))
            if not s:
                open_streams.remove(s)
            if rng.random() < 0.03:
                out.append(self.control())
                if out[-1][0] == "stop":
                    out.append(("resume", out[-1][1]))
            if rng.random() < 0.05:
                out.append(("tick",))
        return out


def _event(action: Any, n: int, now: float) -> Any:
    kind = action[0]
    common = {"provider": "openai", "ts": now}
    cmd = {"command_id": f"k{n}", "issued_by": "ops", "issued_at": now}
    if kind == "start":
        _, ids, tool, actor = action
        return CallStarted(event_id=f"e{n}", tool=tool, actor=actor, **ids, **common)
    if kind == "delta":
        _, ids, seq, text = action
        return CallDelta(event_id=f"e{n}", seq=seq, delta=text, **ids, **common)
    if kind == "end":
        _, ids, seq, provider = action
        return CallEnded(
            event_id=f"e{n}", seq=seq, terminal_event_id=f"{ids['call_id']}.end",
            arguments=provider, **ids, **common,
        )  # fmt: skip
    if kind == "rend":
        _, tenant, turn, rid, status = action
        return ResponseEnded(
            event_id=f"e{n}", tenant=tenant, turn_id=turn, response_id=rid,
            status=ResponseStatus(status), reason="" if status == "completed" else "filtered",
            **common,
        )  # fmt: skip
    if kind == "turn":
        _, tenant, turn, actor = action
        return TurnStarted(tenant=tenant, turn_id=turn, actor=actor, **cmd)
    if kind == "cancel":
        _, tenant, turn = action
        return TurnCancelled(tenant=tenant, turn_id=turn, reason="user_stop", **cmd)
    if kind in ("confirm", "deny"):
        _, ids, actor, digest = action
        model = CallConfirmed if kind == "confirm" else CallDenied
        return model(actor=actor, args_digest=digest, **ids, **cmd)
    if kind == "tool_off":
        return ToolDisabled(tool=action[1], tenant=action[2], **cmd)
    if kind == "tool_on":
        return ToolEnabled(tool=action[1], tenant=action[2], **cmd)
    if kind == "stop":
        return TenantStopped(tenant=action[1], **cmd)
    if kind == "resume":
        return TenantResumed(tenant=action[1], **cmd)
    raise AssertionError(kind)


def run(seed: int, responses: int) -> list[str]:
    """One digest per step: the encoded outputs and the changelog drained after the step."""
    workload = Workload(seed)
    actions = workload.actions(responses)
    rng = random.Random(seed + 1)
    assembler = Assembler(registry(), LIMITS, verifier=AllowUnsigned())
    now = 1000.0
    digests: list[str] = []
    for n, action in enumerate(actions):
        now += rng.choice(
            [0.0, 0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 6.0 if rng.random() < 0.05 else 0.0]
        )
        if action[0] == "tick":
            outs = assembler.tick(now)
        elif action[0] == "raw":
            outs = assembler.handle(action[1], now, source=RecordSource("fragments", 0, n))
        else:
            outs = assembler.handle(_event(action, n, now), now)
        h = hashlib.sha256()
        for record in outs:
            h.update(encode(record))
            h.update(b"\n")
        for change in assembler.drain_changes():
            h.update(change.key.encode("utf-8", "surrogatepass"))
            h.update(b"=" + (change.value if change.value is not None else b"<deleted>") + b"\n")
        h.update(
            orjson.dumps(
                [assembler.open_buffers, assembler.inert_calls, assembler.late_events,
                 assembler.duplicate_deltas, assembler.evictions, assembler.turn_evictions]
            )
        )  # fmt: skip
        digests.append(h.hexdigest()[:16])
        _check_indexes(assembler)
    return digests


def _check_indexes(assembler: Assembler) -> None:
    """The Assembler's private indexes agree with its public tables at every step."""
    live = {key.as_tuple: buf for key, buf in assembler.calls.items()}
    assert assembler.state.live == live
    assert not set(live) & set(assembler.inert)
    assert all(live[t] is buf and buf.counted for t, buf in assembler.state.active.items())


SEEDS = (1, 2, 3)
RESPONSES = 400


def golden() -> dict[str, list[str]]:
    return {str(seed): run(seed, RESPONSES) for seed in SEEDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the golden file")
    args = parser.parse_args()
    data = golden()
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(data, indent=0) + "\n")
    print({seed: len(d) for seed, d in data.items()})


if __name__ == "__main__":
    main()
