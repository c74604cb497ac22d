"""``processor replay`` run as a black box, for unit tests: JSON lines in, JSON lines with a
``kind`` out, and a scenario of lines for it (a call dispatched, a turn cancelled mid-call)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from processor.core.events import encode
from tests.unit.scenario import Call, turn_cancelled, turn_started

ROOT = Path(__file__).parents[2]
TOOLS = ROOT / "examples" / "tools.yaml"


def replay(lines: list[bytes], *extra: str) -> tuple[list[dict[str, object]], str]:
    result = subprocess.run(
        [sys.executable, "-m", "processor.cli", "replay", "--tools", str(TOOLS), *extra, "-"],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        check=True,
        cwd=ROOT,
    )
    return [orjson.loads(line) for line in result.stdout.splitlines()], result.stderr.decode()


def scenario() -> list[bytes]:
    good, stopped = Call(call_id="call_0"), Call(call_id="call_1", turn_id="turn-2")
    events = [turn_started(), turn_started("turn-2"), *good.stream('{"city": "Paris"}', 4)]
    events += stopped.stream('{"city": "Rome"}')[:2]
    events.append(turn_cancelled("turn-2"))
    events += stopped.stream('{"city": "Rome"}')[2:]
    return [encode(e) for e in events]
