"""The executor's topics: names, partition counts, and creating the two it adds.

The executor reads ``dispatch`` and ``control`` (created with the rest of the deployment) and
writes ``status`` plus two topics of its own:

- ``<prefix>results`` — :class:`~processor.executor.records.ExecutionResult`, keyed by turn key;
- ``<prefix>executions`` — the at-most-once ledger, compacted, with exactly as many partitions as
  ``dispatch`` (ledger partition p holds the entries of dispatch partition p, so the executor that
  owns a dispatch partition restores exactly its ledger partition). Its retention must be at least
  the retention of ``dispatch``, so no dispatch record outlives the entry that says it ran.

:func:`ensure_executor_topics` creates the two when asked (``processor executor run
--create-topics``); in production the deployment creates them with the other topics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from processor.core.errors import ConfigurationError
from processor.settings import Settings

__all__ = [
    "ExecutorTopics",
    "ensure_executor_topics",
    "executor_topics",
    "partition_counts",
]

_TOPIC_ALREADY_EXISTS: Final = 36
_UNKNOWN_TOPIC: Final = 3


@dataclass(frozen=True)
class ExecutorTopics:
    dispatch: str
    control: str
    status: str
    results: str
    executions: str


def executor_topics(settings: Settings) -> ExecutorTopics:
    names = settings.topics
    return ExecutorTopics(
        dispatch=names.dispatch,
        control=names.control,
        status=names.status,
        results=f"{settings.topic_prefix}results",
        executions=f"{settings.topic_prefix}executions",
    )


async def partition_counts(settings: Settings, topics: Iterable[str]) -> dict[str, int]:
    """Partition count of each topic that exists (missing topics are left out)."""
    admin = AIOKafkaAdminClient(**settings.kafka_client_kwargs())
    await admin.start()
    try:
        described = await admin.describe_topics(list(topics))
    finally:
        await admin.close()
    return {
        t["topic"]: len(t["partitions"])
        for t in described
        if t["error_code"] != _UNKNOWN_TOPIC and t["partitions"]
    }


async def ensure_executor_topics(settings: Settings, *, timeout: float = 30.0) -> None:
    """Create ``results`` and ``executions`` if missing (``executions`` like ``dispatch``)."""
    topics = executor_topics(settings)
    counts = await partition_counts(settings, [topics.dispatch, topics.results, topics.executions])
    if topics.dispatch not in counts:
        raise ConfigurationError("missing_topic", f"topic {topics.dispatch!r} does not exist")
    wanted: list[NewTopic] = []
    base = {"min.insync.replicas": str(settings.min_insync_replicas)}
    base = base if settings.min_insync_replicas else {}
    if topics.results not in counts:
        config = {**base, "retention.ms": str(settings.output_retention_ms)}
        wanted.append(
            NewTopic(
                topics.results,
                settings.partitions,
                settings.replication_factor,
                topic_configs=config,
            )
        )
    if topics.executions not in counts:
        config = {**base, "cleanup.policy": "compact"}
        wanted.append(
            NewTopic(
                topics.executions,
                counts[topics.dispatch],
                settings.replication_factor,
                topic_configs=config,
            )
        )
    if not wanted:
        return
    admin = AIOKafkaAdminClient(**settings.kafka_client_kwargs())
    await admin.start()
    try:
        response = await admin.create_topics(wanted)
        for entry in response.topic_errors:
            name, code = entry[0], entry[1]
            if code and code != _TOPIC_ALREADY_EXISTS:
                message = entry[2] if len(entry) > 2 else ""
                raise ConfigurationError(
                    "topic_creation_failed", f"{name}: error code {code} {message or ''}".strip()
                )
        await _wait_for_leaders(admin, [t.name for t in wanted], timeout)
    finally:
        await admin.close()


async def _wait_for_leaders(admin: AIOKafkaAdminClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        described = await admin.describe_topics(names)
        if all(
            not t["error_code"]
            and t["partitions"]
            and all(p["leader"] >= 0 for p in t["partitions"])
            for t in described
        ):
            return
        if time.monotonic() > deadline:
            raise ConfigurationError("topic_creation_failed", f"no leaders for {names}")
        await asyncio.sleep(0.2)
