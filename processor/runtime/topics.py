"""Topic layout: names, specs (partitions, replication, cleanup policies), create, describe.

The processor uses nine topics, all named from the settings' ``topic_prefix``:

================  ========================  ==================================================
role              cleanup                   notes
================  ========================  ==================================================
fragments         delete (input retention)  key = turn key; co-partitioned with control
control           delete (input retention)  key = turn key; operator commands on every partition
dispatch          delete (output retention) key = turn key; read by executors
proposals         delete (output retention)
status            delete (output retention)
ledger            settings (delete)         keyed by turn key, so never plain ``compact``
audit             settings (delete, ∞)      key = tenant
deadletter        delete (14 days)          key = source coordinates
changelog         compact                   the assemblers' state, co-partitioned with input
================  ========================  ==================================================

``fragments``, ``control`` and the state changelog must have the same partition count (the
worker joins partition p of each, ARCHITECTURE.md §5); :func:`check_copartitioning` explains the
problem when they do not, and the worker refuses to start. ``topics create`` creates what is
missing and never changes an existing topic; it reports a count mismatch as an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from processor.settings import Settings

COPARTITIONED: Final = ("fragments", "control", "changelog")
SHOWN_CONFIGS: Final = (
    "cleanup.policy",
    "retention.ms",
    "max.message.bytes",
    "min.insync.replicas",
)

_TOPIC_ALREADY_EXISTS: Final = 36
_UNKNOWN_TOPIC: Final = 3


class TopicLayoutError(Exception):
    """The topics are missing or not co-partitioned; the message says what to do."""


@dataclass(frozen=True)
class TopicSpec:
    role: str
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicState:
    """What the cluster says about one topic (``partitions`` is None when it does not exist)."""

    role: str
    name: str
    partitions: int | None
    replication_factor: int | None = None
    config: dict[str, str] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        return self.partitions is not None


def topic_specs(
    settings: Settings, *, partitions: int | None = None, replication_factor: int | None = None
) -> list[TopicSpec]:
    """The wanted topics, in role order."""
    n = partitions or settings.partitions
    rf = replication_factor or settings.replication_factor
    s = settings
    common: dict[str, str] = {}
    if s.min_insync_replicas is not None:
        common["min.insync.replicas"] = str(s.min_insync_replicas)
    big = {"max.message.bytes": str(s.max_message_bytes)}

    def delete(retention_ms: int, **extra: str) -> dict[str, str]:
        return {**common, "cleanup.policy": "delete", "retention.ms": str(retention_ms), **extra}

    configs: dict[str, dict[str, str]] = {
        "fragments": delete(s.input_retention_ms),
        "control": delete(s.input_retention_ms),
        "dispatch": delete(s.output_retention_ms, **big),
        "proposals": delete(s.output_retention_ms, **big),
        "status": delete(s.output_retention_ms),
        "ledger": {
            **common,
            "cleanup.policy": s.ledger_cleanup_policy,
            "retention.ms": str(s.ledger_retention_ms),
        },
        "audit": {
            **common,
            "cleanup.policy": s.audit_cleanup_policy,
            "retention.ms": str(s.audit_retention_ms),
        },
        "deadletter": delete(s.deadletter_retention_ms),
        "changelog": {**common, "cleanup.policy": "compact", **big},
    }
    return [TopicSpec(role, name, n, rf, configs[role]) for role, name in s.topics.all().items()]


def check_copartitioning(states: Mapping[str, TopicState]) -> None:
    """Raise :class:`TopicLayoutError` unless fragments, control and changelog exist and match."""
    missing = [states[r].name for r in COPARTITIONED if not states[r].exists]
    if missing:
        raise TopicLayoutError(
            f"missing topic(s): {', '.join(missing)}; create them with `processor topics create`"
        )
    counts = {r: states[r].partitions for r in COPARTITIONED}
    if len(set(counts.values())) != 1:
        shown = ", ".join(f"{states[r].name} has {counts[r]}" for r in COPARTITIONED)
        raise TopicLayoutError(
            "fragments, control and the state changelog must have the same partition count "
            "(partition p of each is processed together; ARCHITECTURE.md §5), but "
            f"{shown} partitions. Recreate the smaller topics with the same count "
            "(a partition count cannot be lowered, and raising it moves keys between partitions)."
        )


async def describe_topics(settings: Settings, admin: AIOKafkaAdminClient) -> dict[str, TopicState]:
    """Role → what the cluster knows about that topic (missing topics have no partitions)."""
    names = settings.topics.all()
    described = await admin.describe_topics(list(names.values()))
    by_name = {t["topic"]: t for t in described}
    configs = await _configs(admin, [n for n in names.values() if _exists(by_name.get(n))])
    states: dict[str, TopicState] = {}
    for role, name in names.items():
        info = by_name.get(name)
        if not _exists(info):
            states[role] = TopicState(role, name, None)
            continue
        assert info is not None
        parts = info["partitions"]
        rf = min((len(p["replicas"]) for p in parts), default=None)
        states[role] = TopicState(role, name, len(parts), rf, configs.get(name, {}))
    return states


async def create_topics(
    settings: Settings,
    admin: AIOKafkaAdminClient,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
    timeout: float = 30.0,
) -> dict[str, str]:
    """Create the missing topics; name → ``created`` or ``exists``. Checks co-partitioning."""
    specs = topic_specs(settings, partitions=partitions, replication_factor=replication_factor)
    before = await describe_topics(settings, admin)
    # refuse early when the existing co-partitioned topics already disagree with each other or
    # with the count we would create for the missing ones
    wanted = {s.role: s.partitions for s in specs}
    planned = {
        r: TopicState(r, before[r].name, before[r].partitions or wanted[r]) for r in COPARTITIONED
    }
    check_copartitioning(planned)
    todo = [s for s in specs if not before[s.role].exists]
    result = {s.name: "exists" for s in specs if before[s.role].exists}
    if todo:
        response = await admin.create_topics(
            [
                NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.config)
                for s in todo
            ]
        )
        problems = []
        for entry in response.topic_errors:
            name, code = entry[0], entry[1]
            message = entry[2] if len(entry) > 2 else None
            if code == _TOPIC_ALREADY_EXISTS:
                result[name] = "exists"
            elif code:
                problems.append(f"{name}: {for_code(code).__name__} {message or ''}".strip())
            else:
                result[name] = "created"
        if problems:
            raise TopicLayoutError("topic creation failed: " + "; ".join(problems))
        await _wait_for_leaders(admin, {s.name: s.partitions for s in todo}, timeout)
    check_copartitioning(await describe_topics(settings, admin))
    return result


async def _wait_for_leaders(
    admin: AIOKafkaAdminClient, topics: Mapping[str, int], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        described = await admin.describe_topics(list(topics))
        ready = all(
            not t["error_code"]
            and len(t["partitions"]) >= topics[t["topic"]]
            and all(p["leader"] >= 0 for p in t["partitions"])
            for t in described
        )
        if ready:
            return
        if time.monotonic() > deadline:
            raise TopicLayoutError(f"topics {sorted(topics)} have no leaders after {timeout}s")
        await asyncio.sleep(0.2)


async def partition_count(settings: Settings, topic: str) -> int | None:
    """How many partitions ``topic`` has, or None when it does not exist."""
    admin = AIOKafkaAdminClient(**settings.kafka_client_kwargs())
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    info = described[0] if described else None
    if info is None or not _exists(info):
        return None
    return len(info["partitions"])


def _exists(info: Mapping[str, Any] | None) -> bool:
    return info is not None and info["error_code"] != _UNKNOWN_TOPIC and bool(info["partitions"])


async def _configs(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    wanted = dict.fromkeys(SHOWN_CONFIGS)
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, n, dict(wanted)) for n in names]
    )
    out: dict[str, dict[str, str]] = {}
    for response in responses:
        for error_code, _msg, _type, name, entries in response.resources:
            if error_code:
                continue
            out[name] = {entry[0]: entry[1] for entry in entries if entry[1] is not None}
    return out


def format_states(states: Mapping[str, TopicState]) -> list[str]:
    """Human-readable lines for ``topics describe``."""
    lines = []
    for role, st in states.items():
        if not st.exists:
            lines.append(f"{role:<11} {st.name}  MISSING")
            continue
        cfg = " ".join(f"{k}={v}" for k, v in sorted(st.config.items()))
        lines.append(
            f"{role:<11} {st.name}  partitions={st.partitions} "
            f"replication={st.replication_factor}  {cfg}".rstrip()
        )
    return lines
