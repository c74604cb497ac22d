"""Smoke runs of the core benchmarks at minimal scale: they run and give well-formed results.

No timing is asserted (speed targets live in bench/ and docs/benchmarks.md); what is checked is
that every contestant ran the same workloads to the end (the bench itself fails if one of them
does not return every call), that the peers of the bench extra are installed, and that
``bench/run_all.py`` writes a page with the machine, the targets and each section.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"
PEERS = {"openai", "openai-strict", "langchain", "partial-json-parser", "jiter-partial"}


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_core_peers_runs_every_contestant_on_every_workload(tmp_path: Path) -> None:
    bench = load("bench_core_peers")
    out = tmp_path / "core.json"
    result = bench.main(["--small", "--repeat", "1", "--out", str(out)])
    assert out.exists()
    rows = result["rows"]
    workloads = {r["workload"] for r in rows}
    assert workloads == {"1KB", "10KB", "40 x 200B"}
    names = {r["contestant"] for r in rows}
    assert names == {"assembler", "floor", "scan-floor"} | PEERS  # the bench extra: with dev
    for row in rows:
        assert row["seconds"] > 0 and math.isfinite(row["ratio_vs_assembler"])
        assert row["stopped"] or row["runs"] == 1
        if not row["peer"]:
            assert not row["stopped"]  # the project's path and the floor always finish
    assert set(result["targets"]) == set(bench.TARGETS)
    # the scan-floor's bounds, on the small calls against jiter and the floor, and on 1 KB
    assert set(result["bounds"]) == {
        "scan_floor_vs_jiter:1KB",
        "scan_floor_vs_jiter:40 x 200B",
        "scan_floor_vs_floor:40 x 200B",
    }
    assert all(b["figure"] > 0 for b in result["bounds"].values())
    text = bench.markdown(result)
    assert "| assembler |" in text and "| jiter-partial |" in text


def test_cli_start_bench_times_every_command() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_cli_start.py"), "--repeat", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    for command in ("processor --help", "processor states", "processor schemas check"):
        assert command in done.stdout


def test_schema_attack_bench_measures_both_validators() -> None:
    bench = load("bench_attack_schema")
    page = bench.main(["--smoke"])
    rows = [line for line in page.splitlines() if line.startswith("| pattern") or "Items" in line
            or "Properties" in line or "format: iri" in line]
    assert len(rows) == len(bench.ATTACKS)
    for row in rows:
        grown, same, big = row.split(" | ")[1:4]
        assert grown and same.endswith("x less)") and big.endswith(" ms |")
    assert "| processor (parse only) |" in page and "| jsonschema (re.compile) |" in page


def test_gc_pause_bench_runs_both_collectors(tmp_path: Path) -> None:
    """Both modes feed every call; the worker's policy leaves its state out of the scan set."""
    out = tmp_path / "gc.json"
    command = [sys.executable, str(BENCH / "bench_gc_pause.py"), "--calls", "300"]
    subprocess.run(
        [*command, "--repeat", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.read_text())
    default, policy = result["runs"]["default"][0], result["runs"]["policy"][0]
    assert default["inert_calls"] == policy["inert_calls"] == 300  # every call ended
    assert default["frozen_objects"] == 0 < policy["frozen_objects"]
    assert policy["tracked_objects"] < default["tracked_objects"] / 4
    assert "| the worker's policy |" in load("bench_gc_pause").markdown(result)


def test_state_scaling_bench_times_both_states(tmp_path: Path) -> None:
    """Both states dispatch every timed call (the child exits otherwise); the full one holds
    what it was loaded with, and the page's table shows both."""
    out = tmp_path / "state.json"
    command = [sys.executable, str(BENCH / "bench_state_scaling.py"), "--open", "150"]
    command += ["--retained", "200", "--calls", "140", "--repeat", "1", "--out", str(out)]
    subprocess.run(command, capture_output=True, text=True, check=True)
    result = json.loads(out.read_text())
    empty, full = result["runs"]["empty"][0], result["runs"]["full"][0]
    assert empty["open_buffers"] == 0 and full["open_buffers"] == 150
    assert full["inert_calls"] == empty["inert_calls"] + 200
    # both report the permanent generation; not which is larger: the timed steps' young
    # collections freeze once per interval, so the counts move by hundreds with the machine's
    # load (under load the empty run once froze 91 more than the full one)
    assert full["frozen_objects"] > 0 and empty["frozen_objects"] > 0
    assert result["ratio_full_vs_empty"] > 0
    assert "| full | 150 |" in load("bench_state_scaling").markdown(result)


def test_run_all_writes_the_page(tmp_path: Path) -> None:
    run_all = load("run_all")
    doc = tmp_path / "benchmarks.md"
    status = run_all.main(
        ["--smoke", "--only", "core,cli", "--doc", str(doc), "--results", str(tmp_path)]
    )
    assert status == 0
    page = doc.read_text()
    for heading in ("# Benchmarks", "## Machine", "## Targets (issue 11)", "## CLI start"):
        assert heading in page
    assert "## Core, no Kafka" in page and "Command: `python bench/bench_core_peers.py" in page
    assert "nproc" in page and "Smoke run" in page


def test_running_some_sections_keeps_the_others_figures(tmp_path: Path) -> None:
    """``--only`` must not drop the sections it does not run (a partial run once wrote a page
    with an empty targets table and half its sections)."""
    run_all = load("run_all")
    doc = tmp_path / "benchmarks.md"
    assert (
        run_all.main(["--smoke", "--only", "core", "--doc", str(doc), "--results", str(tmp_path)])
        == 0
    )
    assert run_all.main(["--only", "gating", "--doc", str(doc), "--results", str(tmp_path)]) == 0
    page = doc.read_text()
    assert "## Gating delay" in page and "## Core, no Kafka" in page
    assert "kept from the run of" in page  # the core section, with when and where it ran
    assert "| core: " in page  # its targets still in the table
    assert "Not run yet: `python bench/run_all.py --only worker`" in page


def test_the_committed_page_has_every_section_and_its_targets() -> None:
    run_all = load("run_all")
    page = (BENCH.parent / "docs" / "benchmarks.md").read_text()
    for section in run_all.SECTIONS:
        assert f"## {section.title}" in page
        assert f"Not run yet: `python bench/run_all.py --only {section.key}`" not in page
    targets = page.split("## Targets (issue 11)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in targets.splitlines() if line.startswith("| ") and "---" not in line]
    for prefix in ("| core: ", "| worker: throughput", "| worker: p99", "| CLI: "):
        assert any(row.startswith(prefix) for row in rows), prefix


def test_a_section_rendered_again_keeps_the_time_and_commit_of_its_run(tmp_path: Path) -> None:
    """``--reuse`` renders a section from its results file; the page must say when and at
    which commit those figures were measured, not when the file was last touched (a checkout
    or a ``git stash pop`` moves that time)."""
    run_all = load("run_all")
    result = {"figures": [1, 2, 3]}
    out = tmp_path / "x.json"
    out.write_text(json.dumps(result))
    run = {"command": "c", "status": 0, "stdout": "", "result": result}
    run_all._store(tmp_path, "x", "text", run)
    stored = run_all._stored(tmp_path, "x")
    assert stored is not None
    measured = (stored["ended"], stored["commit"])
    os.utime(out, (0, 0))  # touched since: 1970
    assert run_all._run_of(tmp_path, "x", result, out) == measured
    # rendered again, stored again: still the run's
    run_all._store(tmp_path, "x", "text", {**run, "ended": measured[0], "commit": measured[1]})
    assert run_all._run_of(tmp_path, "x", result, out) == measured
    # figures written outside run_all: the file's time, and no commit claimed
    other = {"figures": [4]}
    assert run_all._run_of(tmp_path, "x", other, out) == ("1970-01-01 00:00 UTC", "unknown")
