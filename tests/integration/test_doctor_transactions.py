"""``processor doctor transactions`` follows the coordinator, touches only this deployment's
transactions and names the permission it lacks (issue 38 items 2 and 3), on the secured broker.

The seed-19 shape, committed (as ``test_seed19_hanging.py`` builds it, KIP-890's partition
verification off on this tests' broker): a transaction of the worker's transactional id for
partition 1 writes to ``status-1`` as usual and to ``dispatch-1`` without telling its
coordinator, and commits. The coordinator completes the commit with a marker on ``status-1``
only, so ``dispatch-1`` keeps an open transaction holding a committed dispatch, invisible to
``read_committed`` readers. Beside it, another application's transactional producer (its own
transactional id, a 15-minute timeout) keeps a transaction open on ``fragments-0``.

Before: ``--abort --older-than 0`` aborted both at once (the dispatch was lost; the other
application's later commit "succeeded" and its record was gone) and a principal without READ or
ClusterAction got exit 70. Now the doctor commits the dispatch (visible exactly once), lists the
other application's transaction as foreign and leaves it (its commit makes its record visible),
asks before writing (refused with no terminal and no ``--yes``), and exits 77 naming the
permission a principal lacks.
"""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from processor.cli import doctor as doctor_cli
from processor.cli import errors
from processor.exits import ExitCode
from processor.kafka import hanging
from processor.kafka.acls import (
    AclBinding,
    Operation,
    PatternType,
    ResourceType,
    Role,
    acl_bindings,
    apply_acls,
)
from processor.kafka.clients import admin_client, discard_producer
from processor.kafka.tail import read_records
from processor.settings import Settings
from tests.integration.conftest import REPO_ROOT, TOOLS_YAML, WorkerProcess, wait_until
from tests.integration.secured_deployment import (  # noqa: F401  (fixtures)
    Deployment,
    deployment,
    partition_verification,
    run_cli,
)
from tests.secured_broker import secured_broker  # noqa: F401  (fixture)
from tests.txn_seams import cluster_client, producer_identity, write_unannounced


class _Bounded:
    """``processor doctor`` as ``processor`` runs it: behind the CLI's error boundary (one line
    on stderr and its exit code, never a traceback)."""

    @staticmethod
    def register(subparsers: Any) -> None:
        doctor_cli.register(subparsers)
        transactions = subparsers.choices["doctor"]._subparsers._group_actions[0]
        parser = transactions.choices["transactions"]
        func = parser.get_default("func")
        parser.set_defaults(
            func=lambda args: errors.run("processor doctor", lambda: func(args), debug=False)
        )


pytestmark = pytest.mark.integration

COMMITTED = orjson.dumps({"type": "dispatch", "dispatch_id": "committed-skipped", "turn_id": "t"})
FOREIGN = b"another application's record"
TIMEOUT_MS = 4000  # the committed transaction's own timeout: the doctor waits it out


async def _leave_committed_open(admin: Settings, hidden: TopicPartition) -> tuple[int, int]:
    """The seed-19 shape, committed: ``COMMITTED`` left open on ``hidden``. (producer id,
    epoch)."""
    producer = AIOKafkaProducer(
        transactional_id=admin.transactional_id(hidden.partition),
        transaction_timeout_ms=TIMEOUT_MS,
        **admin.kafka_client_kwargs(),
    )
    await producer.start()
    try:
        ids = producer_identity(producer)
        await producer.begin_transaction()
        at = hidden.partition
        await (await producer.send(admin.topics.status, b"{}", key=b"acme/t", partition=at))
        write_unannounced(producer, hidden)  # never added on the coordinator
        await (await producer.send(hidden.topic, COMMITTED, key=b"acme/t", partition=at))
        await producer.commit_transaction()
        return ids
    finally:
        await discard_producer(producer)


async def _open_on(admin: Settings, tp: TopicPartition) -> list[hanging.OpenTransaction]:
    async with admin_client(admin) as client:
        return await hanging.describe_open_transactions(cluster_client(client), [tp])


async def _values(admin: Settings, topic: str) -> list[bytes]:
    return [r.value async for r in read_records(admin, topic)]


def _on_a_terminal(argv: list[str], env: dict[str, str], typed: bytes) -> tuple[int, str, str]:
    """``processor ARGV`` in a subprocess whose stdin is a terminal (a pty) where ``typed`` is
    typed."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "processor.cli", *argv],
            stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=REPO_ROOT, env=env,
        )  # fmt: skip
        os.write(controller, typed)
        out, err = process.communicate(timeout=120)
    finally:
        os.close(terminal)
        os.close(controller)
    return process.returncode, out.decode(), err.decode()


def _rows(out: str) -> dict[str, dict[str, Any]]:
    rows = [orjson.loads(line) for line in out.splitlines()]
    return {f"{r['topic']}-{r['partition']}": r for r in rows}


async def test_the_doctor_commits_what_the_coordinator_committed_and_leaves_others_alone(
    deployment: Deployment,  # noqa: F811
) -> None:
    dep = deployment
    admin = dep.settings("admin")
    topics = admin.topics
    dispatch_1 = TopicPartition(topics.dispatch, 1)
    fragments_0 = TopicPartition(topics.fragments, 0)
    doctor = ["doctor", "transactions", "--executor-group", dep.executor_group]
    dispatch_key, fragments_key = f"{topics.dispatch}-1", f"{topics.fragments}-0"
    foreign = AIOKafkaProducer(
        transactional_id=f"{dep.prefix}another-app",
        transaction_timeout_ms=900_000,  # 15 minutes
        **admin.kafka_client_kwargs(),
    )
    await partition_verification(admin, enabled=False)
    try:
        producer_id, epoch = await _leave_committed_open(admin, dispatch_1)
        [left] = await _open_on(admin, dispatch_1)
        assert (left.producer_id, left.producer_epoch) == (producer_id, epoch)
        assert COMMITTED not in await _values(admin, topics.dispatch)  # held behind it
        await foreign.start()
        await foreign.begin_transaction()
        await (await foreign.send(topics.fragments, FOREIGN, key=b"k", partition=0))

        async def judged() -> dict[str, dict[str, Any]] | None:
            code, out, err = await run_cli(
                _Bounded, [*doctor, "--older-than", "0", "--json"], dep.env("admin")
            )
            assert code in (0, 1), out + err
            rows = _rows(out)
            return rows if rows[dispatch_key]["verdict"] != "ending" else None

        rows = await wait_until(judged, timeout=30, what="the committed one past its timeout")
        assert rows[dispatch_key]["verdict"] == "commit", rows
        assert rows[dispatch_key]["transactional_id"] == admin.transactional_id(1)
        assert rows[dispatch_key]["coordinator_state"] == "CompleteCommit"
        assert rows[fragments_key]["verdict"] == "foreign", rows
        assert not rows[fragments_key]["hanging"] and rows[fragments_key]["marker"] is None

        # the plan, then a refusal: no terminal to confirm on and no --yes
        code, out, err = await run_cli(
            _Bounded, [*doctor, "--older-than", "0", "--end"], dep.env("admin")
        )
        assert code == ExitCode.USAGE, out + err
        assert f"will commit {topics.dispatch}-1 producer {producer_id}" in out
        assert f"leave (foreign) {topics.fragments}-0" in out
        assert "--yes" in err
        assert await _open_on(admin, dispatch_1) == [left]  # nothing written

        # on a terminal it asks; anything but yes writes nothing
        argv = [*doctor, "--older-than", "0", "--end"]
        code, out, err = await asyncio.to_thread(_on_a_terminal, argv, dep.env("admin"), b"n\n")
        assert code == ExitCode.USAGE, out + err
        assert "Write the 1 markers above, as their coordinators decided? [y/N]" in out
        assert "not confirmed: nothing written" in err
        assert await _open_on(admin, dispatch_1) == [left]

        code, out, err = await run_cli(
            _Bounded, [*doctor, "--older-than", "0", "--end", "--yes"], dep.env("admin")
        )
        assert code == 0, out + err
        assert f"committed  {topics.dispatch}-1 producer {producer_id}" in out
        assert f"foreign    {topics.fragments}-0" in out
        assert await _open_on(admin, dispatch_1) == []
        assert (await _values(admin, topics.dispatch)).count(COMMITTED) == 1  # exactly once

        # the other application's transaction is still open, and its commit shows its record
        assert [t.producer_id for t in await _open_on(admin, fragments_0)] == [
            producer_identity(foreign)[0]
        ]
        await foreign.commit_transaction()
        assert FOREIGN in await _values(admin, topics.fragments)
        code, out, err = await run_cli(_Bounded, [*doctor, "--older-than", "0"], dep.env("admin"))
        assert code == 0, out + err
        assert out.endswith("0 open transactions on 22 partitions, 0 hanging\n"), out
    finally:
        await foreign.stop()
        await partition_verification(admin, enabled=True)


async def test_a_missing_permission_exits_77_naming_it(
    deployment: Deployment,  # noqa: F811
) -> None:
    """User:auditor, granted step by step what the doctor needs on this deployment."""
    dep = deployment
    admin = dep.settings("admin")
    topics = admin.topics
    dispatch_1 = TopicPartition(topics.dispatch, 1)
    doctor = ["doctor", "transactions", "--executor-group", dep.executor_group]
    doctor += ["--older-than", "0", "--end", "--yes"]

    async def grant(kind: ResourceType, name: str, operation: Operation) -> None:
        pattern = PatternType.LITERAL if kind is ResourceType.CLUSTER else PatternType.PREFIXED
        binding = AclBinding("User:auditor", kind, pattern, name, operation)
        async with admin_client(admin) as client:
            assert await apply_acls(client, [binding]) == 1

    await partition_verification(admin, enabled=False)
    try:
        await _leave_committed_open(admin, dispatch_1)
        await asyncio.sleep(TIMEOUT_MS / 1000)  # past its timeout: a commit to write
        await grant(ResourceType.TOPIC, dep.prefix, Operation.DESCRIBE)  # metadata, not READ
        code, out, err = await run_cli(_Bounded, doctor, dep.env("auditor"))
        assert code == ExitCode.NO_PERMISSION, out + err
        assert "READ on the topic" in err and "TopicAuthorizationFailed" in err, err

        await grant(ResourceType.TOPIC, dep.prefix, Operation.READ)
        code, out, err = await run_cli(_Bounded, doctor, dep.env("auditor"))
        assert code == ExitCode.NO_PERMISSION, out + err
        assert "DESCRIBE on the" in err and "transactional ids" in err, err

        await grant(ResourceType.TRANSACTIONAL_ID, dep.prefix, Operation.DESCRIBE)
        code, out, err = await run_cli(_Bounded, doctor, dep.env("auditor"))
        assert code == ExitCode.NO_PERMISSION, out + err
        assert "ClusterAction on the cluster" in err, err
        assert f"will commit {topics.dispatch}-1" in out  # the plan came first
        assert len(await _open_on(admin, dispatch_1)) == 1  # nothing written
    finally:
        await partition_verification(admin, enabled=True)


async def test_a_task_held_on_a_committed_one_leaves_the_doctor_its_commit(
    deployment: Deployment,  # noqa: F811
) -> None:
    """The seed-19 shape, committed, on a worker's output partition, and a worker that may not
    write markers (User:adapter with the worker's ACLs but not ClusterAction). The worker's
    fence reads the coordinator's ``CompleteCommit`` and is held *before* its
    ``InitProducerId``, with a held line that says ``commit``: the coordinator still knows
    that transaction was committed, so the doctor's verdict is ``commit`` and its marker makes
    the dispatch visible, once; the worker then goes on. Before, the held worker's
    ``InitProducerId`` made the coordinator forget (``Empty``): the doctor could not tell (an
    abort then, before issue 38) and the worker itself, granted ClusterAction after a few
    retries or restarted, aborted the committed dispatch."""
    dep = deployment
    admin = dep.settings("admin")
    topics = admin.topics
    dispatch_1 = TopicPartition(topics.dispatch, 1)
    key = f"{topics.dispatch}-1"
    no_cluster_action = [
        b
        for b in acl_bindings(admin, {Role.WORKER: "User:adapter"}, executor_group="unused")
        if b.resource_type is not ResourceType.CLUSTER
    ]
    async with admin_client(admin) as client:
        await apply_acls(client, no_cluster_action)
    (dep.tmp_path / "tools.yaml").write_text(TOOLS_YAML)
    env = {
        "PROCESSOR_TOOLS_FILE": str(dep.tmp_path / "tools.yaml"),
        "PROCESSOR_SESSION_TIMEOUT_MS": "6000",
        "PROCESSOR_TRANSACTION_TIMEOUT_MS": "5000",
        "PROCESSOR_COMMIT_TIMEOUT_SECONDS": "4",
        "PROCESSOR_POLL_TIMEOUT_MS": "100",
    }
    held = WorkerProcess("held-worker", dep.env("adapter") | env, dep.tmp_path / "held.log")
    await partition_verification(admin, enabled=False)
    try:
        producer_id, _ = await _leave_committed_open(admin, dispatch_1)

        def held_lines() -> list[dict[str, Any]]:
            return [r for r in held.log_records() if r.get("msg", "").startswith("partition held")]

        [line] = await wait_until(
            lambda: asyncio.sleep(0, held_lines()), timeout=90, what="the held line"
        )
        assert (line["partitions"], line["markers"]) == ([key], ["commit"]), line
        assert line["command"].startswith("processor doctor transactions")

        async def judged() -> dict[str, Any] | None:
            code, out, err = await run_cli(
                _Bounded,
                ["doctor", "transactions", "--older-than", "0", "--json"],
                dep.env("admin"),
            )
            assert code in (0, 1), out + err
            row = _rows(out)[key]
            return row if row["verdict"] != "ending" else None

        row = await wait_until(judged, timeout=30, what="the doctor's verdict")
        assert (row["verdict"], row["coordinator_state"]) == ("commit", "CompleteCommit"), row
        assert row["producer_id"] == producer_id
        assert COMMITTED not in await _values(admin, topics.dispatch)

        code, out, err = await run_cli(
            _Bounded,
            ["doctor", "transactions", "--older-than", "0", "--end", "--yes"],
            dep.env("admin"),
        )
        assert code == 0, out + err
        assert f"committed  {key} producer {producer_id}" in out
        assert (await _values(admin, topics.dispatch)).count(COMMITTED) == 1

        async def both_ready() -> bool:
            return (await held.readiness()).get("ready") == [0, 1]

        await wait_until(both_ready, timeout=90, what="the worker, no longer held")
        assert len(held_lines()) == 1
        assert (await _values(admin, topics.dispatch)).count(COMMITTED) == 1
    finally:
        held.terminate()
        await held.wait_exit(timeout=30)
        held.close()
        await partition_verification(admin, enabled=True)
