"""Closing the agent loop: the terminal fragments sent → the call's outcome in the agent's hands.

On the real broker: a worker subprocess, an in-process executor whose handler returns at once
(no-op), and one :class:`processor.OutcomeFollower`. Per call, one turn: the agent follows it
(``follow``, timed on its own), writes ``turn.started``, publishes the call's opening fragments,
then, clock started, its terminal fragments (``call.ended`` and the response's normal end) and
waits for the outcome (``followed.wait``): the worker's transaction, the dispatch, the
executor's fence (control barrier), claim, handler and outcome transaction, and the follower's
read of ``results``. Calls run one after another (an agent waits for its outcome).

The floor: the same call run in-process by the agent, no Kafka: the same fragments through an
in-process :class:`processor.Assembler` with the same registry (the terminal ones timed), and
the no-op handler awaited on the dispatch it returns.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python bench/bench_agent_loop.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import processor  # noqa: E402
from processor.core.events import Dispatch, TurnStarted  # noqa: E402
from processor.executor.handlers import Call, Handlers  # noqa: E402
from tests.integration.conftest import TOOLS_YAML, Runtime, call_events  # noqa: E402
from tests.integration.executor_harness import Executor  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "agent_loop.json"
ARGUMENTS = '{"location": "Paris", "units": "c"}'


async def noop(call: Call) -> dict[str, Any]:
    return {"ok": True}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(seconds: list[float]) -> dict[str, float]:
    return {
        "p50_ms": statistics.median(seconds) * 1000,
        "p99_ms": percentile(seconds, 0.99) * 1000,
        "max_ms": max(seconds) * 1000,
    }


async def floor(calls: int) -> list[float]:
    """The same call in-process: the Assembler's decision and the handler, no Kafka."""
    registry = processor.Registry.from_document(
        __import__("yaml").safe_load(TOOLS_YAML)  # the bench's registry, as the worker's
    )
    assembler = processor.Assembler(registry)
    took = []
    for n in range(calls):
        turn = f"f-{n}"
        now = time.time()
        started = TurnStarted(
            command_id=f"ts-{turn}", issued_by="agent", issued_at=now, tenant="acme",
            turn_id=turn, actor="user-1",
        )  # fmt: skip
        assembler.handle(started, now)
        events = call_events("acme", turn, "c", ARGUMENTS, ts=now)
        for event in events[:-2]:
            assembler.handle(event, time.time())
        began = time.perf_counter()
        outputs = []
        for event in events[-2:]:
            outputs += assembler.handle(event, time.time())
        [dispatch] = [o for o in outputs if isinstance(o, Dispatch)]
        await noop(Call.from_dispatch(dispatch))
        took.append(time.perf_counter() - began)
    return took


async def measure(calls: int, bootstrap: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        rt = Runtime(bootstrap, f"bench-{uuid.uuid4().hex[:8]}.", Path(folder), 3)
        await rt.create_topics()
        handlers = Handlers()
        handlers.register("get_weather", noop, requires_confirmation=False)
        executor = Executor(rt.settings, handlers, group=f"{rt.prefix}exec")
        loop_took: list[float] = []
        follow_took: list[float] = []
        try:
            worker = rt.start_worker()
            await worker.wait_ready()
            await executor.start()
            async with (
                processor.OutcomeFollower(rt.settings) as follower,
                processor.Publisher(rt.settings) as publisher,
            ):
                for n in range(calls + 3):  # the first 3 warm up (metadata, first fetches)
                    turn = processor.TurnContext(tenant="acme", turn_id=f"t-{n}", actor="user-1")
                    began = time.perf_counter()
                    followed = await follower.follow(turn)
                    followed_at = time.perf_counter()
                    await publisher.start_turn(turn)
                    events = call_events("acme", turn.turn_id, "c", ARGUMENTS)
                    await publisher.publish(events[:-2])
                    followed.expect(events[:1])
                    sent = time.perf_counter()
                    await publisher.publish(events[-2:])
                    report = await followed.wait(60)
                    done = time.perf_counter()
                    followed.close()
                    [outcome] = report.outcomes
                    if outcome.kind is not processor.OutcomeKind.RAN:
                        raise RuntimeError(f"call {n}: {outcome.kind} {outcome.reason}")
                    if n >= 3:
                        loop_took.append(done - sent)
                        follow_took.append(followed_at - began)
        finally:
            await executor.stop()
            await rt.close()
    in_process = await floor(calls)
    loop, base = summary(loop_took), summary(in_process)
    return {
        "benchmark": "agent_loop",
        "calls": calls,
        "rows": {
            "through Kafka (worker, executor, follower)": loop,
            "in-process (the floor: Assembler + handler)": base,
        },
        "follow": summary(follow_took),
        "ratio_p50": loop["p50_ms"] / base["p50_ms"],
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['calls']} calls, one after another, a no-op handler; from the terminal "
        "fragments sent (`call.ended`, `response.ended`) to the outcome in the agent's hands.",
        "",
        "| path | p50 | p99 | max |",
        "|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        lines.append(
            f"| {name} | {row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms | {row['max_ms']:.2f} ms |"
        )
    follow = result["follow"]
    lines += [
        "",
        f"`follow` (before `start_turn`, not in the figures above): p50 {follow['p50_ms']:.1f} ms,"
        f" p99 {follow['p99_ms']:.1f} ms. p50 through Kafka / in-process: "
        f"{result['ratio_p50']:.0f}x.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    result = asyncio.run(measure(args.calls, bootstrap))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
