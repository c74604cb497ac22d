"""Topic layout (specs, co-partitioning check) and record layout (keys, headers) without a broker."""

from __future__ import annotations

import pytest

from processor.core.assembler import StateChange
from processor.core.events import Audit, AuditOutcome, CallKey, DeadLetter, Status, UserState
from processor.kafka.codec import (
    encode_change,
    encode_output,
    output_key,
    traceparent_of,
    valid_traceparent,
)
from processor.kafka.topics import (
    EXECUTOR_LEDGER,
    TopicLayoutError,
    TopicState,
    check_copartitioning,
    format_states,
    replication,
    topic_specs,
)
from processor.settings import Settings, TopicNames

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_specs_cover_every_topic_with_its_policy() -> None:
    s = Settings(topic_prefix="p.", partitions=4, replication_factor=3, min_insync_replicas=2)
    specs = {spec.role: spec for spec in topic_specs(s)}
    assert set(specs) == set(TopicNames.from_prefix("p.").all())
    assert all(spec.partitions == 4 and spec.replication_factor == 3 for spec in specs.values())
    assert all(spec.config["min.insync.replicas"] == "2" for spec in specs.values())
    assert specs["changelog"].config["cleanup.policy"] == "compact"
    assert specs["changelog"].name == "p.assembler-changelog"
    for role in ("fragments", "control", "dispatch", "proposals", "status", "deadletter"):
        assert specs[role].config["cleanup.policy"] == "delete"
    assert specs["audit"].config["retention.ms"] == "-1"
    assert specs["dispatch"].config["max.message.bytes"] == str(s.max_message_bytes)
    # the fence compares command times with the broker's clock, never a producer's
    assert specs["control"].config["message.timestamp.type"] == "LogAppendTime"
    assert all(
        "message.timestamp.type" not in spec.config
        for role, spec in specs.items()
        if role != "control"
    )
    # the executors' topics: results like the outputs; the ledger compacted and kept forever
    assert specs["results"].name == "p.results"
    assert specs["results"].config["cleanup.policy"] == "delete"
    assert specs["results"].config["retention.ms"] == str(s.output_retention_ms)
    assert specs["executions"].name == "p.executions"
    assert specs["executions"].config["cleanup.policy"] == "compact"
    assert specs["executions"].config["retention.ms"] == "-1"
    assert specs["executions"].partitions == specs["dispatch"].partitions


def test_a_bounded_ledger_is_compacted_and_deleted_after_the_dispatch_retention() -> None:
    week = 7 * 24 * 3600 * 1000
    s = Settings(output_retention_ms=week, executions_retention_ms=2 * week)
    executions = {spec.role: spec for spec in topic_specs(s)}["executions"]
    assert executions.config["cleanup.policy"] == "compact,delete"
    assert executions.config["retention.ms"] == str(2 * week)


def test_specs_follow_settings_and_overrides() -> None:
    s = Settings(ledger_cleanup_policy="compact,delete", ledger_retention_ms=1000)
    specs = {spec.role: spec for spec in topic_specs(s, partitions=12, replication_factor=1)}
    assert specs["ledger"].config == {"cleanup.policy": "compact,delete", "retention.ms": "1000"}
    assert specs["fragments"].partitions == 12


@pytest.mark.parametrize(
    ("brokers", "rf", "isr"),
    [(None, 1, None), (1, 1, None), (2, 2, None), (3, 3, "2"), (5, 3, "2")],
)
def test_replication_follows_the_cluster_size(brokers: int | None, rf: int, isr: str | None) -> None:
    specs = topic_specs(Settings(), brokers=brokers)
    assert {spec.replication_factor for spec in specs} == {rf}
    assert {spec.config.get("min.insync.replicas") for spec in specs} == {isr}


def test_named_replication_wins_and_three_replicas_get_two_in_sync() -> None:
    assert replication(Settings(replication_factor=2), 5) == (2, None)
    assert replication(Settings(), 1, replication_factor=3) == (3, 2)  # the chart's default
    assert replication(Settings(min_insync_replicas=3), 3) == (3, 3)
    assert replication(Settings(min_insync_replicas=1), 1) == (1, 1)


def _states(fragments: int | None, control: int | None, changelog: int | None) -> dict:
    names = TopicNames.from_prefix("p.")
    counts = {"fragments": fragments, "control": control, "changelog": changelog}
    return {role: TopicState(role, names.all()[role], n) for role, n in counts.items()}


def test_copartitioning_accepts_equal_counts() -> None:
    check_copartitioning(_states(6, 6, 6))


def test_copartitioning_explains_a_mismatch() -> None:
    with pytest.raises(TopicLayoutError) as info:
        check_copartitioning(_states(6, 4, 6))
    message = str(info.value)
    assert "same partition count" in message
    assert "p.fragments has 6" in message and "p.control has 4" in message


def test_copartitioning_names_missing_topics() -> None:
    with pytest.raises(TopicLayoutError, match=r"missing topic\(s\): p.control"):
        check_copartitioning(_states(6, None, 6))


def test_dispatch_and_the_executor_ledger_must_match() -> None:
    names = TopicNames.from_prefix("p.")
    states = {
        role: TopicState(role, names.all()[role], n)
        for role, n in {"dispatch": 6, "executions": 6}.items()
    }
    check_copartitioning(states, EXECUTOR_LEDGER)
    states["executions"] = TopicState("executions", "p.executions", 3)
    with pytest.raises(TopicLayoutError) as info:
        check_copartitioning(states, EXECUTOR_LEDGER)
    assert "p.dispatch has 6" in str(info.value) and "p.executions has 3" in str(info.value)
    assert "ledger partition p" in str(info.value)
    states["executions"] = TopicState("executions", "p.executions", None)
    with pytest.raises(TopicLayoutError, match=r"missing topic\(s\): p.executions"):
        check_copartitioning(states, EXECUTOR_LEDGER)


def test_describe_lines() -> None:
    lines = format_states(_states(3, None, 3))
    assert any("p.control  MISSING" in line for line in lines)
    assert any(line.startswith("fragments") and "partitions=3" in line for line in lines)


# ---------------------------------------------------------------------------- record layout

KEY = CallKey(tenant="acme", turn_id="t1", response_id="r", item_id="i", call_id="c")


def test_call_records_are_keyed_by_turn_key_and_carry_the_traceparent() -> None:
    status = Status(
        **KEY.model_dump(),
        status_id="s",
        state=UserState.PREPARING,
        retry_possible=False,
        message="m",
        ts=1.0,
    )
    out = encode_output(status, TopicNames.from_prefix("p."), GOOD)
    assert (out.topic, out.key, out.partition) == ("p.status", b"acme/t1", None)
    assert out.headers == [("traceparent", GOOD.encode())]
    assert encode_output(status, TopicNames.from_prefix("p."), None).headers == []


def test_audit_and_dead_letter_keys() -> None:
    audit = Audit(
        audit_id="a",
        command_id="c",
        command_type="tool.disabled",
        issued_by="ops",
        tenant=None,
        reason="",
        outcome=AuditOutcome.APPLIED,
        ts=1.0,
    )
    assert output_key(audit) == "*"
    assert output_key(audit.model_copy(update={"tenant": "acme"})) == "acme"
    dead = DeadLetter(
        deadletter_id="d",
        source_topic="p.fragments",
        partition=3,
        offset=17,
        reason="undecodable",
        payload_bytes=1,
        payload_sha256="0" * 64,
        ts=1.0,
    )
    assert output_key(dead) == "p.fragments/3/17"


def test_changelog_records_go_to_the_input_partition() -> None:
    record = encode_change(StateChange("turn:acme\x1ft1", None), "p.assembler-changelog", 5)
    assert (record.partition, record.key, record.value) == (5, b"turn:acme\x1ft1", None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (GOOD, GOOD),
        (GOOD.upper().encode(), GOOD),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
        ("not a traceparent", None),
        (b"\xff\xfe", None),
        (None, None),
    ],
)
def test_traceparent_validation(value: str | bytes | None, expected: str | None) -> None:
    assert valid_traceparent(value) == expected


def test_traceparent_header_lookup_takes_the_last_value() -> None:
    other = "00-11111111111111111111111111111111-2222222222222222-00"
    headers = [("traceparent", GOOD.encode()), ("x", b"y"), ("traceparent", other.encode())]
    assert traceparent_of(headers) == other
    assert traceparent_of(None) is None
