"""The records of one step: :class:`Step` (one batch's commit plan and the facts its metrics
count) and :class:`TickFence` (when a tick may expire what waits). Data only: the step
(:mod:`processor.runtime.step`) fills them, the emission (:mod:`processor.runtime.emission`) adds
each output, the worker commits and counts them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aiokafka.structs import TopicPartition

from processor.runtime.transaction import CommitPlan


@dataclass(frozen=True)
class TickFence:
    """When a tick may expire what waits (``at``, the worker's clock), and the committed end
    offsets of both inputs read at or after ``at``: the tick runs once they are applied, so
    every record written before ``at`` is seen before anything is expired for having waited
    until ``at``. Read fresh, not from the last fetch response, whose end may predate records
    written since (a worker paused or slowed between two fetches)."""

    at: float
    ends: Mapping[TopicPartition, int]


@dataclass
class Step:
    """One batch of one partition: what to commit and what to count once it is committed."""

    plan: CommitPlan = field(default_factory=CommitPlan)
    consumed: dict[str, int] = field(default_factory=dict)  # topic role → records
    skipped: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)  # output role → records
    terminal: list[tuple[str, str]] = field(default_factory=list)  # (state, reason)
    deadletters: list[str] = field(default_factory=list)  # reasons
    commands: list[tuple[str, str, str]] = field(default_factory=list)  # (type, outcome, rejection)
    dispatch_triggers: list[float] = field(default_factory=list)  # trigger record times (s)
    changes: list[tuple[str, bytes | None]] = field(default_factory=list)  # for the local store
    # back-pressure: the first fragment offset not handed over (read again after the pause)
    held_from: int | None = None
