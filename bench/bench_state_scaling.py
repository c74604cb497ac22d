"""A worker step's cost against the state its partition holds: bounded state must not mean slower steps.

A partition may hold up to ``max_open_buffers`` open calls (10,000 by default) and, for the
retention window, the turn, response and terminal call records of many more. Work a step does
over the whole state, rather than over what the step touched, makes every step slower as the
state grows: a defect this benchmark found twice (the buffered-bytes gauge summed every open
buffer at each step; the frozen-objects gauge counted every frozen object at each aging).

One partition's ``PartitionTask`` (in process, no Kafka: the worker's build, its changelog
drain and output encoding) first loads, in steps of about 500 records as the worker reads them:

* ``empty``: nothing (beyond the 1,000 calls both modes are warmed up with);
* ``full``: ``--open`` open calls (``call.started`` and one delta each, never ended: slow
  streams, spread over 200 tenants; 9,000 leaves room under the bound, where a new call would
  evict or be refused) and ``--retained`` complete calls (dispatched: their turn,
  response and terminal call records stay for the retention window).

Then the timed part: ``--calls`` new calls (each its ``turn.started`` on control and its six
fragment records: the worker benchmark's workload), made ahead, in steps of 70 calls. Each step
is what the worker does per iteration besides Kafka: the collector's aging
(:mod:`processor.runtime.collector`), ``PartitionTask.build``, then the gauges it exports after
each iteration (``worker.export_state_gauges``: open buffers, buffered bytes). Reported per
state: the median step's build cost a call and its ratio ``full`` / ``empty`` (flat is 1.0),
the gauges' cost a step, and two things that run on a clock rather than per step: the expiry
tick (once a second, over the open buffers) and a Prometheus scrape (it counts the frozen
objects, a walk over all of them). Each run is a fresh process; the modes' runs are
interleaved (``--repeat`` each) and medians kept.

    .venv/bin/python bench/bench_state_scaling.py [--open 9000] [--retained 100000]
        [--calls 5000] [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:  # run as a script, or loaded by path (tests, run_all)
    sys.path.insert(0, str(HERE))

from fresh_runs import every_run, interleaved  # noqa: E402

MODES = ("empty", "full")
STEP_CALLS = 70  # about 500 records a step, as a worker reads them (batch_max_records)
WARMUP = 1_000  # calls fed first in both modes (part of the state held)


def child(mode: str, open_calls: int, retained: int, calls: int) -> dict[str, Any]:
    """One run in this process (a fresh one): load the state, then time the steps."""
    sys.path[:0] = [str(ROOT), str(HERE)]
    import bench_worker_kafka as workload  # noqa: PLC0415
    import yaml  # noqa: PLC0415
    from aiokafka.structs import ConsumerRecord  # noqa: PLC0415
    from prometheus_client import generate_latest  # noqa: PLC0415

    from processor.core.assembler import Assembler  # noqa: PLC0415
    from processor.core.events import encode, turn_key  # noqa: PLC0415
    from processor.core.registry import Registry  # noqa: PLC0415
    from processor.runtime.collector import Collector  # noqa: PLC0415
    from processor.runtime.partition import PartitionTask  # noqa: PLC0415
    from processor.runtime.worker import export_state_gauges  # noqa: PLC0415
    from processor.settings import Settings  # noqa: PLC0415
    from tests.integration.conftest import TOOLS_YAML  # noqa: PLC0415

    registry = Registry.from_document(yaml.safe_load(TOOLS_YAML))
    settings = Settings()
    task = PartitionTask(0, settings, lambda: Assembler(registry))
    # every turn routes to partition 0: the routing check still runs
    task.progress.input_partitions = 1
    collector = Collector(settings.gc_freeze_interval_seconds)
    topics = settings.topics
    offsets = {topics.control: 0, topics.fragments: 0}

    def records(topic: str, items: list[tuple[bytes, bytes]]) -> list[Any]:
        first, stamp = offsets[topic], int(time.time() * 1000)
        offsets[topic] += len(items)
        return [
            ConsumerRecord(topic, 0, first + i, stamp, 0, k, v, None, len(k), len(v), [])
            for i, (k, v) in enumerate(items)
        ]

    def batch(first: int, count: int, whole: bool) -> dict[str, list[Any]]:
        """Calls first..first+count-1 as one step's records: whole, or started with one delta."""
        control, fragments = [], []
        for n in range(first, first + count):
            started, events = workload.call_records(n, "t", ts=time.time())
            key = turn_key(started.tenant, started.turn_id).encode()
            control.append((key, encode(started)))
            fragments += [(key, encode(e)) for e in (events if whole else events[:2])]
        return {
            "control": records(topics.control, control),
            "fragments": records(topics.fragments, fragments),
        }

    def build(records: dict[str, list[Any]]) -> int:
        """Feed one step; returns the calls it dispatched."""
        end = records["control"][-1].offset + 1
        done = task.build(records, time.time(), barrier=end, control_position=end)
        return done.outputs.get("dispatch", 0)

    def step(first: int, count: int, whole: bool) -> None:
        build(batch(first, count, whole))

    for first in range(0, WARMUP, STEP_CALLS):  # both modes: caches filled, code warm
        step(first, min(STEP_CALLS, WARMUP - first), whole=True)
    n = WARMUP
    if mode == "full":
        for first in range(n, n + retained, STEP_CALLS):
            step(first, min(STEP_CALLS, n + retained - first), whole=True)
        n += retained
        for first in range(n, n + open_calls, STEP_CALLS):
            step(first, min(STEP_CALLS, n + open_calls - first), whole=False)
        n += open_calls
    collector.settle(time.monotonic())
    assembler = task.assembler
    held = {"open_buffers": assembler.open_buffers, "inert_calls": assembler.inert_calls}

    steps = [  # made before the timing starts: only the worker's work is timed
        batch(first, min(STEP_CALLS, n + calls - first), whole=True)
        for first in range(n, n + calls, STEP_CALLS)
    ]
    builds, upkeep, dispatched = [], [], 0
    for records_of_step in steps:
        started = time.perf_counter()
        collector.age(time.monotonic())  # Worker._collect, before each poll
        dispatched += build(records_of_step)
        built = time.perf_counter()
        export_state_gauges([task])  # Worker._export_gauges, after each iteration
        done = time.perf_counter()
        builds.append((built - started) / len(records_of_step["control"]))
        upkeep.append(done - built)
    if dispatched != calls:  # a refused call (say, at the open-buffer bound) costs less
        raise SystemExit(f"{mode}: {dispatched} of {calls} timed calls dispatched")
    ticks, scrapes = [], []
    for _ in range(5):
        started = time.perf_counter()
        assembler.tick(time.time())
        ticked = time.perf_counter()
        generate_latest()  # a Prometheus scrape (it counts the frozen objects)
        ticks.append(ticked - started)
        scrapes.append(time.perf_counter() - ticked)
    return {
        **held,
        "us_per_call": statistics.median(builds) * 1e6,
        "gauges_us": statistics.median(upkeep) * 1e6,
        "gauges_max_us": max(upkeep) * 1e6,
        "tick_ms": statistics.median(ticks) * 1e3,
        "scrape_ms": statistics.median(scrapes) * 1e3,
        "frozen_objects": collector.frozen(),
    }


def run(open_calls: int, retained: int, calls: int, repeat: int) -> dict[str, Any]:
    runs = interleaved(
        __file__,
        MODES,
        ["--open", str(open_calls), "--retained", str(retained), "--calls", str(calls)],
        repeat,
        lambda mode, result: (
            f"{mode:6s} {result['open_buffers']:6d} open, {result['inert_calls']:7d} "
            f"retained: build {result['us_per_call']:6.1f} us a call, gauges "
            f"{result['gauges_us']:.0f} us a step, tick {result['tick_ms']:.2f} ms, "
            f"scrape {result['scrape_ms']:.1f} ms"
        ),
    )
    medians = {
        mode: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for mode, rs in runs.items()
    }
    return {
        "open": open_calls,
        "retained": retained,
        "calls": calls,
        "repeat": repeat,
        "runs": runs,
        "medians": medians,
        "ratio_full_vs_empty": medians["full"]["us_per_call"] / medians["empty"]["us_per_call"],
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["medians"]
    lines = [
        f"{result['calls']:,} new calls through one partition's build in steps of "
        f"{STEP_CALLS} calls, with the collector's aging and the gauges; medians of "
        f"{result['repeat']} interleaved runs of each state, each a fresh process.",
        "",
        "| state held | open buffers | retained calls | objects frozen | build, us a call "
        "(median step) | gauges, us a step (median / max) | expiry tick | a metrics scrape |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        r = m[mode]
        lines.append(
            f"| {mode} | {r['open_buffers']:,.0f} | {r['inert_calls']:,.0f} | "
            f"{r['frozen_objects']:,.0f} | {r['us_per_call']:.1f} | "
            f"{r['gauges_us']:.0f} / {r['gauges_max_us']:.0f} | {r['tick_ms']:.2f} ms | "
            f"{r['scrape_ms']:.1f} ms |"
        )
    lines += [
        "",
        f"Build cost a call, full / empty: {result['ratio_full_vs_empty']:.2f} (flat is 1.0). "
        + every_run(result["runs"], "us_per_call", "us"),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--open", type=int, default=9_000)
    parser.add_argument("--retained", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "state_scaling.json")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.open, args.retained, args.calls)))
        return
    result = run(args.open, args.retained, args.calls, args.repeat)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(markdown(result))


if __name__ == "__main__":
    main()
