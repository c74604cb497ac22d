"""What the inputs and the state changelog hold of a call the checker found lost.

The checker's ``lost_details`` say what the ledger and the statuses hold of a lost call; when
they hold nothing, the question is where the call stopped. :func:`trail` reads, for each lost
call, the records of its turn on ``control`` (type, partition, offset, time), its records on
``fragments`` (how many, their types, the first and last offsets and times), and every version
of its turn's, its responses' and its own records in the changelog (state and timing facts:
never argument text), with the driver's times for the turn. A failed short run in CI prints it,
so that a loss seen once is diagnosed from the log alone (issue 31: the short cluster run lost
a call once, and its topics were gone).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from processor.core.wire_types import decode_key
from processor.kafka.tail import read_records
from processor.settings import Settings
from tests.chaos.workload import Plan

CallKey = tuple[str, str, str]

# changelog facts worth a line: states and times, never texts or arguments
_CALL_FACTS = (
    "state", "reason", "fragment_count", "started_at", "last_activity", "awaiting_binding_since",
    "validated_at", "barrier", "expires_at", "ended_at", "dispatch_id", "validation_result",
)  # fmt: skip
_TURN_FACTS = ("actor", "cancelled", "last_seen")


async def trail(settings: Settings, plan: Plan, lost: list[CallKey]) -> list[dict[str, Any]]:
    """One entry per lost call (at most five): its plan times, control, fragments, changelog."""
    calls = lost[:5]
    if not calls:
        return []
    turns = {(t, u) for t, u, _ in calls}
    control: dict[tuple[str, str], list[Any]] = {k: [] for k in turns}
    fragments: dict[CallKey, list[tuple[int, int, float, str]]] = {k: [] for k in calls}
    changelog: dict[tuple[str, str], list[Any]] = {k: [] for k in turns}
    topics = settings.topics
    async for r in read_records(settings, topics.control):
        v = _object(r.value)
        if v is not None and (v.get("tenant"), v.get("turn_id")) in turns:
            when = round(r.timestamp / 1000, 3)
            control[(v["tenant"], v["turn_id"])].append(
                (r.partition, r.offset, when, v.get("type"))
            )
    async for r in read_records(settings, topics.fragments):
        v = _object(r.value)
        if v is None:
            continue
        k = (v.get("tenant"), v.get("turn_id"), v.get("call_id"))
        if k in fragments:
            fragments[k].append((r.partition, r.offset, r.timestamp / 1000, str(v.get("type"))))
        elif v.get("type") == "response.ended" and (k[0], k[1]) in turns:
            control[(str(k[0]), str(k[1]))].append(
                (r.partition, r.offset, round(r.timestamp / 1000, 3), "fragments:response.ended")
            )
    async for r in read_records(settings, topics.changelog):
        entry = _change(r.key, r.value, turns)
        if entry is not None:
            owner, kind, facts = entry
            changelog[owner].append(
                (r.partition, r.offset, round(r.timestamp / 1000, 3), kind, facts)
            )
    by_turn = {(t.tenant, t.turn_id): t for t in plan.turns}
    out = []
    for k in calls:
        turn = by_turn.get((k[0], k[1]))
        frags = fragments[k]
        out.append(
            {
                "call": k,
                "plan": None
                if turn is None
                else {
                    "fate": str(turn.fate),
                    "acked": turn.acked,
                    "stream_at": round(turn.stream_at, 3),
                    "bound_at": round(turn.bound_at, 3),
                    "written_at": round(turn.written_at, 3),
                },
                "control": control[(k[0], k[1])],
                "fragments": {
                    "count": len(frags),
                    "types": dict(Counter(t for _, _, _, t in frags)),
                    "first": _at(frags[0]) if frags else None,
                    "last": _at(frags[-1]) if frags else None,
                },
                "changelog": changelog[(k[0], k[1])],
            }
        )
    return out


def _object(value: bytes | None) -> dict[str, Any] | None:
    try:
        v = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    return v if isinstance(v, dict) else None


def _at(record: tuple[int, int, float, str]) -> tuple[int, int, float, str]:
    partition, offset, when, kind = record
    return partition, offset, round(when, 3), kind


def _change(
    key: bytes | None, value: bytes | None, turns: set[tuple[str, str]]
) -> tuple[tuple[str, str], str, dict[str, Any] | None] | None:
    """(turn, kind, facts) of a changelog record of one of ``turns`` (facts None: a tombstone)."""
    text = (key or b"").decode("utf-8", "replace")
    kind, _, rest = text.partition(":")
    if kind not in ("call", "turn", "resp"):
        return None
    try:
        parts = decode_key(rest)
    except ValueError:
        return None
    if len(parts) < 2 or (parts[0], parts[1]) not in turns:
        return None
    data = _object(value) if value is not None else None
    if data is None:
        return (parts[0], parts[1]), kind, None
    wanted = _CALL_FACTS if kind == "call" else _TURN_FACTS if kind == "turn" else tuple(data)
    facts = {f: data[f] for f in wanted if f in data and f not in ("arguments", "texts")}
    if kind == "call":
        facts["call_id"] = parts[-1]
    return (parts[0], parts[1]), kind, facts
