"""``processor topics create|describe`` on a real broker, and the co-partitioning guard."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

from processor.kafka.topics import partition_counts
from processor.settings import Settings, TopicNames
from tests.integration.conftest import REPO_ROOT, wait_until
from tests.kafka_broker import create_topics, delete_topics

pytestmark = pytest.mark.integration


def _run(bootstrap: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
    env.update({"PROCESSOR_BOOTSTRAP_SERVERS": bootstrap, "PROCESSOR_TOPIC_PREFIX": prefix})
    return subprocess.run(
        [sys.executable, "-m", "processor.runtime", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_topics_create_and_describe(kafka_bootstrap: str, topic_prefix: str) -> None:
    names = TopicNames.from_prefix(topic_prefix)
    try:
        created = await asyncio.to_thread(
            _run, kafka_bootstrap, topic_prefix, "topics", "create", "--partitions", "4"
        )
        assert created.returncode == 0, created.stderr
        lines = created.stdout.split("\n")
        assert sorted(line.split()[1] for line in lines if line.startswith("created")) == sorted(
            names.all().values()
        )

        described = await asyncio.to_thread(
            _run, kafka_bootstrap, topic_prefix, "topics", "describe"
        )
        assert described.returncode == 0, described.stderr
        rows = {line.split()[0]: line for line in described.stdout.splitlines()}
        assert set(rows) == set(names.all())
        assert all("partitions=4 replication=1" in row for row in rows.values())
        assert "cleanup.policy=compact" in rows["changelog"]
        assert "cleanup.policy=delete" in rows["fragments"]
        assert "retention.ms=-1" in rows["audit"]
        assert "message.timestamp.type=LogAppendTime" in rows["control"]
        assert "message.timestamp.type=CreateTime" in rows["fragments"]
        assert "cleanup.policy=delete" in rows["results"]
        assert "cleanup.policy=compact " in rows["executions"]

        again = await asyncio.to_thread(_run, kafka_bootstrap, topic_prefix, "topics", "create")
        assert again.returncode == 0, again.stderr
        assert all(line.startswith("exists") for line in again.stdout.splitlines() if line)
    finally:
        await delete_topics(kafka_bootstrap, list(names.all().values()))


async def test_partition_counts_that_differ_are_refused(
    kafka_bootstrap: str, topic_prefix: str, tmp_path
) -> None:
    names = TopicNames.from_prefix(topic_prefix)
    await create_topics(kafka_bootstrap, {names.fragments: 3, names.control: 2, names.changelog: 3})
    try:
        created = await asyncio.to_thread(_run, kafka_bootstrap, topic_prefix, "topics", "create")
        assert created.returncode == 78  # configuration (processor.exits)
        assert "same partition count" in created.stderr
        assert f"{names.fragments} has 3" in created.stderr
        assert f"{names.control} has 2" in created.stderr

        tools = tmp_path / "tools.yaml"
        tools.write_text("tools:\n  - name: t\n    parameters: {type: object}\n")
        worker = await asyncio.to_thread(
            _run, kafka_bootstrap, topic_prefix, "worker", "--tools", str(tools)
        )
        assert worker.returncode == 78
        assert "same partition count" in worker.stderr, worker.stderr
    finally:
        await delete_topics(kafka_bootstrap, list(names.all().values()))


async def test_a_missing_ledger_follows_dispatch_and_a_mismatch_is_refused(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    names = TopicNames.from_prefix(topic_prefix)
    await create_topics(kafka_bootstrap, {names.dispatch: 2})
    try:
        created = await asyncio.to_thread(
            _run, kafka_bootstrap, topic_prefix, "topics", "create", "--partitions", "4"
        )
        assert created.returncode == 0, created.stderr
        described = await asyncio.to_thread(
            _run, kafka_bootstrap, topic_prefix, "topics", "describe"
        )
        assert described.returncode == 0, described.stderr
        rows = {line.split()[0]: line for line in described.stdout.splitlines()}
        assert "partitions=2 " in rows["dispatch"] and "partitions=2 " in rows["executions"]
        assert "partitions=4 " in rows["fragments"] and "partitions=4 " in rows["results"]
    finally:
        await delete_topics(kafka_bootstrap, list(names.all().values()))


async def test_dispatch_and_ledger_counts_that_differ_are_refused(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    names = TopicNames.from_prefix(topic_prefix)
    await create_topics(kafka_bootstrap, {names.dispatch: 2, names.executions: 3})
    try:
        created = await asyncio.to_thread(_run, kafka_bootstrap, topic_prefix, "topics", "create")
        assert created.returncode == 78  # configuration (processor.exits)
        assert f"{names.dispatch} has 2" in created.stderr
        assert f"{names.executions} has 3" in created.stderr
    finally:
        await delete_topics(kafka_bootstrap, list(names.all().values()))


async def test_executor_create_topics_creates_the_missing_topics(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    """``processor executor run --create-topics`` on an empty cluster, then SIGTERM: exit 0."""
    names = TopicNames.from_prefix(topic_prefix)
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
    env.update(
        {"PROCESSOR_BOOTSTRAP_SERVERS": kafka_bootstrap, "PROCESSOR_TOPIC_PREFIX": topic_prefix}
    )
    command = [
        sys.executable,
        "-m",
        "processor.executor",
        "run",
        "--handlers",
        "examples.book_slot_executor:handlers",
        "--group",
        f"{topic_prefix}executors",
        "--allow-unsigned-operators",
        "--create-topics",
    ]
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:

        async def created() -> bool:
            assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")
            return len(await partition_counts(settings, names.all().values())) == 11

        await wait_until(created, timeout=60, what="every topic created")
        proc.send_signal(signal.SIGTERM)
        output, _ = await asyncio.to_thread(proc.communicate, timeout=60)
        assert proc.returncode == 0, output.decode(errors="replace")
        counts = await partition_counts(settings, names.all().values())
        assert counts[names.executions] == counts[names.dispatch] == settings.partitions
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        await delete_topics(kafka_bootstrap, list(names.all().values()))
