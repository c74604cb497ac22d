"""Run every benchmark and write docs/benchmarks.md (``make bench``).

Each benchmark runs in a process of its own, one after another. The page gets the machine's
facts, the command of each section, its figures (medians, ratios) and, for each target of
issue 11, whether it is met, with the reason when it is not.

    .venv/bin/python bench/run_all.py                 # everything, full scale (tens of minutes)
    .venv/bin/python bench/run_all.py --only core     # run some sections (keys: core, worker,
                                                      # takeover, gc, state, executor, mcp,
                                                      # throughput, cli, gating, assembler,
                                                      # jsonscan, schema, attack, agent); the
                                                      # others keep
                                                      # their last figures
                                                      # (bench/results/<key>.section.json)
    .venv/bin/python bench/run_all.py --smoke --doc /tmp/b.md --results /tmp/r
                                                      # minimal scale: what ``make test`` runs

The Kafka section needs the broker at ``KAFKA_BOOTSTRAP_SERVERS`` (default 127.0.0.1:9092).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DOC = ROOT / "docs" / "benchmarks.md"
sys.path.insert(0, str(HERE))


@dataclass
class Section:
    key: str
    title: str
    script: str
    full: list[str]
    smoke: list[str] | None  # None: not run in a smoke run
    results: str | None = None  # the JSON file the script writes (named by --out/--results)
    out_flag: str | None = None
    render: Callable[[str, dict[str, Any] | None], str] | None = None
    intro: str = ""


def _module(name: str) -> Any:
    return importlib.import_module(name)


def _core(stdout: str, result: dict[str, Any] | None) -> str:
    assert result is not None
    return str(_module("bench_core_peers").markdown(result))


def _worker(stdout: str, result: dict[str, Any] | None) -> str:
    assert result is not None
    return str(_module("bench_worker_kafka").markdown(result))


def _verbatim(stdout: str, result: dict[str, Any] | None) -> str:
    return "```\n" + stdout.strip() + "\n```"


def _as_is(stdout: str, result: dict[str, Any] | None) -> str:
    return stdout.strip()


def _table_only(stdout: str, result: dict[str, Any] | None) -> str:
    """The markdown table a script prints after its progress lines."""
    return "\n".join(line for line in stdout.splitlines() if line.startswith("|"))


SECTIONS = [
    Section(
        "core",
        "Core, no Kafka: the Assembler against peer accumulators",
        "bench_core_peers.py",
        ["--repeat", "5"],
        ["--small", "--repeat", "1"],
        "core_peers.json",
        "--out",
        _core,
        "Chat Completions style deltas (4-32 characters) through the Assembler with schema "
        "validation, the floor, openai-python's `ChatCompletionStreamState` (plain and with "
        "strict pydantic tools), LangChain `AIMessageChunk` merging, and per-delta re-parsing "
        "with partial-json-parser and jiter (see the script's docstring for what each does).",
    ),
    Section(
        "worker",
        "Worker on the real broker: throughput and latency against a raw pass-through",
        "bench_worker_kafka.py",
        ["--calls", "20000", "--repeat", "5", "--latency-seconds", "20", "--latency-repeat", "5"],
        [
            "--calls",
            "150",
            "--repeat",
            "1",
            "--latency-seconds",
            "2",
            "--latency-repeat",
            "1",
            "--timeout",
            "120",
        ],
        "worker_kafka.json",
        "--results",
        _worker,
        "`processor worker` (subprocesses, one and two in a group) consuming a pre-loaded "
        "backlog, against an aiokafka consume-transform-produce pass-through with the same "
        "transaction shape (read_committed, one transaction per batch and partition through "
        "the worker's own commit step, offsets sent in the transaction).",
    ),
    Section(
        "takeover",
        "Worker: partition takeover with 10,000 open buffers against a raw read",
        "bench_takeover.py",
        ["--buffers", "10000", "--repeat", "5"],
        ["--smoke"],
        "takeover.json",
        "--out",
        lambda stdout, result: str(_module("bench_takeover").markdown(result)),
    ),
    Section(
        "gc",
        "Worker: garbage-collector pauses as the state grows",
        "bench_gc_pause.py",
        ["--calls", "100000", "--repeat", "3"],
        ["--calls", "300", "--repeat", "1"],
        "gc_pause.json",
        "--out",
        lambda stdout, result: str(_module("bench_gc_pause").markdown(result)),
        "CPython's full collections scan every object the worker keeps for the retention "
        "window; the worker freezes what survives (`processor.runtime.collector`), so they "
        "scan only what is new. Not a target of issue 11: it bounds the worker's pauses, "
        "and so its latency tail, on a large state.",
    ),
    Section(
        "state",
        "Worker: a step's cost against the state its partition holds",
        "bench_state_scaling.py",
        ["--repeat", "3"],
        ["--open", "150", "--retained", "200", "--calls", "140", "--repeat", "1"],
        "state_scaling.json",
        "--out",
        lambda stdout, result: str(_module("bench_state_scaling").markdown(result)),
        "A partition holds up to 10,000 open calls and, for the retention window, the records "
        "of many more: what a step costs must not grow with them. Not a target of issue 11; "
        "it found two per-step costs that did (the buffered-bytes gauge, the frozen-objects "
        "count).",
    ),
    Section(
        "executor",
        "Executor: the control barrier on a caught-up partition",
        "bench_executor_barrier.py",
        ["--syncs", "40"],
        ["--syncs", "2"],
        "executor_barrier.json",
        "--out",
        lambda stdout, result: str(_module("bench_executor_barrier").markdown(result)),
        "Before a call runs, the executor reads its turn's control partition up to the end "
        "offset; when nothing new is there, that is one ListOffsets round trip.",
    ),
    Section(
        "mcp",
        "Executor: MCP servers (stdio and Streamable HTTP) against a bare tools/call",
        "bench_mcp_executor.py",
        ["--calls", "200"],
        ["--calls", "5"],
        "mcp_executor.json",
        "--out",
        lambda stdout, result: str(_module("bench_mcp_executor").markdown(result)),
        "What `processor executor mcp` adds per call over a bare `tools/call` on the same server "
        "(`examples/mcp_bookings_server.py`'s read-only `list_free_slots`, a server process of "
        "its own, real broker), for each transport. *bare*: `--calls` sequential `tools/call` "
        "on one MCP session, mean time per call. *through the executor*: as many dispatch "
        "records of one turn through `ExecutorClient` and the MCP handlers (the fence, i.e. the "
        "control barrier, twice; the claim transaction; the `tools/call`; the outcome "
        "transaction), time per call measured between consecutive results' timestamps, the "
        "first 10 calls left out as warm-up. *added per call*: the difference; *ratio*: "
        "through the executor / bare. *calls/s per executor*: the inverse of the time per "
        "call, as long as calls of one turn ran one after the other (before issue 39; they "
        "now run side by side, up to `--max-in-flight`, and the section's figures are from "
        "before: see the executor throughput section). The *no-op* figure is the same executor with "
        "an in-process handler that returns at once: the executor client's own per-call cost, "
        "whatever the handler. No target: it says what an MCP tool costs, and where.",
    ),
    Section(
        "throughput",
        "Executor: throughput against a plain consumer (many calls in flight)",
        "bench_executor_throughput.py",
        ["--calls", "2000", "--repeat", "3"],
        ["--calls", "40", "--small-calls", "0", "--timeout", "180"],
        "executor_throughput.json",
        "--out",
        lambda stdout, result: str(_module("bench_executor_throughput").markdown(result)),
        "Issue 39's side-by-side: one `dispatch` backlog (one call per turn over 6 partitions, "
        "every turn started) drained, one contender after the other and each in a process "
        "and consumer group of its own, by a plain aiokafka consumer group member (decodes each "
        "record, runs the handler with up to 64 calls in flight, commits each partition's "
        "offset past its completed calls: no fence, no ledger, no result), by the "
        "at-most-once *floor* (the Kafka work of claims before the handler and ends after it, "
        "in transactions of a producer per partition, with the executor's records, and "
        "nothing else: no fence, no ledger state, no registry) and by one "
        "`ExecutorClient` with `max_in_flight=64` (the fence, the batched claims, the handler, "
        "the outcomes); then two executors of one group, both owning their partitions before "
        "a backlog of their own appears (written in one transaction). *Steady calls/s*: calls "
        "whose handler ended between the 10th and the "
        "90th percentile of handler end times, over that interval. *CPU per call*: the "
        "contender process's user + system time over its run, and *marginal*: the 2,000-call "
        "run's less the 300-call run's, over the extra calls; the broker's, from its process's "
        "`/proc` ticks over the same run, is an upper bound (the broker is shared with whatever "
        "else runs on the machine). The contenders ran back to back on the same backlog; compare "
        "the ratios.",
    ),
    Section(
        "cli",
        "CLI start",
        "bench_cli_start.py",
        ["--repeat", "7"],
        ["--repeat", "1"],
        render=_verbatim,
        intro="Wall time of fresh `processor` processes; target 0.3 s.",
    ),
    Section(
        "gating",
        "Gating delay",
        "bench_gating_delay.py",
        [],
        None,  # writes bench/results/gating_delay.json; the smoke test calls it in-process
        render=_as_is,
        intro="How long response gating (issue 15) holds a call on the recorded provider "
        "streams: every recording goes through its adapter and two Assemblers, one with every "
        "tool `dispatch_on: response_end` (the default) and one with `call_end`, and the gap "
        "between where each dispatches is given in provider events and body bytes (the "
        "recordings carry no timestamps; in wall time it is how long the provider takes to "
        "send those closing events). Since issue 29 a response completes only at its stream's "
        "documented end, not at its stop marker (the end of the stream counts as one event and "
        "no bytes): that is the rule's cost. Chat Completions, which ended a call with the "
        "response at `finish_reason` (0 events held before), now holds it for what follows "
        "`finish_reason` up to `[DONE]` (the usage chunk when the stream sends one, then the "
        "end); Bedrock for `metadata` and the end (0 before); Gemini for the end after the "
        "`finishReason` chunk, one event more than before (the Bedrock rows count 64-byte slices "
        "of the binary body, not events). Anthropic and Responses are "
        "unchanged: `message_stop` and `response.completed` are their documented ends. In wall "
        "time the added wait is what the provider takes between its stop marker and the end of "
        "the body (not measured here: the recordings carry no timestamps), or, with Azure OpenAI's asynchronous filter, the filter's verdict, "
        "which is what the wait is for. A read-only tool whose latency matters can opt out with "
        "`dispatch_on: call_end`.",
    ),
    Section(
        "assembler",
        "Assembler cost per byte (100 KB vs 1 MB)",
        "bench_assembler.py",
        [],
        None,
        render=_verbatim,
    ),
    Section(
        "jsonscan",
        "Incremental JSON scanner",
        "bench_jsonscan.py",
        [],
        None,
        render=_verbatim,
    ),
    Section(
        "schema",
        "CPU under attack: tool schemas",
        "bench_attack_schema.py",
        [],
        ["--smoke"],
        render=_as_is,
        intro="Hostile arguments against what lets an argument set its own validation cost "
        "(backtracking patterns, `uniqueItems`, `unevaluatedItems`, `unevaluatedProperties`, "
        "the `iri` format) and distinct hostile values of a `format: regex` argument: "
        "jsonschema's own validator against the registry's (`processor/core/toolschema.py`, "
        "`processor/core/formats.py`). See docs/reliability.md.",
    ),
    Section(
        "attack",
        "Memory under attack",
        "bench_attack_memory.py",
        ["--scale", "10"],  # as in docs/reliability.md; whole, one scenario needs ~3 GiB
        None,
        render=_table_only,
        intro="See docs/reliability.md for what each scenario does.",
    ),
    Section(
        "agent",
        "Agent loop: the terminal fragments sent → the outcome in the agent's hands",
        "bench_agent_loop.py",
        ["--calls", "200"],
        ["--calls", "3"],
        "agent_loop.json",
        "--out",
        lambda stdout, result: str(_module("bench_agent_loop").markdown(result)),
        "Issue 40: what closing the loop over Kafka costs an agent per call. A worker "
        "subprocess, an in-process executor with a no-op handler and one `OutcomeFollower` on "
        "the real broker, one turn per call; the clock starts when the agent sends the call's "
        "terminal fragments and stops when `followed.wait` returns its outcome (`ran`). The "
        "floor is the same call run in-process by the agent: the same fragments through an "
        "in-process `Assembler` and the handler awaited on its dispatch.",
    ),
]


def machine() -> list[str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = _commit()
    return [
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; commit {commit or '?'}",
        f"- CPUs (nproc): {os.cpu_count()}; CPU model: {cpu}",
        f"- Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}",
        "- a shared, noisy machine: compare the ratios, not the absolute figures",
    ]


def run_section(
    section: Section, smoke: bool, results: Path, reuse: bool = False
) -> tuple[str, dict[str, Any]]:
    """Run one benchmark; returns its markdown and a summary (command, seconds, status).

    ``reuse``: do not run it, render the results JSON an earlier run of the same command left.
    """
    args = list(section.smoke if smoke and section.smoke is not None else section.full)
    out_path = None
    if section.results is not None and section.out_flag is not None:
        out_path = results / section.results
        args += [section.out_flag, str(out_path)]
    command = [sys.executable, str(HERE / section.script), *args]
    shown = " ".join(["python", f"bench/{section.script}", *args[: len(args) - 2 * bool(out_path)]])
    if reuse and out_path is not None and out_path.exists():
        result = json.loads(out_path.read_text())
        ended, commit = _run_of(results, section.key, result, out_path)
        lines = [f"## {section.title}", ""]
        if section.intro:
            lines += [section.intro, ""]
        lines += [
            f"Command: `{shown}` (figures of its run that ended {ended}, commit {commit}, "
            f"`bench/results/{out_path.name}`, rendered again)",
            "",
        ]
        assert section.render is not None
        lines.append(section.render("", result))
        summary = {"command": shown, "status": 0, "stdout": "", "result": result}
        return "\n".join(lines), {**summary, "ended": ended, "commit": commit}
    print(f"== {section.script} {' '.join(args)}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr[-5000:])
    summary: dict[str, Any] = {
        "command": shown,
        "seconds": seconds,
        "status": done.returncode,
        "stdout": done.stdout,
    }
    lines = [f"## {section.title}", ""]
    if section.intro:
        lines += [section.intro, ""]
    lines += [f"Command: `{shown}` ({seconds:.0f} s)", ""]
    if done.returncode != 0:
        lines += [f"**Failed** (exit {done.returncode}):", "", "```", done.stderr[-3000:], "```"]
        return "\n".join(lines), summary
    result = json.loads(out_path.read_text()) if out_path is not None else None
    summary["result"] = result
    assert section.render is not None
    lines.append(section.render(done.stdout, result))
    return "\n".join(lines), summary


def verdicts(summaries: dict[str, dict[str, Any]]) -> list[str]:
    """The issue's targets, met or not, from the sections that ran."""
    rows = ["| target | figure | met |", "|---|---|---|"]
    core = summaries.get("core", {}).get("result")
    if core:
        names = _module("bench_core_peers").TARGETS
        for name, v in core["targets"].items():
            figure = "n/a" if v["figure"] is None else f"{v['figure']:.2f}"
            met = {True: "yes", False: "**NO**", None: "not measured"}[v["met"]]
            rows.append(f"| core: {names[name]} | {figure} | {met} |")
        for bound in core.get("bounds", {}).values():
            rows.append(
                f"| core, bound (no target): {bound['detail']} | {bound['figure']:.2f} | - |"
            )
    worker = summaries.get("worker", {}).get("result")
    if worker:
        t = _module("bench_worker_kafka").summarize(worker["throughput"]["runs"])
        rows.append(
            f"| worker: throughput >= 0.7x the pass-through | "
            f"{t['ratio_worker_vs_passthrough']:.2f} | {'yes' if t['met'] else '**NO**'} |"
        )
        if "latency" in worker:
            lat = worker["latency"]
            rows.append(
                f"| worker: p99 latency <= 1.5x the pass-through's | "
                f"{lat['ratio_p99_worker_vs_passthrough']:.2f} | "
                f"{'yes' if lat['met'] else '**NO**'} |"
            )
    takeover = summaries.get("takeover", {}).get("result")
    if takeover:
        ratio = takeover["ratio_vs_raw"]
        shown = ", ".join(f"{kind} {value:.1f}x" for kind, value in ratio.items())
        rows.append(
            f"| worker: takeover of {takeover['buffers']:,} open buffers / a raw read of the "
            f"same changelog bytes (no target set) | {shown} | - |"
        )
    state = summaries.get("state", {}).get("result")
    if state:
        full, empty = state["medians"]["full"], state["medians"]["empty"]
        rows.append(
            f"| worker: build cost a call holding {full['open_buffers']:,.0f} open buffers and "
            f"{full['inert_calls']:,.0f} retained calls / holding {empty['inert_calls']:,.0f} "
            f"retained calls (no target set; flat is 1.0) "
            f"| {state['ratio_full_vs_empty']:.2f} | - |"
        )
    mcp = summaries.get("mcp", {}).get("result")
    if mcp:
        shown = ", ".join(f"{t} {r['ratio']:.1f}x" for t, r in mcp["transports"].items())
        rows.append(
            "| executor (MCP): time per call through the executor / a bare `tools/call` "
            f"(no target set) | {shown} | - |"
        )
    throughput = summaries.get("throughput", {}).get("result")
    if throughput:
        wanted = {"noop": 0.3, "sleep": 0.8}
        names = {"noop": "a no-op handler", "sleep": "a 100 ms handler"}
        for handler, target in wanted.items():
            ratio = throughput["summary"][handler]["ratio"]
            rows.append(
                f"| executor: steady calls/s of one executor / the plain consumer, {names[handler]}"
                f", {throughput['in_flight']} in flight (issue 39: >= {target}) "
                f"| {ratio:.2f} | {'yes' if ratio >= target else '**NO**'} |"
            )
        for handler in wanted:
            got = throughput["summary"][handler]
            plain, mine = got.get("plain_cpu_ms_per_call"), got.get("executor_cpu_ms_per_call")
            if plain and mine:
                times = mine / plain
                floor = got.get("floor_cpu_ms_per_call")
                margins = [
                    got.get(f"{c}_marginal_cpu_ms_per_call") for c in ("plain", "floor", "executor")
                ]
                shown = f"{times:.1f}x" + (f" (the floor's {floor / plain:.1f}x" if floor else "")
                if all(margins) and floor:
                    shown += (
                        f"; marginal: executor {margins[2] / margins[0]:.1f}x, "
                        f"floor {margins[1] / margins[0]:.1f}x"
                    )
                shown += ")" if floor else ""
                rows.append(
                    f"| executor: CPU per call / the plain consumer's, {names[handler]} "
                    f"(issue 39: <= 3x) | {shown} | {'yes' if times <= 3 else '**NO**'} |"
                )
            broker = got.get("executor_broker_cpu_ms_per_call")
            if broker is not None:
                rows.append(
                    f"| executor: broker CPU per executed call, {names[handler]} (issue 39: "
                    f"<= 1 ms; the broker is shared) | {broker:.2f} ms "
                    f"| {'yes' if broker <= 1 else '**NO**'} |"
                )
        pair = throughput["summary"]["sleep"].get("two_executors_vs_one")
        if pair is not None:
            rows.append(
                "| executor: steady calls/s of two executors of one group / one, a 100 ms "
                f"handler (issue 39: >= 1.6) | {pair:.2f} | {'yes' if pair >= 1.6 else '**NO**'} |"
            )
    cli = summaries.get("cli", {})
    if cli.get("status") == 0:
        # lines "<command> <best>s <median>s  ok|OVER" (bench_cli_start.py)
        found = [
            line.rsplit(None, 3)
            for line in cli["stdout"].splitlines()
            if line.startswith("processor") and line.rstrip().endswith(("ok", "OVER"))
        ]
        if found:
            worst = max(found, key=lambda f: float(f[1].rstrip("s")))
            met = all(f[3] == "ok" for f in found)
            rows.append(
                f"| CLI: `--help` and the offline commands start in <= 0.3 s (best of the runs) | "
                f"slowest: {worst[0].strip()} {worst[1]} (median {worst[2]}) | "
                f"{'yes' if met else '**NO**'} |"
            )
    return rows


def _stored(results: Path, key: str) -> dict[str, Any] | None:
    path = results / f"{key}.section.json"
    if not path.exists():
        return None
    stored: dict[str, Any] = json.loads(path.read_text())
    return stored


def _run_of(results: Path, key: str, result: Any, out_path: Path) -> tuple[str, str]:
    """When, and at which commit, the run that wrote ``result`` ended: the section record's,
    when the record holds these very figures (a page rendered again keeps them). Otherwise
    the results file was written outside ``run_all``: its modification time, commit unknown
    (a checkout or a ``git stash pop`` also moves that time: the record is the better source).
    """
    stored = _stored(results, key)
    if stored is not None and stored.get("summary", {}).get("result") == result:
        return str(stored["ended"]), str(stored["commit"])
    when = datetime.datetime.fromtimestamp(out_path.stat().st_mtime, datetime.UTC)
    return f"{when:%Y-%m-%d %H:%M} UTC", "unknown"


def _store(results: Path, key: str, text: str, summary: dict[str, Any]) -> None:
    """Record a section's page text and summary, with the end and commit of the run that made
    its figures (those of the earlier run for a section rendered again)."""
    ended = summary.get("ended") or f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    commit = summary.get("commit") or _commit()
    record = {"markdown": text, "summary": summary, "ended": ended, "commit": commit}
    (results / f"{key}.section.json").write_text(json.dumps(record, indent=1) + "\n")


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def page(
    sections: list[tuple[Section, str | None, dict[str, Any] | None, str | None]],
    *,
    smoke: bool,
    notes: str,
    appendices: list[str],
) -> str:
    """The whole page: every section in order, each from this run or from the run that last
    produced it (``ran_at`` says which); a section never run says how to run it."""
    summaries = {sec.key: summary for sec, _, summary, _ in sections if summary is not None}
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python bench/run_all.py`), which runs every section; "
        "`python bench/run_all.py --only <keys>` runs some and keeps the others' last figures, "
        "each section saying when and at which commit it ran."
        + (" **Smoke run: minimal scale, not figures.**" if smoke else ""),
        "",
        "## Machine",
        "",
        *machine(),
        "",
        "## Targets (issue 11)",
        "",
        *verdicts(summaries),
        "",
    ]
    if notes:
        lines += [notes.strip(), ""]
    for sec, text, _, ran_at in sections:
        if text is None:
            lines += [
                f"## {sec.title}",
                "",
                f"Not run yet: `python bench/run_all.py --only {sec.key}`.",
                "",
            ]
            continue
        lines += [text if ran_at is None else f"{text}\n\n_({ran_at}.)_", ""]
    for appendix in appendices:
        lines += [appendix.strip(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="every benchmark at minimal scale")
    parser.add_argument(
        "--only", default="", help="comma-separated section keys to run (the others are kept)"
    )
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--notes", type=Path, default=HERE / "benchmarks_notes.md")
    parser.add_argument(
        "--appendix",
        type=Path,
        action="append",
        default=None,
        help="hand-written sections appended as they are (default: bench/benchmarks_*.md "
        "other than the notes)",
    )
    parser.add_argument(
        "--reuse",
        default="",
        help="comma-separated section keys rendered from their last results JSON, not re-run "
        "(a section that writes none runs; name the reused keys in --only too, or every other "
        "section runs)",
    )
    args = parser.parse_args(argv)
    wanted = {k.strip() for k in args.only.split(",") if k.strip()}
    unknown = wanted - {sec.key for sec in SECTIONS}
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    reuse = {k.strip() for k in args.reuse.split(",") if k.strip()}
    args.results.mkdir(parents=True, exist_ok=True)
    status = 0
    rendered: list[tuple[Section, str | None, dict[str, Any] | None, str | None]] = []
    for section in SECTIONS:
        runs = (not wanted or section.key in wanted) and not (args.smoke and section.smoke is None)
        if runs:
            text, summary = run_section(section, args.smoke, args.results, section.key in reuse)
            status |= summary["status"]
            if summary["status"] == 0:
                _store(args.results, section.key, text, summary)
            rendered.append((section, text, summary, None))
            continue
        stored = None if args.smoke else _stored(args.results, section.key)
        if stored is None:
            rendered.append((section, None, None, None))
        else:
            ran_at = f"kept from the run of {stored['ended']}, commit {stored['commit']}"
            rendered.append((section, stored["markdown"], stored["summary"], ran_at))
    appendices = args.appendix
    if appendices is None:
        appendices = sorted(p for p in HERE.glob("benchmarks_*.md") if p != args.notes)
    notes = args.notes.read_text() if args.notes.exists() else ""
    text = page(
        rendered,
        smoke=args.smoke,
        notes=notes,
        appendices=[p.read_text() for p in appendices if p.exists()],
    )
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    args.doc.write_text(text)
    print(f"wrote {args.doc}")
    return status


if __name__ == "__main__":
    sys.exit(main())
