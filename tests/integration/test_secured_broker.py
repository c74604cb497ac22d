"""Least privilege on a broker that enforces it (``scripts/kafka-local start --secured``).

SCRAM-SHA-512 over TLS, ``StandardAuthorizer``, no ACL means deny. The admin creates the topics
and the ACL table of docs/operations.md for five principals with ``processor topics create
--acls-for ... --apply-acls``; then each principal does its job with exactly those ACLs (adapter → fragments and
control, worker → dispatch/ledger/audit in transactions, executor → runs the call and writes its
result, operator → a signed stop, auditor → reads it), and is refused what the table does not
grant. The worker is a subprocess that gets its password from the environment only; its log
never shows it.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from processor.cli import ctl as ctl_cli
from processor.cli import doctor as doctor_cli
from processor.core.events import encode, turn_key
from processor.exits import ExitCode
from processor.kafka.acls import ResourceType, Role, acl_bindings, apply_acls
from processor.kafka.clients import admin_client, discard_producer
from processor.kafka.partitioner import partition_for
from processor.kafka.tail import read_records
from processor.ops.signing import Keyring
from processor.settings import Settings
from tests.integration.conftest import (
    REPO_ROOT,
    TOOLS_YAML,
    WorkerProcess,
    call_events,
    turn_started,
    wait_until,
)
from tests.integration.executor_harness import Executor, Recorder, wait_results
from tests.integration.secured_deployment import (  # noqa: F401  (fixture: deployment)
    Deployment,
    deployment,
    partition_verification,
    run_cli,
)
from tests.secured_broker import SecuredBroker, secured_broker  # noqa: F401  (fixture)
from tests.txn_seams import cluster_client, write_unannounced

pytestmark = pytest.mark.integration

async def produce(settings: Settings, topic: str, value: bytes, key: bytes) -> None:
    producer = AIOKafkaProducer(enable_idempotence=True, **settings.kafka_client_kwargs())
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


async def consume_once(settings: Settings, topic: str) -> None:
    """Read partition 0 of ``topic`` from the start; raise the broker's refusal.

    A principal without DESCRIBE gets error 29 in the metadata answer, which aiokafka records in
    ``cluster.unauthorized_topics`` and retries forever (no leader, so no fetch is ever sent);
    with DESCRIBE but not READ, the fetch itself fails with 29 and ``getone`` raises it.
    """
    consumer = AIOKafkaConsumer(group_id=None, **settings.kafka_client_kwargs())
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await cluster_client(consumer).force_metadata_update()
        if topic in cluster_client(consumer).cluster.unauthorized_topics:
            raise TopicAuthorizationFailedError(topic)
        await consumer.seek_to_beginning(tp)
        await asyncio.wait_for(consumer.getone(), 15)
    finally:
        await consumer.stop()


async def test_each_principal_does_its_job_with_exactly_its_acls(deployment: Deployment) -> None:  # noqa: F811
    dep = deployment
    adapter, executor = dep.settings("adapter"), dep.settings("executor")
    topics = adapter.topics
    (dep.tmp_path / "tools.yaml").write_text(TOOLS_YAML)

    # the operator's key: keygen, then a keyring the worker and the executor trust
    keys = dep.tmp_path / "keys"
    code, out, err = await run_cli(
        ctl_cli,
        ["ctl", "keygen", "--key-id", "ops-1", "--operator", "oncall", "--tenants", "acme",
         "--out", str(keys)],
        dep.env("operator"),
    )  # fmt: skip
    assert code == 0, out + err
    keyring = keys / "ops-1.keyring.yaml"

    worker_env = dep.env("worker") | {
        "PROCESSOR_TOOLS_FILE": str(dep.tmp_path / "tools.yaml"),
        "PROCESSOR_KEYRING_FILE": str(keyring),
        "PROCESSOR_SESSION_TIMEOUT_MS": "6000",
        "PROCESSOR_TRANSACTION_TIMEOUT_MS": "5000",
        "PROCESSOR_COMMIT_TIMEOUT_SECONDS": "4",
        "PROCESSOR_POLL_TIMEOUT_MS": "100",
        "PROCESSOR_LOG_LEVEL": "DEBUG",
    }
    worker = WorkerProcess("secured-worker", worker_env, dep.tmp_path / "worker.log")
    recorder = Recorder("get_weather")
    runner = Executor(
        executor,
        recorder.handlers,
        group=dep.executor_group,
        verifier=Keyring.load(keyring),
    )
    try:
        await worker.wait_ready(timeout=90)
        await runner.start()

        # the adapter (gateway): turn.started on control, the call's fragments
        producer = AIOKafkaProducer(enable_idempotence=True, **adapter.kafka_client_kwargs())
        await producer.start()
        try:
            for turn in ("t-1", "t-2"):
                event = turn_started("acme", turn)
                key = turn_key("acme", turn).encode()
                await producer.send_and_wait(topics.control, encode(event), key=key)
                for frag in call_events("acme", turn, "call_0", '{"city": "Oslo"}'):
                    await producer.send_and_wait(topics.fragments, encode(frag), key=key)
        finally:
            await producer.stop()

        # worker → dispatch (transactions), executor → runs each call once, writes results
        # (results are read by the application, not by a role of the table: admin reads them)
        done = await wait_results(dep.settings("admin"), 2, timeout=90)
        assert {(r.turn_id, r.outcome) for r in done} == {
            ("t-1", "succeeded"),
            ("t-2", "succeeded"),
        }
        assert len(recorder.calls) == 2

        # the operator: a signed tenant stop, written by `processor ctl` with its own ACLs
        code, out, err = await run_cli(
            ctl_cli,
            ["ctl", "stop-tenant", "--tenant", "acme", "--reason", "drill", "--command-id",
             "stop-1", "--key", str(keys / "ops-1.pem"), "--key-id", "ops-1",
             "--operator", "oncall"],
            dep.env("operator"),
        )  # fmt: skip
        assert code == 0, out + err

        # the auditor reads the worker's audit of it
        auditor = dep.settings("auditor")

        async def audited() -> list[dict[str, Any]]:
            found = [
                orjson.loads(r.value) async for r in read_records(auditor, auditor.topics.audit)
            ]
            return [a for a in found if a.get("command_id") == "stop-1"]

        [*audits] = await wait_until(audited, timeout=60, what="the stop audited")
        assert {a["outcome"] for a in audits} == {"applied"}
    finally:
        await runner.stop()
        worker.terminate()
        code = await worker.wait_exit(timeout=30)
        log = worker.log()
        worker.close()
    assert code == 0, log[-3000:]
    # the secret came from the environment and never reaches the log, even at DEBUG
    assert "sasl_password" in log and "**********" in log
    assert dep.broker.password("worker") not in log


async def test_each_principal_is_refused_what_its_acls_do_not_grant(
    deployment: Deployment,  # noqa: F811
) -> None:
    dep = deployment
    topics = dep.settings("adapter").topics
    key = b"acme/t-1"

    # an adapter writing dispatch (a forged executor input)
    with pytest.raises(TopicAuthorizationFailedError):
        await produce(dep.settings("adapter"), topics.dispatch, b"{}", key)
    # an executor writing control (granting itself a confirmation)
    with pytest.raises(TopicAuthorizationFailedError):
        await produce(dep.settings("executor"), topics.control, b"{}", key)
    # an operator reading dispatch (argument values)
    with pytest.raises(TopicAuthorizationFailedError):
        await consume_once(dep.settings("operator"), topics.dispatch)
    # an auditor reading the ledger, a worker reading results (it may read what it writes:
    # DescribeProducers, for its own hanging transactions), an executor reading the ledger
    with pytest.raises(TopicAuthorizationFailedError):
        await consume_once(dep.settings("auditor"), topics.ledger)
    with pytest.raises(TopicAuthorizationFailedError):
        await consume_once(dep.settings("worker"), topics.results)
    with pytest.raises(TopicAuthorizationFailedError):
        await consume_once(dep.settings("executor"), topics.ledger)
    # an adapter joining the assemblers' group, or using their transactional ids
    consumer = AIOKafkaConsumer(
        topics.fragments,
        group_id=dep.common["group_id"],
        **dep.settings("adapter").kafka_client_kwargs(),
    )
    with pytest.raises(GroupAuthorizationFailedError):
        try:
            await consumer.start()
            await asyncio.wait_for(consumer.getone(), 15)
        finally:
            await consumer.stop()
    producer = AIOKafkaProducer(
        transactional_id=f"{dep.common['application_id']}-0",
        **dep.settings("adapter").kafka_client_kwargs(),
    )
    with pytest.raises(TransactionalIdAuthorizationFailed):
        try:
            await producer.start()
        finally:
            await producer.stop()


async def test_unauthenticated_clients_are_refused(secured_broker: SecuredBroker) -> None:  # noqa: F811
    broker = secured_broker
    # no TLS, no SASL: the listener speaks neither
    plain = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000)
    with pytest.raises(KafkaError):
        try:
            await asyncio.wait_for(plain.start(), 20)
        finally:
            await plain.stop()
    # TLS that trusts the CA, but no SASL (anonymous)
    context = ssl.create_default_context(cafile=str(broker.cafile))
    anonymous = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap,
        security_protocol="SSL",
        ssl_context=context,
        request_timeout_ms=5000,
    )
    with pytest.raises(KafkaError):
        try:
            await asyncio.wait_for(anonymous.start(), 20)
        finally:
            await anonymous.stop()
    # a known user with a wrong password
    wrong = broker.settings("worker", sasl_password="not-it")
    impostor = AIOKafkaProducer(**wrong.kafka_client_kwargs())
    with pytest.raises(KafkaError):
        try:
            await asyncio.wait_for(impostor.start(), 20)
        finally:
            await impostor.stop()
    # a TLS client that does not trust the broker's CA
    untrusted = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap,
        security_protocol="SASL_SSL",
        ssl_context=ssl.create_default_context(),
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="worker",
        sasl_plain_password=broker.password("worker"),
        request_timeout_ms=5000,
    )
    with pytest.raises((KafkaError, KafkaConnectionError, ssl.SSLError)):
        try:
            await asyncio.wait_for(untrusted.start(), 20)
        finally:
            await untrusted.stop()


async def test_refused_credentials_and_acls_are_one_line_exit_77(deployment: Deployment) -> None:  # noqa: F811
    """A wrong password, and a principal without the ACL, fail as one line (exit 77)."""

    def processor(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-W", "always::ResourceWarning", "-m", "processor.cli", *argv],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    wrong = {**deployment.env("worker"), "PROCESSOR_SASL_PASSWORD": "not-the-password"}
    result = await asyncio.to_thread(processor, wrong, "topics", "describe")
    assert result.returncode == ExitCode.NO_PERMISSION, result.stderr
    assert (
        "rejected the credentials" in result.stderr and "PROCESSOR_SASL_PASSWORD" in result.stderr
    )
    not_allowed = deployment.env("auditor")  # may read the audit trail, not write control
    result = await asyncio.to_thread(
        processor, not_allowed, "ctl", "start-turn", "--tenant", "t", "--turn", "u", "--actor", "a"
    )
    assert result.returncode == ExitCode.NO_PERMISSION, result.stderr
    assert "refused" in result.stderr and "--command-id" in result.stderr
    for noise in ("Traceback", "Unclosed", "ResourceWarning"):
        assert noise not in result.stderr, result.stderr


async def test_a_hanging_transaction_holds_a_worker_without_cluster_action(
    deployment: Deployment,  # noqa: F811
) -> None:
    """Seed 19's open transaction (test_seed19_hanging.py) on the secured broker.

    A principal with the worker's ACLs but not ClusterAction (User:adapter, granted them for
    this deployment) must not commit over it: partition 0 stays held, with one error line that
    names the partition, the marker its coordinator's decision calls for and ``processor doctor
    transactions``, and the held gauge. The doctor (admin) lists it as hanging, ``undecided``.
    The worker role of the table (with ClusterAction) then aborts it itself, and the aborted
    dispatch never becomes visible.
    """
    dep = deployment
    admin = dep.settings("admin")
    topics = admin.topics
    dispatch_0 = TopicPartition(topics.dispatch, 0)
    (dep.tmp_path / "tools.yaml").write_text(TOOLS_YAML)
    no_cluster_action = [
        b
        for b in acl_bindings(admin, {Role.WORKER: "User:adapter"}, executor_group="unused")
        if b.resource_type is not ResourceType.CLUSTER
    ]
    async with admin_client(admin) as client:
        await apply_acls(client, no_cluster_action)
    turn = next(f"t-{n}" for n in range(100) if partition_for(f"acme/t-{n}".encode(), 2) == 0)
    await partition_verification(admin, enabled=False)
    env = {
        "PROCESSOR_TOOLS_FILE": str(dep.tmp_path / "tools.yaml"),
        "PROCESSOR_SESSION_TIMEOUT_MS": "6000",
        "PROCESSOR_TRANSACTION_TIMEOUT_MS": "5000",
        "PROCESSOR_COMMIT_TIMEOUT_SECONDS": "4",
        "PROCESSOR_POLL_TIMEOUT_MS": "100",
    }
    held = WorkerProcess("held-worker", dep.env("adapter") | env, dep.tmp_path / "held.log")
    worker: WorkerProcess | None = None
    try:
        await _leave_open(admin, dispatch_0, turn)
        await produce_turn(dep.settings("adapter"), turn)

        def held_lines() -> list[dict[str, Any]]:
            return [r for r in held.log_records() if r.get("msg", "").startswith("partition held")]

        [line] = await wait_until(
            lambda: asyncio.sleep(0, held_lines()), timeout=90, what="the held line"
        )
        assert line["partitions"] == [f"{topics.dispatch}-0"]
        assert "ClusterAuthorizationFailedError" in line["error"]
        assert line["markers"] == ["abort"]  # the coordinator had aborted it
        # the doctor, never a bare `kafka-transactions.sh abort` (issue 38)
        assert line["command"] == (
            f"processor doctor transactions --bootstrap-servers {admin.bootstrap_servers}"
        )
        gauge = (
            f'toolcall_hanging_transaction_held{{owner="worker",partition="0",'
            f'topic="{topics.dispatch}"}} 1.0'
        )
        await wait_until(
            lambda: _contains(held.metrics(), gauge), timeout=30, what="the held gauge"
        )
        await asyncio.sleep(8)  # held through retries: no commit, one line
        assert len(held_lines()) == 1
        assert (await held.readiness()).get("ready") == [1]
        assert [r async for r in read_records(admin, topics.dispatch)] == []

        code, out, err = await run_cli(
            doctor_cli, ["doctor", "transactions", "--older-than", "0"], dep.env("admin")
        )
        assert code == 1, out + err
        # the held worker's InitProducerId moved the coordinator on: how it ended is no longer
        # known to it, so the doctor guesses no marker; the task ends it once it may
        assert f"undecided  {topics.dispatch}-0" in out
    finally:
        held.terminate()
        await held.wait_exit(timeout=30)
        held.close()
    try:
        worker = WorkerProcess("worker", dep.env("worker") | env, dep.tmp_path / "worker.log")
        await worker.wait_ready(timeout=90)

        async def dispatched() -> list[dict[str, Any]]:
            return [orjson.loads(r.value) async for r in read_records(admin, topics.dispatch)]

        records = await wait_until(dispatched, timeout=60, what="the turn dispatched")
        assert [(r["turn_id"], r["dispatch_id"] == "aborted") for r in records] == [(turn, False)]
        assert "hanging transactions of our producer id aborted" in worker.log()
    finally:
        if worker is not None:
            worker.terminate()
            await worker.wait_exit(timeout=30)
            worker.close()
        await partition_verification(admin, enabled=True)


async def _contains(text: Any, wanted: str) -> bool:
    return wanted in await text


async def produce_turn(adapter: Settings, turn: str) -> None:
    producer = AIOKafkaProducer(enable_idempotence=True, **adapter.kafka_client_kwargs())
    await producer.start()
    try:
        key = turn_key("acme", turn).encode()
        await producer.send_and_wait(
            adapter.topics.control, encode(turn_started("acme", turn)), key=key
        )
        for frag in call_events("acme", turn, "call_0", '{"city": "Oslo"}'):
            await producer.send_and_wait(adapter.topics.fragments, encode(frag), key=key)
    finally:
        await producer.stop()


async def _leave_open(admin: Settings, tp: TopicPartition, turn: str) -> None:
    """Seed 19's state: a transaction of the worker's producer id for partition 0, completed
    as aborted by its coordinator, left open on ``tp`` with a dispatch record in it."""
    producer = AIOKafkaProducer(
        transactional_id=admin.transactional_id(0), **admin.kafka_client_kwargs()
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        await (await producer.send(admin.topics.status, b"{}", partition=0))
        write_unannounced(producer, tp)  # never added on the coordinator
        value = orjson.dumps({"type": "dispatch", "turn_id": turn, "dispatch_id": "aborted"})
        await (await producer.send(tp.topic, value, partition=0))
        await producer.abort_transaction()
    finally:
        await discard_producer(producer)
