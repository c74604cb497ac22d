"""Partition takeover with N open buffers, relative to reading the same changelog bytes raw (issue 11).

The state is built through the real path. On fresh topics (one partition), N calls are
produced, each in its own turn (``turn.started`` on control; ``call.started`` and three
deltas on fragments, no ``call.ended``), spread over 200 tenants, so every call stays an open
buffer (collecting). A ``processor worker`` subprocess consumes them with a local state store
(``PROCESSOR_STATE_DIR``), the group's offsets reach the end of both inputs and its
open-buffer gauge reads N, then it is stopped with SIGTERM. Its changelog partition then holds
the N open buffers; its state directory holds its store with the checkpoint of its last commit.
The worker's limits are raised for the bench (``max_open_buffers`` >= N, an idle timeout of a
day, so nothing expires while the bench runs).

Then, interleaved, ``--repeat`` times each (the order rotates from one repeat to the next):

* ``full``: a fresh :class:`~processor.runtime.partition.PartitionTask` ``prepare`` without a
  state directory: fence (InitProducerId), restore the whole changelog partition into a fresh
  Assembler, read the group's committed offsets and seek. What a worker without
  ``PROCESSOR_STATE_DIR`` does when a partition moves to it.
* ``full + new store``: the same with an empty state directory: the restore also writes every
  record to a new local RocksDB store (a worker with a state directory taking a partition it
  never held).
* ``checkpoint``: ``prepare`` with the previous owner's state directory: open its store, load
  it, then read the changelog tail after its checkpoint (empty: the owner stopped cleanly).
* ``raw``: a read_committed consumer with the restore's own settings
  (:func:`~processor.kafka.clients.committed_reader`, 16 MiB fetches, 5,000 records a poll,
  :func:`~processor.kafka.clients.read_to_end`) reading the same changelog partition from the
  beginning to its end offset, counting key + value bytes, decoding nothing; start to stop of
  the consumer, as the restore's own timing.

Each ``prepare`` runs in this process, under the worker's garbage-collector policy
(:mod:`processor.runtime.collector`: a restore freezes its state as it goes, and the process
settles between takeovers), against a consumer of the worker's group that is
started and assigned beforehand (the worker's consumer exists when a partition is assigned);
its time is from the call to its return. After each, the restored open-buffer count is checked
(= N), and on the first repeat the restored buffers of every path are compared.

    .venv/bin/python bench/bench_takeover.py [--buffers 10000] [--repeat 5]
        [--out bench/results/takeover.json] [--smoke]

Fresh, uniquely named topics on the shared broker (``KAFKA_BOOTSTRAP_SERVERS``, default
127.0.0.1:9092), deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_worker_kafka import TENANTS, arguments, produce_backlog, with_runtime  # noqa: E402

RESULTS = HERE / "results" / "takeover.json"
KINDS = ("raw", "full", "full + new store", "checkpoint")
DELTAS = 3  # argument pieces per call (all sent; the call is never ended)


# ============================================================================ the state


def open_call(n: int) -> tuple[Any, list[Any]]:
    """Turn n's ``turn.started`` and its call's start and deltas (no end: an open buffer)."""
    from tests.integration.conftest import call_events, turn_started  # noqa: PLC0415

    tenant, turn = f"tk{n % TENANTS}", f"turn{n}"
    events = call_events(tenant, turn, f"call{n}", arguments(n), pieces=DELTAS, end_response=False)
    return turn_started(tenant, turn), events[:-1]  # without call.ended


async def produce_open_calls(rt: Any, buffers: int) -> int:
    """Every turn.started on control, then each call's start and deltas; returns events sent
    (both topics)."""
    return await produce_backlog(rt, buffers, open_call) + buffers


def limits_env(buffers: int) -> dict[str, str]:
    """Room for every buffer; nothing expires while the bench runs."""
    return {
        "PROCESSOR_LIMITS__MAX_OPEN_BUFFERS": str(max(10_000, buffers)),
        "PROCESSOR_LIMITS__IDLE_TIMEOUT_SECONDS": "86400",
    }


def gauge(metrics_text: str, name: str, partition: int = 0) -> float | None:
    found = re.search(rf'^{name}{{partition="{partition}"}} (\S+)$', metrics_text, re.M)
    return float(found.group(1)) if found else None


async def build_state(rt: Any, buffers: int, state_dir: Path, timeout: float) -> dict[str, Any]:
    """Produce the open calls, let one worker consume and commit them all, stop it cleanly."""
    t0 = time.perf_counter()
    events = await produce_open_calls(rt, buffers)
    produced = time.perf_counter() - t0
    env = {
        "PROCESSOR_LOG_LEVEL": "WARNING",
        "PROCESSOR_STATE_DIR": str(state_dir),
        **limits_env(buffers),
    }
    worker = rt.start_worker("owner", **env)
    t0 = time.perf_counter()
    try:
        await worker.wait_ready(90)
        await rt.wait_caught_up(timeout)
        deadline = time.perf_counter() + 30
        while (held := gauge(await worker.metrics(), "toolcall_open_buffers")) != buffers:
            if time.perf_counter() > deadline:
                raise AssertionError(f"the owner holds {held} open buffers, not {buffers}")
            await asyncio.sleep(0.2)
        consumed = time.perf_counter() - t0
    except BaseException:
        print(worker.log()[-4000:], file=sys.stderr)
        raise
    finally:
        worker.terminate()
    code = await worker.wait_exit(60)
    if code != 0:
        raise AssertionError(f"the owner exited {code}:\n{worker.log()[-4000:]}")
    return {"events": events, "produce_seconds": produced, "consume_seconds": consumed}


# ============================================================================ the measures


async def raw_read(settings: Any) -> dict[str, Any]:
    """Changelog partition 0 from the beginning to its end offset, bytes counted, undecoded."""
    from aiokafka.structs import TopicPartition  # noqa: PLC0415

    from processor.kafka.clients import committed_reader, read_to_end  # noqa: PLC0415

    tp = TopicPartition(settings.topics.changelog, 0)
    count = [0, 0]

    def apply(record: Any) -> None:
        count[0] += 1
        count[1] += len(record.key or b"") + len(record.value or b"")

    t0, c0 = time.perf_counter(), time.process_time()
    consumer = committed_reader(settings, max_partition_fetch_bytes=16 * 1024 * 1024)
    try:
        await consumer.start()
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        await read_to_end(
            consumer, tp, end, apply, deadline=time.monotonic() + 600, max_records=5000
        )
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.stop(), 5)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,  # of this process (the bench's own, all threads)
        "records": count[0],
        "bytes": count[1],
        "end_offset": end,
    }


def snapshot(assembler: Any) -> dict[Any, Any]:
    """The restored open buffers, comparable across restore paths."""
    return {key: (buf.snapshot(), dict(buf.texts)) for key, buf in assembler.calls.items()}


async def takeover(
    settings: Any, registry: Any, consumer: Any, state_dir: Path | None
) -> tuple[dict[str, Any], Any]:
    """One ``PartitionTask.prepare`` of partition 0, timed; (figures, its Assembler)."""
    from processor.core.assembler import Assembler  # noqa: PLC0415
    from processor.runtime.partition import PartitionTask  # noqa: PLC0415

    s = settings.model_copy(update={"state_dir": state_dir})
    limits = s.core_limits()
    task = PartitionTask(0, s, lambda: Assembler(registry, limits))
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        result = await task.prepare(consumer)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        await task.close()
    figures = {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "restore_seconds": result.seconds,  # inside prepare: the changelog read and apply
        "restore_kind": task.recovery.restore_kind,
        "changelog_records": result.records,
        "store_records": task.recovery.store_records,
        "skipped": result.skipped,
        "open_buffers": task.assembler.open_buffers,
    }
    return figures, task.assembler


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer  # noqa: PLC0415

    from processor.registry_file import load_registry  # noqa: PLC0415
    from processor.runtime import collector  # noqa: PLC0415
    from processor.settings import LimitsSettings  # noqa: PLC0415

    async def body(rt: Any) -> dict[str, Any]:
        owner_dir = rt.tmp_path / "owner-state"
        load = await build_state(rt, args.buffers, owner_dir, args.timeout)
        print(
            f"  state: {load['events']} events produced in {load['produce_seconds']:.1f} s, "
            f"consumed by the owner in {load['consume_seconds']:.1f} s",
            file=sys.stderr,
        )
        checkpoint = owner_checkpoint(owner_dir, rt.settings)
        limits = {
            k.removeprefix("PROCESSOR_LIMITS__").lower(): v
            for k, v in limits_env(args.buffers).items()
        }
        settings = rt.settings.model_copy(
            update={
                "limits": LimitsSettings.model_validate(limits),
                "restore_timeout_seconds": args.timeout,
            }
        )
        registry = load_registry(rt.tmp_path / "tools.yaml")
        policy = collector.install(settings.gc_freeze_interval_seconds)  # as the worker does
        consumer = AIOKafkaConsumer(
            group_id=settings.group_id,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            **settings.kafka_client_kwargs(),
        )
        await consumer.start()
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        try:
            consumer.assign(_input_tps(settings))
            await consumer.topics()  # metadata, as the worker's consumer has it
            for i in range(args.repeat):
                order = KINDS[i % len(KINDS) :] + KINDS[: i % len(KINDS)]
                restored: dict[str, Any] = {}
                for kind in order:
                    policy.settle(time.monotonic())  # the worker settles after each takeover
                    gc.collect()  # (and CPython's default, policy off, a full collection)
                    if kind == "raw":
                        runs[kind].append(await raw_read(settings))
                        continue
                    state_dir: Path | None = None
                    if kind != "full":  # a new directory each time (removed afterwards)
                        state_dir = Path(tempfile.mkdtemp(dir=rt.tmp_path)) / "state"
                        if kind == "checkpoint":  # the owner's store as it left it (not timed)
                            shutil.copytree(owner_dir, state_dir)
                    figures, assembler = await takeover(settings, registry, consumer, state_dir)
                    if state_dir is not None:
                        shutil.rmtree(state_dir.parent, ignore_errors=True)
                    if figures["open_buffers"] != args.buffers:
                        raise AssertionError(
                            f"{kind}: {figures['open_buffers']} open buffers restored, "
                            f"not {args.buffers}"
                        )
                    expected_kind = "checkpoint" if kind == "checkpoint" else "full"
                    if figures["restore_kind"] != expected_kind:
                        raise AssertionError(f"{kind}: restored as {figures['restore_kind']}")
                    runs[kind].append(figures)
                    if i == 0:
                        restored[kind] = snapshot(assembler)
                    del assembler
                if i == 0:
                    first = restored["full"]
                    for kind, state in restored.items():
                        if state != first:
                            raise AssertionError(f"{kind}: restored buffers differ from full")
                print(
                    f"  repeat {i + 1}: "
                    + ", ".join(f"{k} {runs[k][-1]['seconds'] * 1000:.0f} ms" for k in KINDS),
                    file=sys.stderr,
                )
        finally:
            await consumer.stop()
        load["owner_store_checkpoint"] = checkpoint
        return {"load": load, "runs": runs}

    measured = await with_runtime(1, body)
    return summarize(args.buffers, args.repeat, measured["load"], measured["runs"])


def owner_checkpoint(state_dir: Path, settings: Any) -> int | None:
    """The changelog offset the previous owner's local store reflects (its checkpoint)."""
    from processor.runtime.store import RocksStore  # noqa: PLC0415

    changelog = settings.topics.changelog
    path = state_dir / settings.application_id / f"{changelog}-0"
    store = RocksStore(path, {"changelog": changelog, "partition": 0}, cache_bytes=8 << 20)
    try:
        return store.checkpoint()
    finally:
        store.close()


def _input_tps(settings: Any) -> list[Any]:
    from aiokafka.structs import TopicPartition  # noqa: PLC0415

    return [TopicPartition(t, 0) for t in (settings.topics.fragments, settings.topics.control)]


def summarize(
    buffers: int, repeat: int, load: dict[str, Any], runs: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    medians = {k: statistics.median(r["seconds"] for r in rs) for k, rs in runs.items()}
    cpu_medians = {k: statistics.median(r["cpu_seconds"] for r in rs) for k, rs in runs.items()}
    restore_medians = {
        k: statistics.median(r["restore_seconds"] for r in rs)
        for k, rs in runs.items()
        if k != "raw"
    }
    raw = runs["raw"][0]
    full = runs["full"][0]
    return {
        "benchmark": "takeover",
        "buffers": buffers,
        "partitions": 1,
        "repeat": repeat,
        "deltas_per_call": DELTAS,
        "tenants": TENANTS,
        "load": load,
        "changelog": {
            "records": raw["records"],
            "bytes": raw["bytes"],  # key + value bytes of the records (no batch overhead)
            "end_offset": raw["end_offset"],
            "records_per_buffer": raw["records"] / buffers,
        },
        "store_records": runs["checkpoint"][0]["store_records"],
        "owner_store_checkpoint": load.get("owner_store_checkpoint"),
        "restored_open_buffers": {
            k: [r["open_buffers"] for r in rs] for k, rs in runs.items() if k != "raw"
        },
        "restored_changelog_records": full["changelog_records"],
        "runs": runs,
        "median_seconds": medians,
        "median_cpu_seconds": cpu_medians,  # this process's CPU time over the same span
        "median_restore_seconds": restore_medians,  # the changelog (and store) part of prepare
        "ratio_vs_raw": {k: medians[k] / medians["raw"] for k in KINDS if k != "raw"},
        "raw_mb_per_second": raw["bytes"] / 1e6 / medians["raw"],
        "full_buffers_per_second": buffers / medians["full"],
    }


# ============================================================================ output


def markdown(result: dict[str, Any]) -> str:
    c = result["changelog"]
    med, ratio = result["median_seconds"], result["ratio_vs_raw"]
    lines = [
        f"Takeover of one partition holding {result['buffers']:,} open buffers (each call "
        f"started, {result['deltas_per_call']} deltas, no end; {result['tenants']} tenants), "
        "built by a real `processor worker` and stopped cleanly. The changelog partition holds "
        f"{c['records']:,} records, {c['bytes'] / 1e6:.2f} MB of keys and values. Each takeover "
        "is one in-process `PartitionTask.prepare` (fence, restore, committed offsets, seek) "
        "timed from call to return; raw is a read_committed consumer with the restore's "
        "settings reading the same partition to its end offset, counting bytes without "
        f"decoding. Median of {result['repeat']} interleaved runs.",
        "",
        "| path | median | runs (ms) | CPU (median) | of which changelog read + apply | / raw |",
        "|---|---|---|---|---|---|",
    ]
    for kind in KINDS:
        runs = ", ".join(f"{r['seconds'] * 1000:.0f}" for r in result["runs"][kind])
        inner = result["median_restore_seconds"].get(kind)
        inner_s = f"{inner * 1000:.0f} ms" if inner is not None else "-"
        share = f"{ratio[kind]:.1f}x" if kind in ratio else "1"
        cpu = result["median_cpu_seconds"][kind] * 1000
        lines.append(
            f"| {kind} | {med[kind] * 1000:.0f} ms | {runs} | {cpu:.0f} ms | {inner_s} | {share} |"
        )
    lines += [
        "",
        f"Full takeover: {result['full_buffers_per_second']:,.0f} buffers/s; raw read: "
        f"{result['raw_mb_per_second']:.1f} MB/s. `checkpoint` loads the previous owner's "
        f"local store ({result['store_records']:,} records; a copy of it each run) and reads the "
        f"changelog tail after its checkpoint (offset {result['owner_store_checkpoint']}; the "
        f"partition ends at {c['end_offset']}: the tail holds no record after a clean stop, "
        "only the last commit marker). Each path includes the fence (InitProducerId). CPU: "
        "the bench process's CPU time over the same span (the rest is waiting on the broker).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--buffers", type=int, default=None, help="open buffers (10000)")
    parser.add_argument("--repeat", type=int, default=None, help="interleaved repeats (5)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--smoke", action="store_true", help="50 buffers, 1 repeat")
    parser.add_argument("--timeout", type=float, default=600.0, help="for the load and a restore")
    args = parser.parse_args(argv)
    if args.buffers is None:
        args.buffers = 50 if args.smoke else 10_000
    if args.repeat is None:
        args.repeat = 1 if args.smoke else 5
    result = asyncio.run(measure(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
