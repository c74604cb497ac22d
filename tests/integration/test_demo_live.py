"""``make up``'s script (scripts/demo_live.py) end to end on the shared test broker: it must
print a summary with dispatches, a cancelled turn, a quarantined response and a confirmed call
that the executor ran, then leave no process running and no topic behind."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.conftest import REPO_ROOT

pytestmark = pytest.mark.integration


def processes_with(marker: bytes) -> list[int]:
    """Pids whose environment holds ``marker`` (the run's topic prefix), other than ours."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


async def topics_with(bootstrap: str, prefix: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return sorted(t for t in await admin.list_topics() if t.startswith(prefix))
    finally:
        await admin.close()


@pytest.mark.timeout(900)
def test_make_up_runs_the_live_pipeline_and_leaves_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run_id = "t" + uuid.uuid4().hex[:8]
    prefix = f"demo-live-{run_id}."
    summary = tmp_path / "summary.json"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "demo_live.py"), "up",
         "--run-id", run_id, "--summary-json", str(summary), "--timeout", "600"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=840, check=False,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]

    data = json.loads(summary.read_text())
    rows = data["calls"]
    dispatched = [r for r in rows if r["scenario"] == "recording" and r["outcome"] == "dispatched"]
    assert len(dispatched) >= 5
    assert all(r["dispatch_id"] for r in dispatched)
    cancelled = [r for r in rows if r["scenario"] == "cancel"]
    assert cancelled and {(r["outcome"], r["reason"]) for r in cancelled} == {
        ("cancelled", "user_stop")
    }
    quarantined = [r for r in rows if r["scenario"] == "quarantine"]
    assert quarantined and {(r["outcome"], r["reason"]) for r in quarantined} == {
        ("cancelled", "quarantined")
    }
    (confirmed,) = [r for r in rows if r["scenario"] == "confirm"]
    assert confirmed["tool"] == "book_slot"
    assert confirmed["outcome"] == "dispatched"
    assert confirmed["result"] == "succeeded"
    assert str(confirmed["output"]["booking_ref"]).startswith("BK-")
    # calls the Assembler refuses are in the summary too, with their reason
    assert any(r["outcome"] == "failed" and r["reason"] == "unknown_tool" for r in rows)

    # the workers' own counters agree: commands judged and applied, none rejected
    commands = data["worker_metrics"]["toolcall_control_commands_total"]
    assert commands["response.quarantined/applied"] >= 1
    assert commands["turn.cancelled/applied"] >= 1
    assert commands["call.confirmed/applied"] >= 1
    assert not [k for k in commands if k.endswith("/rejected")]
    outputs = data["worker_metrics"]["toolcall_output_records_total"]
    assert outputs["dispatch"] == len([r for r in rows if r["dispatch_id"]])

    # the printed summary names provider, tool, outcome, reason and dispatch → result
    assert "dispatch → result" in out
    assert "book_slot" in out and "succeeded booking_ref=BK-" in out
    assert "user_stop" in out and "quarantined" in out
    assert "processor ctl quarantine-response" in out

    # nothing left: no child process, no topic, no pid file
    assert processes_with(f"PROCESSOR_TOPIC_PREFIX={prefix}".encode()) == []
    assert asyncio.run(topics_with(kafka_bootstrap, prefix)) == []
    assert not (REPO_ROOT / ".demo-live" / f"{run_id}.pids").exists()
