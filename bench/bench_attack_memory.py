"""Memory under attack: the Assembler's resident memory while hostile traffic hits its bounds.

Each scenario runs in a fresh process (``python bench/bench_attack_memory.py --scenario NAME``)
on one sans-IO :class:`~processor.core.assembler.Assembler` (one partition) with the default
:class:`~processor.core.policy.Limits`, and reports the RSS growth over the process's baseline
(after imports and set-up), the peak (VmHWM), what the Assembler holds afterwards, and whether a
victim tenant's valid call still dispatches after the attack (it must: a bound that is hit fails
the attacker's call or record inert, never the worker, never other tenants).

Scenarios (``--scale N`` divides the three 1,000,000 counts by N; the others always run whole):

=================  ===============================================================================
endless_deltas     one call, 200,000 deltas of 1 KiB (195 MiB sent) to one call
call_ids           1,000,000 distinct call ids (call.started) on one partition, 1,000 turns
tenants            10,000 tenants, one open call each (with a delta)
deep_nesting       one call whose deltas open 1,000,000 arrays
big_delta          one 50 MiB delta
turn_flood         1,000,000 turn.started without any fragment
command_flood      1,000,000 distinct command ids (tool.enabled, replay-protected)
=================  ===============================================================================

Run: ``python bench/bench_attack_memory.py`` (all; results in bench/results/attack_memory.json);
the table in docs/reliability.md ("Memory under attack") is this output.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
MIB = 1024 * 1024
SCENARIOS = (
    "endless_deltas",
    "call_ids",
    "tenants",
    "deep_nesting",
    "big_delta",
    "turn_flood",
    "command_flood",
    "response_ends",
)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def run_scenario(name: str, scale: int) -> dict[str, Any]:
    from processor.core.assembler import Assembler  # noqa: PLC0415
    from processor.core.events import (  # noqa: PLC0415
        Audit,
        CallDelta,
        CallEnded,
        CallStarted,
        Dispatch,
        Ledger,
        ResponseEnded,
        ResponseStatus,
        ToolEnabled,
        TurnStarted,
    )
    from processor.core.registry import Registry  # noqa: PLC0415

    registry = Registry.from_document(
        {"tools": [{"name": "get_weather", "parameters": {"type": "object"}}]}
    )
    asm = Assembler(registry)
    now = 1_000.0
    reasons: Counter[str] = Counter()
    events = 0

    def base(tenant: str, turn: str, call: str = "c", response: str = "r") -> dict[str, Any]:
        return {"tenant": tenant, "turn_id": turn, "response_id": response, "item_id": call,
                "call_id": call, "provider": "bench", "ts": now}  # fmt: skip

    def feed(event: Any) -> list[Any]:
        nonlocal events
        events += 1
        out = asm.handle(event, now)
        if events % 500 == 0:
            asm.drain_changes()  # as the worker does after every batch (≤ 500 records)
        for o in out:
            if isinstance(o, Ledger) and o.terminal_reason is not None:
                reasons[str(o.terminal_reason)] += 1
            elif isinstance(o, Audit) and o.rejection is not None:
                reasons[f"audit {o.rejection}"] += 1
        return out

    def started(tenant: str, turn: str, call: str = "c") -> CallStarted:
        b = base(tenant, turn, call)
        return CallStarted(**b, event_id=f"{tenant}.{turn}.{call}.s", tool="get_weather",
                           actor="u")  # fmt: skip

    def delta(tenant: str, turn: str, seq: int, text: str, call: str = "c") -> CallDelta:
        b = base(tenant, turn, call)
        return CallDelta(**b, event_id=f"{tenant}.{turn}.{call}.d{seq}", seq=seq, delta=text)

    def bind(tenant: str, turn: str, n: int = 0) -> TurnStarted:
        return TurnStarted(command_id=f"bind-{tenant}-{turn}-{n}", issued_by="gw",
                           issued_at=now, tenant=tenant, turn_id=turn, actor="u")  # fmt: skip

    def attack() -> Iterator[Any]:
        n = {k: max(1, v // scale) if k in SCALED else v for k, v in COUNTS.items()}
        if name == "endless_deltas":
            yield bind("evil", "t")
            yield started("evil", "t")
            chunk = '{"a":"' + "x" * 1018
            yield delta("evil", "t", 1, chunk)
            for seq in range(2, n[name] + 1):
                yield delta("evil", "t", seq, "x" * 1024)
        elif name == "call_ids":
            for i in range(n[name]):
                turn = f"t{i // 1000}"
                if i % 1000 == 0:
                    yield bind("evil", turn)
                yield started("evil", turn, f"call_{i}")
        elif name == "tenants":
            for i in range(n[name]):
                yield bind(f"tenant-{i}", "t")
                yield started(f"tenant-{i}", "t")
                yield delta(f"tenant-{i}", "t", 1, '{"city": "')
        elif name == "deep_nesting":
            yield bind("evil", "t")
            yield started("evil", "t")
            yield delta("evil", "t", 1, '{"a":')
            for seq in range(2, n[name] // 1000 + 2):
                yield delta("evil", "t", seq, "[" * 1000)
        elif name == "big_delta":
            yield bind("evil", "t")
            yield started("evil", "t")
            yield delta("evil", "t", 1, '{"a":"' + "x" * (50 * MIB) + '"}')
        elif name == "turn_flood":
            for i in range(n[name]):
                yield bind("evil", f"t{i}")
        elif name == "command_flood":
            for i in range(n[name]):
                yield ToolEnabled(command_id=f"enable-{i}", issued_by="ops", issued_at=now,
                                  expires_at=now + 600, tenant="evil", tool="get_weather",
                                  reason="flood")  # fmt: skip
        elif name == "response_ends":  # verdicts of distinct responses, no calls: one record each
            for i in range(n[name]):
                b = base("evil", f"t{i // 1000}", response=f"r{i}")
                del b["item_id"], b["call_id"]
                yield ResponseEnded(**b, event_id=f"evil.r{i}.end", status=ResponseStatus.FAILED,
                                    reason="error")  # fmt: skip

    def victim() -> bool:
        """A valid call of another tenant, after the attack: it must dispatch."""
        out = feed(bind("victim", "v"))
        b = base("victim", "v")
        out += feed(started("victim", "v"))
        out += feed(delta("victim", "v", 1, '{"city": "Oslo"}'))
        out += feed(CallEnded(**b, event_id="victim.e", seq=2, terminal_event_id="victim.t"))
        del b["item_id"], b["call_id"]
        out += feed(ResponseEnded(**b, event_id="victim.end", status=ResponseStatus.COMPLETED,
                                  reason="stop"))  # fmt: skip
        return any(isinstance(o, Dispatch) for o in out)

    baseline = _status_kib("VmRSS")
    t0 = time.perf_counter()
    for event in attack():
        feed(event)
    del event  # the loop variable would keep the last (maybe 50 MiB) event alive
    seconds = time.perf_counter() - t0
    after = _status_kib("VmRSS")
    return {
        "scenario": name,
        "events": events,
        "seconds": round(seconds, 2),
        "rss_growth_mib": round((after - baseline) / 1024, 1),
        "peak_growth_mib": round((_status_kib("VmHWM") - baseline) / 1024, 1),
        "open_buffers": len(asm.state.active),
        "call_records": len(asm.calls),
        "turn_records": len(asm.control.turns),
        "response_records": len(asm.control.responses),
        "seen_command_ids": len(asm.control.seen_commands),
        "terminal_reasons": dict(reasons.most_common(3)),
        "victim_dispatched": victim(),
    }


COUNTS = {
    "endless_deltas": 200_000,
    "call_ids": 1_000_000,
    "tenants": 10_000,
    "deep_nesting": 1_000_000,
    "big_delta": 1,
    "turn_flood": 1_000_000,
    "command_flood": 1_000_000,
    "response_ends": 1_000_000,
}


SCALED = ("call_ids", "turn_flood", "command_flood", "response_ends")  # --scale divides only these


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| scenario | events | s | RSS growth MiB | peak growth MiB | open buffers | call "
            "records | turn records | response records | seen ids | ended as | victim dispatched |")  # fmt: skip
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        reasons = ", ".join(f"{k} {v}" for k, v in r["terminal_reasons"].items()) or "-"
        lines.append(
            f"| {r['scenario']} | {r['events']:,} | {r['seconds']} | {r['rss_growth_mib']} | "
            f"{r['peak_growth_mib']} | {r['open_buffers']:,} | {r['call_records']:,} | "
            f"{r['turn_records']:,} | {r.get('response_records', 0):,} | "
            f"{r['seen_command_ids']:,} | {reasons} | "
            f"{'yes' if r['victim_dispatched'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", choices=SCENARIOS)
    parser.add_argument("--scale", type=int, default=1, help="divide every count by this")
    args = parser.parse_args(argv)
    if args.scenario:
        print(json.dumps(run_scenario(args.scenario, args.scale)))
        return 0
    rows = []
    for name in SCENARIOS:
        res = subprocess.run(
            [sys.executable, __file__, "--scenario", name, "--scale", str(args.scale)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            print(f"{name}: crashed\n{res.stderr[-2000:]}", file=sys.stderr)
            return 1
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    if args.scale == 1:
        out = HERE / "results" / "attack_memory.json"
        out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main())
