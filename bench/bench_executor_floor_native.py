"""The at-most-once floor with a native Kafka client: aiokafka's cost, or the protocol's?

Issue 39's targets for the executor (no-op handler: steady calls/s at least 0.3x a plain
aiokafka consumer's, CPU per call at most 3x) are missed even by ``floor`` of
``bench_executor_throughput.py``: the Kafka work of at-most-once with a claim ledger and nothing
else, with aiokafka. This benchmark runs the same floor with confluent-kafka (librdkafka, its
protocol path in C on threads of its own) beside it, and a plain consumer with each client, on
one ``dispatch`` backlog (``--calls`` calls, then ``--small-calls``, every turn started in
``control``), each contender in a process and a consumer group of its own, interleaved,
``--repeat`` times:

- **plain**, **floor**: ``bench_executor_throughput``'s own (run through its command line);
- **native plain**: a confluent-kafka consumer (read_committed, no auto-commit) that decodes
  each record with ``decode_dispatch``, runs the handler with up to ``--in-flight`` calls at
  once and commits each partition's offset past its completed calls, after each fetch, as
  ``plain`` does;
- **native floor**: ``floor``'s Kafka work with confluent-kafka: a transactional producer per
  ``dispatch`` partition (``transactional.id`` per partition); per fetched batch of a
  partition one transaction with a ``claimed`` ledger record per call and the offsets
  (``send_offsets_to_transaction`` with the consumer's group metadata), before the handlers
  start; the ends (a ledger record and a result per call) in one transaction per partition
  as they finish. The same records (``bench_executor_throughput.ledger_entry`` and
  ``result_record``), topics and keys; results partitioned by ``murmur2_random`` (the Java
  client's and aiokafka's partitioner, not librdkafka's default).

Both native contenders keep ``plain``'s and ``floor``'s shape: handlers are asyncio tasks on
one event loop (no thread per call), so the 100 ms handler runs as fairly as with aiokafka.
librdkafka's calls block, so the loop hands them to threads: the consumer's to one thread,
each partition's transactions to a thread of that partition's (one hand-off per fetch and per
transaction, not per call; the partition's thread also serialises its transactions, as the
floor's per-partition lock does).

Figures: steady calls/s (``_steady``), the process's CPU per call over its whole run
(``getrusage``: every thread of it, librdkafka's included), the marginal CPU per call (the
large backlog's run less the small one's, over the extra calls) and the broker's CPU ticks per
call (an upper bound: the broker is shared). Each run's count is checked: every contender
must report exactly the backlog's calls, and after each backlog both floors' ledger
(``claimed`` and ``succeeded``) and results must hold every dispatch id exactly once.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python bench/bench_executor_floor_native.py \\
        [--calls 2000] [--small-calls 300] [--repeat 3] [--handlers noop,sleep] [--out F]

Needs the ``bench-native`` extra (``pip install 'confluent-kafka>=2.16,<3'``); without it, it
says so and exits 0. ``make bench`` does not run it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import bench_executor_throughput as bte  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "executor_floor_native.json"
# the order each backlog is drained in, and the table's rows
CONTENDERS = ("plain", "native plain", "floor", "native floor")
NATIVE = {"native plain": "native-plain", "native floor": "native-floor"}


# ---------------------------------------------------------------------------- contenders


def _common(settings: Any) -> dict[str, Any]:
    """librdkafka's settings from ours: plaintext only here (fail closed on anything else)."""
    if settings.security_protocol != "PLAINTEXT":
        raise RuntimeError(
            f"this benchmark speaks PLAINTEXT only, not {settings.security_protocol}"
        )
    return {
        "bootstrap.servers": settings.bootstrap_servers,
        "client.id": settings.client_id,
        "socket.timeout.ms": settings.request_timeout_ms,
    }


def _consumer(settings: Any, group: str) -> Any:
    from confluent_kafka import Consumer  # noqa: PLC0415

    consumer = Consumer(
        {
            **_common(settings),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([settings.topics.dispatch])
    return consumer


def _rdkafka_cpu() -> float:
    """CPU seconds so far of this process's librdkafka threads (named ``rdk:…``), from their
    scheduler statistics (nanoseconds; clock ticks would round each thread to 10 ms)."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("rdk:"):
                total += int((task / "schedstat").read_text().split()[0])
        except OSError:
            continue  # a thread that ended meanwhile
    return total / 1e9


def _fetched(messages: list[Any]) -> list[Any]:
    for message in messages:
        if message.error() is not None:
            from confluent_kafka import KafkaException  # noqa: PLC0415

            raise KafkaException(message.error())
    return messages


async def native_plain(
    settings: Any, calls: int, seconds: float, limit: int, report: dict[str, Any] | None = None
) -> list[float]:
    """``plain`` with confluent-kafka: up to ``limit`` handlers at once, each partition's
    offset committed past its completed calls after each fetch. ``report`` gets the CPU of
    librdkafka's threads up to the consumer's close (``rdkafka_cpu_seconds``)."""
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    from processor.executor.records import decode_dispatch  # noqa: PLC0415

    ends: list[float] = []
    handle = bte._handler(seconds, ends)
    topic = settings.topics.dispatch
    loop = asyncio.get_running_loop()
    kafka = ThreadPoolExecutor(1, "consumer")  # the consumer's blocking calls, one at a time
    consumer = _consumer(settings, f"nplain-{uuid.uuid4().hex[:8]}")
    slots = asyncio.Semaphore(limit)
    done: dict[int, set[int]] = {}
    committed: dict[int, int] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def run(partition: int, offset: int, value: bytes) -> None:
        try:
            dispatch = decode_dispatch(value)
            await handle(dispatch)
        finally:
            done.setdefault(partition, set()).add(offset)
            slots.release()

    def fetch() -> list[Any]:
        return _fetched(consumer.consume(limit, 0.1))

    try:
        while len(ends) < calls:
            for message in await loop.run_in_executor(kafka, fetch):
                partition, offset = message.partition(), message.offset()
                committed.setdefault(partition, offset)
                await slots.acquire()  # the bound: this loop waits for a free slot
                task = asyncio.create_task(run(partition, offset, message.value()))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            offsets = []
            for partition, at in committed.items():
                finished = done.get(partition, set())
                moved = at
                while moved in finished:
                    finished.discard(moved)
                    moved += 1
                if moved != at:
                    committed[partition] = moved
                    offsets.append(TopicPartition(topic, partition, moved))
            if offsets:
                await loop.run_in_executor(
                    kafka, lambda o=offsets: consumer.commit(offsets=o, asynchronous=False)
                )
        await asyncio.gather(*tasks)
        if report is not None:
            report["rdkafka_cpu_seconds"] = _rdkafka_cpu()
    finally:
        await loop.run_in_executor(kafka, consumer.close)
        kafka.shutdown()
    return ends


async def native_floor(
    settings: Any,
    calls: int,
    seconds: float,
    limit: int,
    report: dict[str, Any] | None = None,
) -> list[float]:
    """``floor`` with confluent-kafka (see the module's docstring): the same transactions, in
    the same order, with the same records. ``report`` gets each transaction's wall time (begin
    to committed, in its thread) and record count, by ``init``, ``claim`` and ``end``
    (``timings``), and the CPU of librdkafka's threads up to the close
    (``rdkafka_cpu_seconds``)."""
    from confluent_kafka import Producer, TopicPartition  # noqa: PLC0415

    from processor.executor.records import decode_dispatch  # noqa: PLC0415

    ends: list[float] = []
    handle = bte._handler(seconds, ends)
    group = f"nativ-{uuid.uuid4().hex[:8]}"  # as long as the floor's "floor-…": same sizes
    topics = settings.topics
    loop = asyncio.get_running_loop()
    kafka = ThreadPoolExecutor(1, "consumer")
    consumer = _consumer(settings, group)
    slots = asyncio.Semaphore(limit)
    producers: dict[int, Any] = {}
    threads: dict[int, ThreadPoolExecutor] = {}  # a partition's transactions, one at a time
    finished: dict[int, list[Any]] = {}
    writers: dict[int, asyncio.Task[None]] = {}
    tasks: set[asyncio.Task[Any]] = set()

    async def producer_of(partition: int) -> None:
        if partition not in producers:
            producer = Producer(
                {
                    **_common(settings),
                    "transactional.id": f"{group}-{partition}",
                    "partitioner": "murmur2_random",
                    # aiokafka's: batches leave at once (the floor closes its batches), and
                    # a transaction begun on the heels of the last one's commit retries its
                    # CONCURRENT_TRANSACTIONS after 20 ms (librdkafka: retry.backoff.ms, 100)
                    "linger.ms": 0,
                    "retry.backoff.ms": 20,
                }
            )
            threads[partition] = ThreadPoolExecutor(1, f"partition-{partition}")
            await loop.run_in_executor(
                threads[partition], timed, "init", 0, producer.init_transactions
            )
            producers[partition] = producer

    def timed(kind: str, records: int, work: Callable[[], None]) -> None:
        started = time.monotonic()
        work()
        if report is not None:
            wait = time.monotonic() - started
            report.setdefault("timings", {}).setdefault(kind, []).append((wait, records))

    def blocking_transaction(
        producer: Any, records: list[Any], offsets: list[Any] | None, metadata: Any
    ) -> None:
        producer.begin_transaction()
        for r in records:
            if r.partition is None:
                producer.produce(r.topic, r.value, r.key)
            else:
                producer.produce(r.topic, r.value, r.key, partition=r.partition)
        if offsets:
            producer.send_offsets_to_transaction(offsets, metadata)
        producer.commit_transaction()

    async def transaction(
        partition: int, records: list[Any], offsets: list[Any] | None, metadata: Any
    ) -> None:
        await loop.run_in_executor(
            threads[partition],
            timed,
            "claim" if offsets else "end",
            len(records),
            lambda: blocking_transaction(producers[partition], records, offsets, metadata),
        )

    async def write_ends(partition: int) -> None:
        while finished[partition]:
            records, finished[partition] = finished[partition], []
            await transaction(partition, records, None, None)
            for _ in range(len(records) // 2):
                slots.release()

    async def run(partition: int, offset: int, dispatch: Any, key: bytes) -> None:
        output = await handle(dispatch)
        finished.setdefault(partition, []).extend(
            (
                bte.ledger_entry(topics, group, dispatch, "succeeded", partition, offset),
                bte.result_record(topics, group, dispatch, key, output),
            )
        )
        writer = writers.get(partition)
        if writer is None or writer.done():
            writers[partition] = asyncio.create_task(write_ends(partition))

    async def claim_and_start(partition: int, records: list[Any], metadata: Any) -> None:
        await producer_of(partition)
        dispatches = [(r, decode_dispatch(r.value())) for r in records]
        claims = [
            bte.ledger_entry(topics, group, d, "claimed", partition, r.offset())
            for r, d in dispatches
        ]
        offsets = [TopicPartition(topics.dispatch, partition, records[-1].offset() + 1)]
        await transaction(partition, claims, offsets, metadata)
        for r, d in dispatches:
            task = asyncio.create_task(run(partition, r.offset(), d, r.key()))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    def fetch() -> tuple[list[Any], Any]:
        messages = _fetched(consumer.consume(limit, 0.1))
        return messages, consumer.consumer_group_metadata() if messages else None

    try:
        # every partition's producer started before the first fetch, side by side: librdkafka's
        # first InitProducerId of a transactional id waited 0.5 s for half of them (a retry
        # timer while the coordinator's connection comes up), a stall the floor's one-by-one
        # start in its fetch loop would put inside the steady window
        await asyncio.gather(*(producer_of(p) for p in range(settings.partitions)))
        while len(ends) < calls:
            messages, metadata = await loop.run_in_executor(kafka, fetch)
            batches: dict[int, list[Any]] = {}
            for message in messages:
                batches.setdefault(message.partition(), []).append(message)
            for partition, records in batches.items():
                for _ in records:
                    await slots.acquire()  # the bound: this loop waits for a free slot
                await claim_and_start(partition, records, metadata)
        while tasks or any(not w.done() for w in writers.values()):
            await asyncio.sleep(0.01)
        for w in writers.values():
            w.result()  # a failed end transaction fails the run
        if report is not None:
            report["rdkafka_cpu_seconds"] = _rdkafka_cpu()
    finally:
        await loop.run_in_executor(kafka, consumer.close)
        kafka.shutdown()
        for thread in threads.values():
            thread.shutdown()
    return ends


def contender_main(args: argparse.Namespace) -> None:
    """In a process of its own: drain the backlog, print one JSON line (as
    ``bench_executor_throughput.contender_main`` does for its contenders)."""
    settings = bte.contender_settings(args)
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_SELF)
    seconds = bte.HANDLERS[args.handler]
    report: dict[str, Any] = {}
    run = {"native-plain": native_plain, "native-floor": native_floor}[args.contender]
    ends = asyncio.run(run(settings, args.calls, seconds, args.in_flight, report))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line: dict[str, Any] = {
        "calls": len(ends),
        "wall_seconds": time.monotonic() - started,
        "cpu_seconds": cpu,
        "steady_calls_per_second": bte._steady(ends),
    }
    line["rdkafka_cpu_seconds"] = report["rdkafka_cpu_seconds"]
    for kind, got in report.get("timings", {}).items():
        waits = sorted(1000 * wait for wait, _ in got)
        line[f"{kind}_transactions"] = {
            "count": len(got),
            "records_mean": sum(n for _, n in got) / len(got),
            "p50_ms": waits[len(waits) // 2],
            "p90_ms": waits[(len(waits) * 9) // 10],
        }
    print(json.dumps(line))


# ---------------------------------------------------------------------------- orchestration


def _contend_native(
    args: argparse.Namespace, prefix: str, contender: str, handler: str
) -> dict[str, Any]:
    """``bte._contend`` with this file's command line."""
    command = [
        sys.executable, __file__, "--contender", NATIVE[contender], "--handler", handler,
        "--prefix", prefix, "--calls", str(args.calls), "--partitions", str(args.partitions),
        "--in-flight", str(args.in_flight), "--bootstrap", args.bootstrap,
    ]  # fmt: skip
    return bte._contend(args, prefix, contender, handler, command)


def _ledger(bootstrap: str, prefix: str, partitions: int) -> dict[tuple[str, str], list[str]]:
    """Every committed ledger entry and result of the prefix's topics, by (the writer's
    consumer group, ``claimed`` / ``succeeded`` / ``result``): their dispatch ids."""
    from confluent_kafka import (  # noqa: PLC0415
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    from processor.settings import Settings  # noqa: PLC0415

    topics = Settings(bootstrap_servers=bootstrap, topic_prefix=prefix, partitions=partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    names = (topics.topics.executions, topics.topics.results)
    wanted = [
        TopicPartition(t, p, 0)
        for t in names
        for p in consumer.list_topics(t, timeout=10).topics[t].partitions
    ]
    consumer.assign(wanted)
    left = {(tp.topic, tp.partition) for tp in wanted}
    got: dict[tuple[str, str], list[str]] = {}
    deadline = time.monotonic() + 60
    try:
        while left:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the ledger check did not reach the end of {sorted(left)}")
            for message in consumer.consume(1000, 1.0):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                    left.discard((message.topic(), message.partition()))
                    continue
                value = json.loads(message.value())
                if value["type"] == "execution.entry":
                    what = (value["group"], value["state"])
                else:
                    what = (value["executor_group"], "result")
                got.setdefault(what, []).append(value["dispatch_id"])
    finally:
        consumer.close()
    return got


def _check_floors(args: argparse.Namespace, prefix: str, size: int) -> None:
    """Both floors wrote, for every call of the backlog, exactly one ``claimed`` and one
    ``succeeded`` entry and one result (fail loudly otherwise)."""
    got = _ledger(args.bootstrap, prefix, args.partitions)
    groups = {g for g, _ in got}
    for name in ("floor-", "nativ-"):
        mine = [g for g in groups if g.startswith(name)]
        if len(mine) != 1:
            raise RuntimeError(f"expected one {name}* writer in the ledger, found {mine}")
        for what in ("claimed", "succeeded", "result"):
            ids = got.get((mine[0], what), [])
            if len(ids) != size or len(set(ids)) != size:
                raise RuntimeError(
                    f"{mine[0]} {what}: {len(ids)} records, {len(set(ids))} ids, not {size}"
                )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "calls": args.calls,
        "small_calls": args.small_calls,
        "partitions": args.partitions,
        "in_flight": args.in_flight,
        "repeat": args.repeat,
        "handlers": args.handlers,
        "confluent_kafka": _versions(),
        "runs": {},
    }
    for handler in args.handlers:
        for _ in range(args.repeat):
            for size, suffix in ((args.calls, ""), (args.small_calls, "/small")):
                if not size:
                    continue
                prefix = f"bn{uuid.uuid4().hex[:8]}."
                asyncio.run(bte._backlog(args.bootstrap, prefix, size, args.partitions))
                sized = argparse.Namespace(**{**vars(args), "calls": size})
                try:
                    for contender in CONTENDERS:  # side by side, on the same backlog
                        if contender in NATIVE:
                            run = _contend_native(sized, prefix, contender, handler)
                        else:
                            run = bte._contend(sized, prefix, contender, handler)
                        if run["calls"] != size:
                            raise RuntimeError(f"{contender} ran {run['calls']} calls, not {size}")
                        out["runs"].setdefault(f"{handler}/{contender}{suffix}", []).append(run)
                        print(f"{handler}/{contender}{suffix}: {json.dumps(run)}", flush=True)
                    _check_floors(args, prefix, size)
                finally:
                    asyncio.run(bte._drop(args.bootstrap, prefix, args.partitions))
    out["summary"] = {handler: _summary(out["runs"], handler, args) for handler in args.handlers}
    return out


def _versions() -> dict[str, str]:
    import confluent_kafka  # noqa: PLC0415

    version = confluent_kafka.version()  # a string in 2.16, (string, int) before
    return {
        "confluent_kafka": version if isinstance(version, str) else version[0],
        "librdkafka": confluent_kafka.libversion()[0],
    }


def _summary(runs: dict[str, list[dict[str, Any]]], handler: str, args: Any) -> dict[str, Any]:
    """Per contender: steady calls/s, CPU and the broker's CPU per call (large backlog, and
    small), the marginal CPU per call; medians of the runs."""
    out: dict[str, Any] = {}
    for contender in CONTENDERS:
        s: dict[str, Any] = {}
        for suffix, key in (("", ""), ("/small", "small_")):
            got = runs.get(f"{handler}/{contender}{suffix}")
            if not got:
                continue
            s[f"{key}calls_per_second"] = bte._median([r["steady_calls_per_second"] for r in got])
            s[f"{key}cpu_ms_per_call"] = bte._per_call(got, "cpu_seconds")
            s[f"{key}broker_cpu_ms_per_call"] = bte._per_call(got, "broker_cpu_seconds")
            s[f"{key}rdkafka_cpu_ms_per_call"] = bte._per_call(got, "rdkafka_cpu_seconds")
        big, small = runs.get(f"{handler}/{contender}"), runs.get(f"{handler}/{contender}/small")
        extra = args.calls - args.small_calls
        for what, name in (("cpu_seconds", "cpu"), ("rdkafka_cpu_seconds", "rdkafka_cpu")):
            if big and small and extra > 0 and what in big[0]:
                cpu = bte._median([r[what] for r in big]) - bte._median([r[what] for r in small])
                s[f"marginal_{name}_ms_per_call"] = 1000 * cpu / extra
        for kind in ("init", "claim", "end"):
            got = [r[f"{kind}_transactions"] for r in big or [] if f"{kind}_transactions" in r]
            if got:
                s[f"{kind}_transactions"] = {k: bte._median([g[k] for g in got]) for k in got[0]}
        out[contender] = s
    return out


def markdown(result: dict[str, Any]) -> str:
    names = {"noop": "returns at once", "sleep": "`await asyncio.sleep(0.1)`"}
    versions = result["confluent_kafka"]

    def value(s: dict[str, Any], key: str, unit: Callable[[float], str], base: Any) -> str:
        got = s.get(key)
        if got is None:
            return "n/a"
        mine = unit(got)
        if base is None or not base.get(key):
            return mine
        return f"{mine} ({got / base[key]:.2f}x)"

    def us(v: float) -> str:
        return f"{1000 * v:,.0f} µs"

    lines = [
        f"Backlogs of {result['calls']} and {result['small_calls']} calls over "
        f"{result['partitions']} `dispatch` partitions, up to {result['in_flight']} calls in "
        f"flight, {result['repeat']} run(s) per contender (medians); aiokafka and "
        f"confluent-kafka {versions['confluent_kafka']} (librdkafka {versions['librdkafka']}) "
        "side by side on the same backlogs. In brackets: as a multiple of the aiokafka plain "
        "consumer's.",
        "",
        "| handler | contender | steady calls/s | CPU per call, whole run "
        "| marginal CPU per call | broker CPU per call |",
        "|---|---|---|---|---|---|",
    ]
    for handler, summary in result["summary"].items():
        base = summary.get("plain")
        for contender in CONTENDERS:
            s = summary.get(contender, {})
            lines.append(
                f"| {names[handler]} | {contender} "
                f"| {value(s, 'calls_per_second', lambda v: f'{v:,.0f}', base)} "
                f"| {value(s, 'cpu_ms_per_call', us, base)} "
                f"| {value(s, 'marginal_cpu_ms_per_call', us, base)} "
                f"| {value(s, 'broker_cpu_ms_per_call', us, None)} |"
            )
    threads = [
        f"{names[h]}: {c} {us(s[c]['rdkafka_cpu_ms_per_call'])} of "
        f"{us(s[c]['cpu_ms_per_call'])} (marginal {us(s[c]['marginal_rdkafka_cpu_ms_per_call'])} "
        f"of {us(s[c]['marginal_cpu_ms_per_call'])})"
        for h, s in result["summary"].items()
        for c in NATIVE
        if s.get(c, {}).get("marginal_rdkafka_cpu_ms_per_call") is not None
    ]
    if threads:
        lines += [
            "",
            "Of the native contenders' CPU per call, librdkafka's own threads (the rest is the "
            "Python thread: the loop, the handlers, the records, the client's Python binding): "
            + "; ".join(threads)
            + ".",
        ]
    for handler, summary in result["summary"].items():
        s = summary.get("native floor", {})
        if "claim_transactions" not in s:
            continue
        claim, end = s["claim_transactions"], s["end_transactions"]
        lines += [
            "",
            f"The native floor's transactions, {names[handler]}, the large backlog (medians of "
            f"the runs): {claim['count']:.0f} claim transactions of {claim['records_mean']:.1f} "
            f"records on average, {claim['p50_ms']:.1f} ms at the median (p90 "
            f"{claim['p90_ms']:.1f} ms); {end['count']:.0f} end transactions of "
            f"{end['records_mean']:.1f} records, {end['p50_ms']:.1f} ms (p90 "
            f"{end['p90_ms']:.1f} ms), from begin to committed.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--small-calls", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--handlers",
        type=lambda text: [h for h in text.split(",") if h],
        default=list(bte.HANDLERS),
        help="comma-separated: noop, sleep",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per contender run")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results JSON")
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    parser.add_argument("--contender", choices=tuple(NATIVE.values()), help=argparse.SUPPRESS)
    parser.add_argument("--handler", choices=tuple(bte.HANDLERS), help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.handlers) - set(bte.HANDLERS)
    if unknown:
        parser.error(f"unknown handler(s): {', '.join(sorted(unknown))}")
    if importlib.util.find_spec("confluent_kafka") is None:
        print(
            "bench_executor_floor_native: confluent_kafka is not installed (the bench-native "
            "extra: pip install 'confluent-kafka>=2.16,<3'); nothing measured."
        )
        return None
    if args.contender is not None:
        contender_main(args)
        return None
    result = measure(args)
    result["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
