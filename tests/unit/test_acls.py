"""The ACL table of docs/operations.md as bindings and kafka-acls.sh commands (applied on a real
broker by tests/integration/test_secured_broker.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from processor.kafka.acls import AclError, Role, acl_bindings, format_commands, parse_principals
from processor.settings import Settings

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def grants(role: Role) -> set[tuple[str, str, str, str]]:
    settings = Settings(topic_prefix="p.", group_id="g", application_id="app")
    return {
        (b.resource_type.name, b.pattern.name, b.name, b.operation.name)
        for b in acl_bindings(settings, {role: f"User:{role.value}"}, executor_group="ex")
    }


def test_each_role_gets_exactly_the_readme_table() -> None:
    assert grants(Role.ADAPTER) == {
        ("TOPIC", "LITERAL", "p.fragments", "WRITE"),
        ("TOPIC", "LITERAL", "p.control", "WRITE"),
    }
    assert grants(Role.OPERATOR) == {("TOPIC", "LITERAL", "p.control", "WRITE")}
    assert grants(Role.AUDITOR) == {("TOPIC", "LITERAL", "p.audit", "READ")}
    # an agent following its turns' outcomes (issue 40): READ only, no group, nothing written
    assert grants(Role.FOLLOWER) == {
        ("TOPIC", "LITERAL", f"p.{topic}", "READ")
        for topic in ("status", "ledger", "results", "audit")
    }
    worker = grants(Role.WORKER)
    reads = {n for t, _, n, op in worker if t == "TOPIC" and op == "READ"}
    writes = {n for t, _, n, op in worker if t == "TOPIC" and op == "WRITE"}
    outputs = {f"p.{t}" for t in ("dispatch", "proposals", "status", "ledger", "audit",
                                  "deadletter", "assembler-changelog")}  # fmt: skip
    # READ on what it writes: DescribeProducers, to find its own hanging transactions
    assert reads == {"p.fragments", "p.control"} | outputs
    assert writes == outputs
    # WriteTxnMarkers, to abort them
    assert ("CLUSTER", "LITERAL", "kafka-cluster", "CLUSTER_ACTION") in worker
    assert ("GROUP", "LITERAL", "g", "READ") in worker
    assert {("TRANSACTIONAL_ID", "PREFIXED", "app-", op) for op in ("WRITE", "DESCRIBE")} <= worker
    executor = grants(Role.EXECUTOR)
    assert {n for t, _, n, op in executor if t == "TOPIC" and op == "READ"} == {
        "p.dispatch", "p.control", "p.executions", "p.results", "p.status",
    }  # fmt: skip
    assert ("CLUSTER", "LITERAL", "kafka-cluster", "CLUSTER_ACTION") in executor
    assert {n for t, _, n, op in executor if t == "TOPIC" and op == "WRITE"} == {
        "p.executions", "p.results", "p.status",
    }  # fmt: skip
    assert ("TRANSACTIONAL_ID", "PREFIXED", "ex.executor.", "WRITE") in executor


def test_the_operations_doc_still_lists_these_roles() -> None:
    table = OPERATIONS.read_text().split("## ACLs each principal needs", 1)[1].split("\n## ", 1)[0]
    roles = {"adapter / gateway", "assembler worker", "executor", "operator", "auditor"}
    roles.add("outcome follower (agent / gateway)")
    assert roles <= set(re.findall(r"^\| ([a-z /()`]+?) (?:\(`processor ctl`\) )?\|", table, re.M))


def test_commands_are_kafka_acls_lines() -> None:
    settings = Settings(topic_prefix="p.", application_id="app")
    lines = format_commands(
        acl_bindings(settings, parse_principals(["worker=assembler"]), executor_group="ex"),
        "b:9092",
    )
    assert (
        "kafka-acls.sh --bootstrap-server b:9092 --add --allow-principal User:assembler "
        "--operation Write --transactional-id app- --resource-pattern-type prefixed"
    ) in lines
    assert (
        "kafka-acls.sh --bootstrap-server b:9092 --add --allow-principal User:assembler "
        "--operation ClusterAction --cluster"
    ) in lines
    assert all(line.startswith("kafka-acls.sh --bootstrap-server b:9092 --add ") for line in lines)


@pytest.mark.parametrize("item", ["worker", "nobody=User:x", "worker="])
def test_bad_principal_mappings_are_refused(item: str) -> None:
    with pytest.raises(AclError):
        parse_principals([item])
