"""Topic layout: names, specs (partitions, replication, cleanup policies), create, describe.

The processor uses eleven topics, all named from the settings' ``topic_prefix``:

================  ========================  ==================================================
role              cleanup                   notes
================  ========================  ==================================================
fragments         delete (input retention)  key = turn key; co-partitioned with control
control           delete (input retention)  key = turn key; operator commands on every
                                            partition; broker timestamps (LogAppendTime)
dispatch          delete (output retention) key = turn key; read by executors
proposals         delete (output retention)
status            delete (output retention)
ledger            settings (delete)         keyed by turn key, so never plain ``compact``
audit             settings (delete, ∞)      key = tenant
deadletter        delete (14 days)          key = source coordinates
changelog         compact                   the assemblers' state, co-partitioned with input
results           delete (output retention) executors' results; key = turn key
executions        compact (∞, or settings)  executors' at-most-once ledger, co-partitioned
                                            with dispatch
================  ========================  ==================================================

Two groups of topics must have equal partition counts: ``fragments``, ``control`` and the state
changelog (the worker joins partition p of each, ARCHITECTURE.md §5), and ``dispatch`` with
``executions`` (the executor that owns dispatch partition p restores ledger partition p, see
:mod:`processor.executor.ledger`). :func:`check_copartitioning` explains the problem when they
do not; workers and executors refuse to start. ``topics create`` creates what is missing (a
missing ``executions`` gets the partition count of an existing ``dispatch``) and never changes
an existing topic; it reports a count mismatch as an error.

``control`` records carry the broker's append time (``message.timestamp.type=LogAppendTime``):
the executor's fence verifies operator commands as of that time, so producer clocks cannot move
it. Only topics created by ``topics create`` get it; alter an existing ``control`` with
``kafka-configs --alter --add-config message.timestamp.type=LogAppendTime``.

Replication (:func:`replication`): unless the settings (or ``--replication-factor``) name one,
new topics get replication factor 3 on a cluster of three or more brokers, else one replica per
broker; topics of replication 3 or more get ``min.insync.replicas=2`` unless the settings name
another, so one broker may fail without stopping writes and an acknowledged write (``acks=all``)
is on two brokers. Below 3 replicas the broker's own ``min.insync.replicas`` applies.

Metadata and config requests (:func:`described`) go to a broker aiokafka picks at random among
those the cluster lists; a broker that is down stays listed until the controller fences it
(seconds), so such a request is asked again of another pick when the one picked does not answer
(issue 39: two executors exited 69 at start with one node of three down).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, for_code

from processor.core.errors import ConfigurationError, Described
from processor.kafka.clients import admin_client
from processor.settings import Settings

SHOWN_CONFIGS: Final = (
    "cleanup.policy",
    "retention.ms",
    "max.message.bytes",
    "min.insync.replicas",
    "message.timestamp.type",
)

_TOPIC_ALREADY_EXISTS: Final = 36
_UNKNOWN_TOPIC: Final = 3
# how long one request is asked again of a random broker while the picked one does not answer:
# a fixed number of picks failed CI once with one broker of two down (1 in 64), a time bound
# leaves a dead broker no real chance (each pick of it fails at once, connection refused)
ANY_BROKER_SECONDS: Final = 5.0

_T = TypeVar("_T")


class TopicLayoutError(Described, ConfigurationError):
    """The topics are missing or not co-partitioned; the message says what to do."""

    reason = "topic_layout"


@dataclass(frozen=True)
class TopicSpec:
    role: str
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CopartitionedTopics:
    """Topics (by role) whose partition p is processed together, so their counts must match."""

    roles: tuple[str, ...]
    why: str
    remedy: str


WORKER_INPUTS: Final = CopartitionedTopics(
    ("fragments", "control", "changelog"),
    "fragments, control and the state changelog must have the same partition count "
    "(partition p of each is processed together; ARCHITECTURE.md §5)",
    "Recreate the smaller topics with the same count (a partition count cannot be lowered, "
    "and raising it moves keys between partitions).",
)
EXECUTOR_LEDGER: Final = CopartitionedTopics(
    ("dispatch", "executions"),
    "dispatch and the executors' ledger (executions) must have the same partition count "
    "(the executor that owns dispatch partition p restores ledger partition p)",
    "Create executions with the partition count of dispatch before any executor runs "
    "(ledger entries cannot move between partitions).",
)


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


DEFAULT_REPLICATION: Final = 3
"""The replication factor of new topics on a cluster with this many brokers or more."""
DEFAULT_MIN_INSYNC: Final = 2
"""``min.insync.replicas`` of new topics of replication :data:`DEFAULT_REPLICATION` or more."""


def replication(
    settings: Settings, brokers: int | None, replication_factor: int | None = None
) -> tuple[int, int | None]:
    """(replication factor, min.insync.replicas or None for the broker's default) of new topics
    on a cluster of ``brokers`` brokers (None: unknown, one assumed)."""
    rf = replication_factor or settings.replication_factor
    if rf is None:
        rf = min(DEFAULT_REPLICATION, max(1, brokers or 1))
    isr = settings.min_insync_replicas
    if isr is None and rf >= DEFAULT_REPLICATION:
        isr = DEFAULT_MIN_INSYNC
    return rf, isr


def topic_specs(
    settings: Settings,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
    brokers: int | None = None,
) -> list[TopicSpec]:
    """The wanted topics, in role order, on a cluster of ``brokers`` brokers."""
    n = partitions or settings.partitions
    rf, isr = replication(settings, brokers, replication_factor)
    s = settings
    common: dict[str, str] = {}
    if isr is not None:
        common["min.insync.replicas"] = str(isr)
    big = {"max.message.bytes": str(s.max_message_bytes)}

    def delete(retention_ms: int, **extra: str) -> dict[str, str]:
        return {**common, "cleanup.policy": "delete", "retention.ms": str(retention_ms), **extra}

    configs: dict[str, dict[str, str]] = {
        "fragments": delete(s.input_retention_ms),
        "control": delete(s.input_retention_ms, **{"message.timestamp.type": "LogAppendTime"}),
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
        "results": delete(s.output_retention_ms),
        "executions": {
            **common,
            "cleanup.policy": "compact" if s.executions_retention_ms < 0 else "compact,delete",
            "retention.ms": str(s.executions_retention_ms),
        },
    }
    return [TopicSpec(role, name, n, rf, configs[role]) for role, name in s.topics.all().items()]


def check_copartitioning(
    states: Mapping[str, TopicState], group: CopartitionedTopics = WORKER_INPUTS
) -> None:
    """Raise :class:`TopicLayoutError` unless the group's topics exist with equal counts."""
    missing = [states[r].name for r in group.roles if not states[r].exists]
    if missing:
        raise TopicLayoutError(
            f"missing topic(s): {', '.join(missing)}; create them with `processor topics create`"
        )
    counts = {r: states[r].partitions for r in group.roles}
    if len(set(counts.values())) != 1:
        shown = ", ".join(f"{states[r].name} has {counts[r]}" for r in group.roles)
        raise TopicLayoutError(f"{group.why}, but {shown} partitions. {group.remedy}")


WORKER_OUTPUTS: Final = ("dispatch", "proposals", "status", "ledger", "audit", "deadletter")
"""The topics a worker's transactions write, besides the changelog."""


def smallest_message_limit(
    states: Mapping[str, TopicState], roles: Iterable[str] = (*WORKER_OUTPUTS, "changelog")
) -> int | None:
    """The smallest ``max.message.bytes`` the cluster reports for these topics (None: none
    reported). A record batch above a topic's limit is refused (``RecordBatchTooLarge``)."""
    limits = []
    for role in roles:
        state = states.get(role)
        value = state.config.get("max.message.bytes") if state is not None else None
        if value is not None and value.isdigit():
            limits.append(int(value))
    return min(limits, default=None)


async def _of_any_broker(ask: Callable[[], Awaitable[_T]]) -> _T:
    """``ask()``, a request aiokafka's admin client sends to a broker picked at random, asked
    again (for up to :data:`ANY_BROKER_SECONDS`) while the picked broker does not answer; the
    last failure is raised (all brokers down: the caller's unreachable-broker error)."""
    deadline = time.monotonic() + ANY_BROKER_SECONDS
    attempt = 1
    while True:
        try:
            return await ask()
        except (NodeNotReadyError, KafkaConnectionError):
            if time.monotonic() >= deadline:
                raise
        await asyncio.sleep(min(0.2, 0.02 * attempt))
        attempt += 1


async def described(admin: AIOKafkaAdminClient, topics: Iterable[str]) -> list[Any]:
    """``admin.describe_topics(topics)`` from any broker that answers (see the module's text)."""
    names = list(topics)
    return await _of_any_broker(lambda: admin.describe_topics(names))


async def describe_topics(settings: Settings, admin: AIOKafkaAdminClient) -> dict[str, TopicState]:
    """Role → what the cluster knows about that topic (missing topics have no partitions)."""
    names = settings.topics.all()
    found = await described(admin, names.values())
    by_name = {t["topic"]: t for t in found}
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
    cluster = await admin.describe_cluster()
    specs = topic_specs(
        settings,
        partitions=partitions,
        replication_factor=replication_factor,
        brokers=len(cluster.get("brokers") or ()),
    )
    before = await describe_topics(settings, admin)
    counts = {s.role: before[s.role].partitions or s.partitions for s in specs}
    if not before["executions"].exists and before["dispatch"].exists:
        counts["executions"] = counts["dispatch"]
    # refuse early when the existing co-partitioned topics already disagree with each other or
    # with the count we would create for the missing ones
    planned = {r: TopicState(r, st.name, counts[r]) for r, st in before.items()}
    for group in (WORKER_INPUTS, EXECUTOR_LEDGER):
        check_copartitioning(planned, group)
    todo = [replace(s, partitions=counts[s.role]) for s in specs if not before[s.role].exists]
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
    after = await describe_topics(settings, admin)
    # each metadata request may go to another broker, and a broker's metadata may lag the
    # controller's for a moment: a topic just created and led can still look missing there
    # (seen on a loaded three-node cluster, chaos seed 5); ask again until it shows
    deadline = time.monotonic() + timeout
    while any(not after[s.role].exists for s in todo) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        after = await describe_topics(settings, admin)
    for group in (WORKER_INPUTS, EXECUTOR_LEDGER):
        check_copartitioning(after, group)
    return result


async def _wait_for_leaders(
    admin: AIOKafkaAdminClient, topics: Mapping[str, int], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ready = all(
            not t["error_code"]
            and len(t["partitions"]) >= topics[t["topic"]]
            and all(p["leader"] >= 0 for p in t["partitions"])
            for t in await described(admin, topics)
        )
        if ready:
            return
        if time.monotonic() > deadline:
            raise TopicLayoutError(f"topics {sorted(topics)} have no leaders after {timeout}s")
        await asyncio.sleep(0.2)


async def partition_counts(settings: Settings, topics: Iterable[str]) -> dict[str, int]:
    """The partition count of each of ``topics`` that exists (missing ones are left out)."""
    async with admin_client(settings) as admin:
        found = await described(admin, topics)
    return {t["topic"]: len(t["partitions"]) for t in found if _exists(t)}


async def partition_count(settings: Settings, topic: str) -> int | None:
    """How many partitions ``topic`` has, or None when it does not exist."""
    return (await partition_counts(settings, [topic])).get(topic)


def _exists(info: Mapping[str, Any] | None) -> bool:
    return info is not None and info["error_code"] != _UNKNOWN_TOPIC and bool(info["partitions"])


async def _configs(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    wanted = dict.fromkeys(SHOWN_CONFIGS)
    resources = [ConfigResource(ConfigResourceType.TOPIC, n, dict(wanted)) for n in names]
    responses = await _of_any_broker(lambda: admin.describe_configs(resources))
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
