"""Executor throughput against a plain consumer with the same handler and in-flight limit.

Issue 39's side-by-side, on the real broker. One ``dispatch`` backlog (``--calls`` calls of as
many turns, over ``--partitions`` partitions, every turn started in ``control``; then one of
``--small-calls``, 300, the same way) is written once;
then, one after the other and interleaved, each contender drains it in a consumer group of its
own, in a process of its own:

- **plain**: an aiokafka consumer group member (read_committed, no auto-commit) that decodes
  each dispatch record and runs the handler with up to ``--in-flight`` calls at once, and
  commits each partition's offset past its completed calls (no fence, no ledger, no result);
- **floor**: the Kafka work of at-most-once with a claim ledger and nothing else (:func:`floor`):
  a transactional producer per partition, a ``claimed`` record per call and the offsets in one
  transaction per fetched batch before the handlers start, the ends (a ledger record and a
  result per call) in one transaction per partition as they finish. No fence, no registry, no
  models but the dispatch's decode. The executor's figures above it are its own Python (the
  fence, the ledger's state, the runner); the floor's above the plain consumer's are the
  protocol's, with this client;
- **executor**: one :class:`~processor.executor.client.ExecutorClient` (``max_in_flight`` =
  ``--in-flight``): the fence, the claims, the handler, the outcomes.

Then **two executors** of one group (processes of their own, both owning their partitions
before the backlog appears, written in one transaction) drain a backlog of their own.

Handlers: ``noop`` (returns at once) and ``sleep`` (``await asyncio.sleep(0.1)``, an I/O-bound
tool). And **latency**: dispatch records written at a steady ``--rate`` (200/s) for 10 s, one
executor with the no-op handler: p50 and p99 from a record's acknowledgement to its handler's
start. Steady calls/s: the calls whose handler ended between the 10th and the 90th percentile
of handler end times, over that interval (start-up and take excluded). CPU: the contender
process's own (user + system, from ``getrusage``) per call, and the broker's (its process's
``/proc`` ticks over the contender's run) per call when a local broker process is found; the
broker is shared with whatever else runs on the machine, so its figure is an upper bound. The
marginal CPU per call: the large backlog's run less the small one's, over the extra calls
(start-up, the group join and the takes cancel out).

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python bench/bench_executor_throughput.py \\
        [--calls 2000] [--small-calls 300] [--partitions 6] [--in-flight 64] [--repeat 1] [--out F]

(``make bench`` runs it: the section "Executor: throughput against a plain consumer".)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "executor_throughput.json"
HANDLERS = {"noop": 0.0, "sleep": 0.1}


# ---------------------------------------------------------------------------- contenders


def _handler(seconds: float, ends: list[float]) -> Any:
    async def handle(call: Any) -> dict[str, Any]:
        if seconds:
            await asyncio.sleep(seconds)
        ends.append(time.monotonic())
        return {"ok": True}

    return handle


async def plain(settings: Any, calls: int, seconds: float, limit: int) -> list[float]:
    """The plain consumer: up to ``limit`` handlers at once, offsets committed past what
    completed (per partition, contiguous), after completion."""
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    from processor.executor.records import decode_dispatch  # noqa: PLC0415

    ends: list[float] = []
    handle = _handler(seconds, ends)
    consumer = AIOKafkaConsumer(
        settings.topics.dispatch,
        group_id=f"plain-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        **settings.kafka_client_kwargs(),
    )
    await consumer.start()
    slots = asyncio.Semaphore(limit)
    done: dict[TopicPartition, set[int]] = {}
    committed: dict[TopicPartition, int] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def run(tp: TopicPartition, offset: int, value: bytes) -> None:
        try:
            dispatch = decode_dispatch(value)
            await handle(dispatch)
        finally:
            done.setdefault(tp, set()).add(offset)
            slots.release()

    try:
        while len(ends) < calls:
            batches = await consumer.getmany(timeout_ms=100, max_records=limit)
            for tp, records in batches.items():
                committed.setdefault(tp, records[0].offset)
                for record in records:
                    await slots.acquire()  # the bound: this loop waits for a free slot
                    task = asyncio.create_task(run(tp, record.offset, record.value))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            offsets = {}
            for tp, at in committed.items():
                finished = done.get(tp, set())
                moved = at
                while moved in finished:
                    finished.discard(moved)
                    moved += 1
                if moved != at:
                    committed[tp] = offsets[tp] = moved
            if offsets:
                await consumer.commit(offsets)
        await asyncio.gather(*tasks)
    finally:
        await consumer.stop()
    return ends


def ledger_entry(
    topics: Any, group: str, dispatch: Any, state: str, partition: int, offset: int
) -> Any:
    """The floor's ledger record of one call (``claimed`` or its end): the executor's fields,
    keyed by (group, dispatch id), on the dispatch record's partition of ``executions``."""
    import orjson  # noqa: PLC0415

    from processor.kafka.codec import Outbound  # noqa: PLC0415

    value = orjson.dumps(
        {
            "v": 1, "tenant": dispatch.tenant, "turn_id": dispatch.turn_id,
            "response_id": dispatch.response_id, "item_id": dispatch.item_id,
            "call_id": dispatch.call_id, "type": "execution.entry", "group": group,
            "dispatch_id": dispatch.dispatch_id, "state": state, "tool": dispatch.tool,
            "tool_version": dispatch.tool_version, "executor_id": "floor",
            "dispatch_partition": partition, "dispatch_offset": offset, "ts": time.time(),
        }
    )  # fmt: skip
    return Outbound(
        topics.executions, orjson.dumps([group, dispatch.dispatch_id]), value, [], partition
    )


def result_record(topics: Any, group: str, dispatch: Any, key: bytes, output: Any) -> Any:
    """The floor's result of one call: the executor's fields, keyed as the dispatch record
    (the default partitioner chooses its ``results`` partition)."""
    import orjson  # noqa: PLC0415

    from processor.kafka.codec import Outbound  # noqa: PLC0415

    value = orjson.dumps(
        {
            "v": 1, "tenant": dispatch.tenant, "turn_id": dispatch.turn_id,
            "response_id": dispatch.response_id, "item_id": dispatch.item_id,
            "call_id": dispatch.call_id, "type": "execution.result",
            "result_id": uuid.uuid4().hex, "dispatch_id": dispatch.dispatch_id,
            "tool": dispatch.tool, "tool_version": dispatch.tool_version,
            "executor_group": group, "executor_id": "floor", "outcome": "succeeded",
            "reason": None, "blocked_by": None, "retry_possible": False, "detail": "",
            "output": output, "started_at": time.time(), "ts": time.time(),
        }
    )  # fmt: skip
    return Outbound(topics.results, key, value, [])


async def floor(settings: Any, calls: int, seconds: float, limit: int) -> list[float]:
    """The at-most-once floor: the Kafka work any executor with a claim ledger must do, and
    nothing else. Per ``dispatch`` partition a transactional producer of its own (as the
    executor's, for fencing); per fetched batch of a partition, one transaction writes a
    ``claimed`` ledger record per call and the offsets, before the handlers start; the ends
    (a ledger record and a result per call) go in one transaction per partition as they
    finish. The records have the executor's sizes and keys. No fence, no registry, no models
    beyond the dispatch's decode (the plain consumer's): what is left of the executor's CPU
    per call above this is its own Python, not the protocol."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: PLC0415

    from processor.executor.records import decode_dispatch  # noqa: PLC0415
    from processor.kafka.batches import send_batched  # noqa: PLC0415
    from processor.kafka.codec import Outbound  # noqa: PLC0415

    ends: list[float] = []
    handle = _handler(seconds, ends)
    group = f"floor-{uuid.uuid4().hex[:8]}"
    topics = settings.topics
    consumer = AIOKafkaConsumer(
        topics.dispatch,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        **settings.kafka_client_kwargs(),
    )
    await consumer.start()
    slots = asyncio.Semaphore(limit)
    producers: dict[int, AIOKafkaProducer] = {}
    locks: dict[int, asyncio.Lock] = {}
    finished: dict[int, list[Outbound]] = {}
    writers: dict[int, asyncio.Task[None]] = {}
    tasks: set[asyncio.Task[Any]] = set()

    async def producer_of(partition: int) -> AIOKafkaProducer:
        if partition not in producers:
            producer = AIOKafkaProducer(
                **settings.kafka_client_kwargs(), transactional_id=f"{group}-{partition}"
            )
            await producer.start()
            producers[partition] = producer
            locks[partition] = asyncio.Lock()
        return producers[partition]

    async def transaction(partition: int, records: list[Outbound], offsets: Any) -> None:
        producer = producers[partition]
        async with locks[partition]:
            await producer.begin_transaction()
            futures: list[asyncio.Future[Any]] = []
            await send_batched(producer, records, futures)
            if offsets:
                await producer.send_offsets_to_transaction(offsets, group)
            await producer.commit_transaction()
            await asyncio.gather(*futures)

    async def write_ends(partition: int) -> None:
        while finished[partition]:
            records, finished[partition] = finished[partition], []
            await transaction(partition, records, None)
            for _ in range(len(records) // 2):
                slots.release()

    async def run(partition: int, offset: int, dispatch: Any, key: bytes) -> None:
        output = await handle(dispatch)
        finished.setdefault(partition, []).extend(
            (
                ledger_entry(topics, group, dispatch, "succeeded", partition, offset),
                result_record(topics, group, dispatch, key, output),
            )
        )
        writer = writers.get(partition)
        if writer is None or writer.done():
            writers[partition] = asyncio.create_task(write_ends(partition))

    async def claim_and_start(tp: TopicPartition, records: list[Any]) -> None:
        await producer_of(tp.partition)
        dispatches = [(r, decode_dispatch(r.value)) for r in records]
        claims = [
            ledger_entry(topics, group, d, "claimed", tp.partition, r.offset) for r, d in dispatches
        ]
        await transaction(tp.partition, claims, {tp: records[-1].offset + 1})
        for r, d in dispatches:
            task = asyncio.create_task(run(tp.partition, r.offset, d, r.key))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    try:
        while len(ends) < calls:
            batches = await consumer.getmany(timeout_ms=100, max_records=limit)
            for tp, records in batches.items():
                for _ in records:
                    await slots.acquire()  # the bound: this loop waits for a free slot
                await claim_and_start(tp, records)
        while tasks or any(not w.done() for w in writers.values()):
            await asyncio.sleep(0.01)
    finally:
        await consumer.stop()
        for producer in producers.values():
            await producer.stop()
    return ends


async def executor(settings: Any, calls: int, seconds: float, limit: int) -> list[float]:
    from processor.core.authn import AllowUnsigned  # noqa: PLC0415
    from processor.executor.client import ExecutorClient  # noqa: PLC0415
    from processor.executor.handlers import Handlers  # noqa: PLC0415

    ends: list[float] = []
    handlers = Handlers()
    handlers.register("get_weather", _handler(seconds, ends), requires_confirmation=False)
    client = ExecutorClient(
        settings,
        handlers,
        verifier=AllowUnsigned(),
        group=f"exec-{uuid.uuid4().hex[:8]}",
        max_in_flight=limit,
    )
    await client.start()
    task = asyncio.create_task(client.run())
    try:
        while sum(client.stats.outcomes.values()) < calls:
            if task.done():
                task.result()
                raise RuntimeError("the executor stopped")
            await asyncio.sleep(0.05)
    finally:
        client.request_stop()
        await asyncio.wait({task}, timeout=60)
        await client.stop()
    outcomes = client.stats.outcomes
    if outcomes.get("succeeded", 0) != calls:
        raise RuntimeError(f"not every call succeeded: {outcomes}")
    return ends


async def member(
    settings: Any, seconds: float, limit: int, group: str, status: Path
) -> list[float]:
    """One of two executors of one group: runs until SIGTERM, writing ``owned calls`` to
    ``status`` every 0.1 s (the parent writes the backlog once both own their partitions)."""
    import signal  # noqa: PLC0415

    from processor.core.authn import AllowUnsigned  # noqa: PLC0415
    from processor.executor.client import ExecutorClient  # noqa: PLC0415
    from processor.executor.handlers import Handlers  # noqa: PLC0415

    ends: list[float] = []
    handlers = Handlers()
    handlers.register("get_weather", _handler(seconds, ends), requires_confirmation=False)
    client = ExecutorClient(
        settings, handlers, verifier=AllowUnsigned(), group=group, max_in_flight=limit
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start()
    task = asyncio.create_task(client.run())
    try:
        while not stop.is_set():
            if task.done():
                task.result()
                raise RuntimeError("the executor stopped")
            status.write_text(f"{len(client.owned_partitions())} {len(ends)}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
    finally:
        client.request_stop()
        await asyncio.wait({task}, timeout=60)
        await client.stop()
    return ends


async def latency(settings: Any, rate: float, seconds: float, limit: int) -> dict[str, Any]:
    """Dispatch records written at a steady ``rate`` for ``seconds`` (each after its turn's
    ``turn.started`` was acknowledged), one executor with a no-op handler: from a record's
    acknowledgement (visible: the executor reads read_committed, and these are not
    transactional) to its handler's start, p50 and p99."""
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    from processor.core.authn import AllowUnsigned  # noqa: PLC0415
    from processor.core.events import encode, turn_key  # noqa: PLC0415
    from processor.executor.client import ExecutorClient  # noqa: PLC0415
    from processor.executor.handlers import Handlers  # noqa: PLC0415
    from tests.integration.conftest import turn_started  # noqa: PLC0415
    from tests.integration.executor_harness import make_dispatch  # noqa: PLC0415

    started: dict[str, float] = {}
    visible: dict[str, float] = {}

    async def handle(call: Any) -> None:
        started[call.dispatch_id] = time.monotonic()

    handlers = Handlers()
    handlers.register("get_weather", handle, requires_confirmation=False)
    client = ExecutorClient(
        settings,
        handlers,
        verifier=AllowUnsigned(),
        group=f"lat-{uuid.uuid4().hex[:8]}",
        max_in_flight=limit,
    )
    producer = AIOKafkaProducer(
        **settings.kafka_client_kwargs(), enable_idempotence=True, acks="all", linger_ms=0
    )
    await producer.start()
    await client.start()
    task = asyncio.create_task(client.run())
    try:
        while len(client.owned_partitions()) < settings.partitions:
            await asyncio.sleep(0.05)
        pending = []
        begin = time.monotonic()
        n = 0
        while time.monotonic() - begin < seconds:
            turn = f"l{n}"
            key = turn_key("acme", turn).encode()
            control = encode(turn_started("acme", turn))
            await producer.send_and_wait(settings.topics.control, control, key=key)
            dispatch = make_dispatch("acme", turn, "call_0")
            sent = await producer.send(settings.topics.dispatch, encode(dispatch), key=key)
            sent.add_done_callback(
                lambda _f, i=dispatch.dispatch_id: visible.__setitem__(i, time.monotonic())
            )
            pending.append(sent)
            n += 1
            await asyncio.sleep(max(0.0, begin + n / rate - time.monotonic()))
        await asyncio.gather(*pending)
        deadline = time.monotonic() + 60
        while len(started) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        client.request_stop()
        await asyncio.wait({task}, timeout=60)
        await client.stop()
        await producer.stop()
    waits = sorted(1000 * (started[i] - visible[i]) for i in started if i in visible)
    return {
        "calls": n,
        "started": len(started),
        "rate": rate,
        "p50_ms": waits[len(waits) // 2],
        "p99_ms": waits[min(len(waits) - 1, (len(waits) * 99) // 100)],
    }


def _steady(ends: list[float]) -> float:
    ends = sorted(ends)
    lo, hi = ends[len(ends) // 10], ends[(len(ends) * 9) // 10]
    return ((len(ends) * 9) // 10 - len(ends) // 10) / (hi - lo) if hi > lo else float("inf")


def contender_settings(args: argparse.Namespace) -> Any:
    """The settings every contender process runs with (this file's and the native floor's)."""
    from processor.settings import Settings  # noqa: PLC0415

    return Settings(
        bootstrap_servers=args.bootstrap,
        topic_prefix=args.prefix,
        partitions=args.partitions,
        session_timeout_ms=6000,
        transaction_timeout_ms=5000,
        commit_timeout_seconds=4,
    )


def contender_main(args: argparse.Namespace) -> None:
    """In a process of its own: drain the backlog, print one JSON line."""
    settings = contender_settings(args)
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_SELF)
    seconds = HANDLERS[args.handler]
    if args.contender == "latency":
        print(json.dumps(asyncio.run(latency(settings, args.rate, 10.0, args.in_flight))))
        return
    if args.contender == "member":
        ends = asyncio.run(member(settings, seconds, args.in_flight, args.group, args.status))
    else:
        run = {"plain": plain, "floor": floor, "executor": executor}[args.contender]
        ends = asyncio.run(run(settings, args.calls, seconds, args.in_flight))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line: dict[str, Any] = {
        "calls": len(ends),
        "wall_seconds": time.monotonic() - started,
        "cpu_seconds": cpu,
    }
    if args.contender == "member":
        line["ends"] = ends
    else:
        line["steady_calls_per_second"] = _steady(ends)
    print(json.dumps(line))


# ---------------------------------------------------------------------------- orchestration


def _broker_pid() -> int | None:
    """The local Kafka broker's process (for its CPU ticks), if one runs on this machine."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"java" in cmdline and (b"kafka.Kafka" in cmdline or b"KafkaRaftServer" in cmdline):
            return int(entry.name)
    return None


def _ticks(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime, clock ticks


async def _backlog(
    bootstrap: str, prefix: str, calls: int, partitions: int, *, create: bool = True
) -> None:
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    from processor.core.events import encode, turn_key  # noqa: PLC0415
    from tests.integration.conftest import Runtime, turn_started  # noqa: PLC0415
    from tests.integration.executor_harness import make_dispatch  # noqa: PLC0415

    rt = Runtime(bootstrap, prefix, Path(tempfile.mkdtemp()), partitions)
    if create:
        await rt.create_topics()
    # one transaction: the whole backlog appears at once to read_committed consumers already
    # running (the pair), not at the rate it is written
    producer = AIOKafkaProducer(
        **rt.settings.kafka_client_kwargs(), transactional_id=f"{prefix}backlog"
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        sends = []
        for n in range(calls):
            turn = f"t{n}"
            event = turn_started("acme", turn)
            key = turn_key("acme", turn).encode()
            sends.append(await producer.send(rt.topics.control, encode(event), key=key))
            dispatch = make_dispatch("acme", turn, "call_0")
            sends.append(await producer.send(rt.topics.dispatch, encode(dispatch), key=key))
        await asyncio.gather(*sends)
        await producer.commit_transaction()
    finally:
        await producer.stop()


async def _topics(bootstrap: str, prefix: str, partitions: int) -> None:
    from tests.integration.conftest import Runtime  # noqa: PLC0415

    await Runtime(bootstrap, prefix, Path(tempfile.mkdtemp()), partitions).create_topics()


async def _drop(bootstrap: str, prefix: str, partitions: int) -> None:
    from tests.integration.conftest import Runtime  # noqa: PLC0415

    rt = Runtime(bootstrap, prefix, Path(tempfile.mkdtemp()), partitions)
    await rt.close()


def _contend(
    args: argparse.Namespace,
    prefix: str,
    contender: str,
    handler: str,
    command: list[str] | None = None,
) -> dict[str, Any]:
    """Run one contender in a process of its own (``command``, else this file's) and read its
    JSON line; the broker's CPU ticks over its run are added."""
    broker = _broker_pid()
    before = _ticks(broker)
    out = subprocess.run(
        command or _command(args, prefix, contender, handler),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=args.timeout,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{contender}/{handler} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    after = _ticks(broker)
    if before is not None and after is not None:
        result["broker_cpu_seconds"] = (after - before) / os.sysconf("SC_CLK_TCK")
    return result


def _command(args: argparse.Namespace, prefix: str, contender: str, handler: str) -> list[str]:
    return [
        sys.executable,
        __file__,
        "--contender",
        contender,
        "--handler",
        handler,
        "--prefix",
        prefix,
        "--calls",
        str(args.calls),
        "--partitions",
        str(args.partitions),
        "--in-flight",
        str(args.in_flight),
        "--bootstrap",
        args.bootstrap,
    ]


def _pair(args: argparse.Namespace, handler: str) -> dict[str, Any]:
    """Two executors of one group: both started and owning their partitions before the
    backlog is written (no rebalance while it drains); stopped once every call ran."""
    prefix = f"bx{uuid.uuid4().hex[:8]}."
    asyncio.run(_topics(args.bootstrap, prefix, args.partitions))
    folder = Path(tempfile.mkdtemp())
    group = f"pair-{uuid.uuid4().hex[:8]}"
    procs = []
    broker = _broker_pid()
    try:
        for n in range(2):
            status = folder / f"member{n}"
            command = _command(args, prefix, "member", handler)
            command += ["--group", group, "--status", str(status)]
            procs.append(
                (subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True), status)
            )

        def counts() -> list[tuple[int, int]]:
            got = []
            for proc, status in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"an executor of the pair exited {proc.returncode}")
                text = status.read_text() if status.exists() else "0 0"
                owned, done = (int(x) for x in (text.split() or ["0", "0"]))
                got.append((owned, done))
            return got

        deadline = time.monotonic() + args.timeout
        while not all(o for o, _ in counts()) or sum(o for o, _ in counts()) < args.partitions:
            if time.monotonic() > deadline:
                raise RuntimeError("the pair never owned every partition")
            time.sleep(0.1)
        before = _ticks(broker)
        asyncio.run(_backlog(args.bootstrap, prefix, args.calls, args.partitions, create=False))
        while sum(d for _, d in counts()) < args.calls:
            if time.monotonic() > deadline:
                raise RuntimeError("the pair did not run every call in time")
            time.sleep(0.1)
        after = _ticks(broker)
        outs = []
        for proc, _ in procs:
            proc.terminate()
            out, _ = proc.communicate(timeout=120)
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
        asyncio.run(_drop(args.bootstrap, prefix, args.partitions))
    ends = [end for out in outs for end in out["ends"]]
    result: dict[str, Any] = {
        "calls": len(ends),
        "steady_calls_per_second": _steady(ends),
        "cpu_seconds": sum(out["cpu_seconds"] for out in outs),
        "calls_per_member": [out["calls"] for out in outs],
    }
    if before is not None and after is not None:
        result["broker_cpu_seconds"] = (after - before) / os.sysconf("SC_CLK_TCK")
    return result


def measure(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "calls": args.calls,
        "partitions": args.partitions,
        "in_flight": args.in_flight,
        "repeat": args.repeat,
        "runs": {},
    }
    out["small_calls"] = args.small_calls
    for handler in HANDLERS:
        for _ in range(args.repeat):
            for size, suffix in ((args.calls, ""), (args.small_calls, "/small")):
                if not size:
                    continue
                prefix = f"bx{uuid.uuid4().hex[:8]}."
                asyncio.run(_backlog(args.bootstrap, prefix, size, args.partitions))
                sized = argparse.Namespace(**{**vars(args), "calls": size})
                try:
                    for contender in ("plain", "floor", "executor"):  # side by side
                        run = _contend(sized, prefix, contender, handler)
                        out["runs"].setdefault(f"{handler}/{contender}{suffix}", []).append(run)
                        print(f"{handler}/{contender}{suffix}: {json.dumps(run)}", flush=True)
                finally:
                    asyncio.run(_drop(args.bootstrap, prefix, args.partitions))
            pair = _pair(args, handler)  # two executors of one group, on a backlog of their own
            out["runs"].setdefault(f"{handler}/two executors", []).append(pair)
            print(f"{handler}/two executors: {json.dumps(pair)}", flush=True)
    for _ in range(args.repeat):  # dispatch visible -> handler start, at a steady rate
        prefix = f"bx{uuid.uuid4().hex[:8]}."
        asyncio.run(_topics(args.bootstrap, prefix, args.partitions))
        try:
            command = [*_command(args, prefix, "latency", "noop"), "--rate", str(args.rate)]
            done = subprocess.run(
                command, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout, check=False
            )
            if done.returncode != 0:
                raise RuntimeError(f"latency failed:\n{done.stderr[-3000:]}")
            run = json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            asyncio.run(_drop(args.bootstrap, prefix, args.partitions))
        out.setdefault("latency", []).append(run)
        print(f"latency: {json.dumps(run)}", flush=True)
    out["summary"] = {handler: _summary(out["runs"], handler, args) for handler in HANDLERS}
    if out.get("latency"):
        out["latency_summary"] = {
            "rate": args.rate,
            "p50_ms": _median([r["p50_ms"] for r in out["latency"]]),
            "p99_ms": _median([r["p99_ms"] for r in out["latency"]]),
        }
    for s in out["summary"].values():
        s["two_executors_vs_one"] = (
            s["two_executors_calls_per_second"] / s["executor_calls_per_second"]
        )
    return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _per_call(runs: list[dict[str, Any]], key: str) -> float | None:
    got = [r[key] / r["calls"] for r in runs if key in r]
    return _median(got) * 1000 if got else None


def _summary(runs: dict[str, list[dict[str, Any]]], handler: str, args: Any) -> dict[str, Any]:
    """One handler's figures: each contender's steady rate, CPU and the broker's per call on
    both backlogs, and the marginal CPU per call (the extra calls of the large backlog over the
    small one: start-up, the group join and the takes cancel out)."""
    out: dict[str, Any] = {}
    for suffix, prefix in (("", ""), ("/small", "small_")):
        if f"{handler}/plain{suffix}" not in runs:
            continue
        for contender in ("plain", "floor", "executor"):
            got = runs.get(f"{handler}/{contender}{suffix}")
            if not got:
                continue
            out[f"{prefix}{contender}_calls_per_second"] = _median(
                [r["steady_calls_per_second"] for r in got]
            )
            out[f"{prefix}{contender}_cpu_ms_per_call"] = _per_call(got, "cpu_seconds")
            out[f"{prefix}{contender}_broker_cpu_ms_per_call"] = _per_call(
                got, "broker_cpu_seconds"
            )
        out[f"{prefix}ratio"] = (
            out[f"{prefix}executor_calls_per_second"] / out[f"{prefix}plain_calls_per_second"]
        )
    for contender in ("plain", "floor", "executor"):
        big, small = runs.get(f"{handler}/{contender}"), runs.get(f"{handler}/{contender}/small")
        extra = args.calls - args.small_calls
        if big and small and extra > 0:
            cpu = _median([r["cpu_seconds"] for r in big]) - _median(
                [r["cpu_seconds"] for r in small]
            )
            out[f"{contender}_marginal_cpu_ms_per_call"] = 1000 * cpu / extra
    out["two_executors_calls_per_second"] = _median(
        [r["steady_calls_per_second"] for r in runs[f"{handler}/two executors"]]
    )
    return out


def markdown(result: dict[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f} ms"

    lines = [
        f"A backlog of {result['calls']} calls over {result['partitions']} `dispatch` "
        f"partitions, up to {result['in_flight']} calls in flight, {result['repeat']} run(s) "
        "per contender (medians); the plain consumer, the at-most-once floor and the executor "
        "side by side on the same backlog.",
        "",
        "| handler | plain consumer, steady calls/s | floor, steady calls/s "
        "| one executor, steady calls/s | ratio (executor / plain) "
        "| broker CPU per call, plain / floor / executor "
        "| two executors, steady calls/s (/ one) |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {"noop": "returns at once", "sleep": "`await asyncio.sleep(0.1)`"}

    def three(s: dict[str, Any], key: str) -> str:
        return " / ".join(ms(s.get(f"{c}_{key}")) for c in ("plain", "floor", "executor"))

    def times(s: dict[str, Any], key: str) -> str:
        plain = s.get(f"plain_{key}")
        if not plain:
            return "n/a"
        return " / ".join(
            "n/a" if s.get(f"{c}_{key}") is None else f"{s[f'{c}_{key}'] / plain:.1f}x"
            for c in ("floor", "executor")
        )

    for handler, s in result["summary"].items():
        lines.append(
            f"| {names[handler]} | {s['plain_calls_per_second']:,.0f} "
            f"| {s.get('floor_calls_per_second', 0):,.0f} "
            f"| {s['executor_calls_per_second']:,.0f} | {s['ratio']:.2f} "
            f"| {three(s, 'broker_cpu_ms_per_call')} "
            f"| {s['two_executors_calls_per_second']:,.0f} ({s['two_executors_vs_one']:.2f}x) |"
        )
    lines += [
        "",
        "CPU of the contender's process per call: over its whole run, and marginal (the "
        "large backlog's extra calls over the small one's: start-up and takes cancel out); "
        "floor and executor as multiples of the plain consumer's.",
        "",
        "| handler | whole run, plain / floor / executor | (x plain) "
        "| marginal, plain / floor / executor | (x plain) |",
        "|---|---|---|---|---|",
    ]
    for handler, s in result["summary"].items():
        lines.append(
            f"| {names[handler]} | {three(s, 'cpu_ms_per_call')} "
            f"| {times(s, 'cpu_ms_per_call')} "
            f"| {three(s, 'marginal_cpu_ms_per_call')} "
            f"| {times(s, 'marginal_cpu_ms_per_call')} |"
        )
    small = [(h, s) for h, s in result["summary"].items() if "small_ratio" in s]
    if small:
        lines += [
            "",
            f"The same on a backlog of {result.get('small_calls')} calls (one executor / the "
            "plain consumer, steady calls/s): "
            + "; ".join(
                f"{names[h]}: {s['small_executor_calls_per_second']:,.0f} / "
                f"{s['small_plain_calls_per_second']:,.0f} = {s['small_ratio']:.2f}"
                for h, s in small
            )
            + ".",
        ]
    latency = result.get("latency_summary")
    if latency:
        lines += [
            "",
            f"Dispatch visible to handler start, {latency['rate']:.0f} calls/s for 10 s, one "
            f"executor, no-op handler: p50 {latency['p50_ms']:.1f} ms, p99 "
            f"{latency['p99_ms']:.1f} ms (medians of the runs).",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--small-calls", type=int, default=300, help="a second, smaller backlog (0: none)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per contender run")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results JSON")
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    parser.add_argument(
        "--contender",
        choices=("plain", "floor", "executor", "member", "latency"),
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--handler", choices=tuple(HANDLERS), help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=200.0, help="calls/s of the latency run")
    parser.add_argument("--group", help=argparse.SUPPRESS)
    parser.add_argument("--status", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
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
