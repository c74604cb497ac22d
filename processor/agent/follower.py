"""The Kafka shell of the outcome fold: one consumer that follows many turns to their outcomes.

Owns :class:`OutcomeFollower` (async), :class:`BlockingOutcomeFollower` (the same on a
background event loop, for synchronous code), :class:`FollowedTurn` (one turn's handle) and
:class:`TurnReport` (what a wait returns). The rules that turn records into outcomes are
:mod:`processor.agent.outcomes`'; nothing here decides an outcome.

One consumer without a group reads ``status``, ``ledger``, ``results`` and ``audit`` with
``read_committed`` (an aborted write never settles a call), from the end offsets at start.
:meth:`OutcomeFollower.follow` registers the turn *first*, then takes the end offsets of the
turn's partitions (its turn key's, murmur2, on each topic): records of that turn below them are
older than the turn and ignored, and every record at or above them is read after the turn was
registered, so nothing is missed. Call ``follow`` before ``publisher.start_turn``.

Records of turns nobody follows are dropped by their key before they are decoded, so memory is
bounded by the turns followed (at most ``max_turns``: following one more forgets the oldest,
whose handle then reports its open calls as open for good, ``forgotten``). Release a turn with
``close()`` (or ``async with``) once its outcomes are in hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.adapters.base import TurnContext
from processor.agent.outcomes import Outcome, TurnOutcomes, decode_outcome_record
from processor.core.errors import ConfigurationError, ProcessorError
from processor.core.events import (
    CallDelta,
    CallEnded,
    CallKey,
    CallStarted,
    ResponseEnded,
    turn_key,
)
from processor.kafka.background import BackgroundLoop
from processor.kafka.clients import admin_client, committed_reader, stop_consumer
from processor.kafka.partitioner import partition_for
from processor.kafka.topics import described as described_topics
from processor.settings import Settings

__all__ = [
    "BlockingOutcomeFollower",
    "FollowedTurn",
    "OutcomeFollower",
    "TurnReport",
]

_T = TypeVar("_T")
_ROLES: Final = ("status", "ledger", "results", "audit")
_TURN_KEYED: Final = ("status", "ledger", "results")
_POLL_MS: Final = 100

Until = Literal["settled", "decided"]


@dataclass(frozen=True)
class TurnReport:
    """What a wait found: every expected call's outcome (``open`` ones still unsettled at the
    bound), and the turn's refused binding, if any."""

    outcomes: list[Outcome]
    binding_refused: str | None = None
    forgotten: bool = False

    @property
    def open(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.settled]

    @property
    def complete(self) -> bool:
        return not self.open


@dataclass
class FollowedTurn:
    """One followed turn. ``expect`` the calls to wait for, then ``await wait(timeout)``."""

    fold: TurnOutcomes
    follower: OutcomeFollower
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    starts: dict[TopicPartition, int] | None = None
    early: list[tuple[str, ConsumerRecord]] = field(default_factory=list)
    forgotten: bool = False

    def expect(self, calls: Iterable[object]) -> None:
        """Wait for these calls: a tee's :class:`~processor.integrations.tee.TeeState` (its
        published ``call.started`` events; pass ``keep_events=True`` to the tee), or
        ``call.started`` events, or :class:`~processor.core.events.CallKey`\\ s."""
        events = getattr(calls, "events", calls)
        for item in events:
            if isinstance(item, CallStarted):
                self.fold.expect(
                    item.key,
                    called_as=item.tool,
                    called_namespace=item.namespace,
                    provider=item.provider,
                )
            elif isinstance(item, CallKey):
                self.fold.expect(item)
            elif not isinstance(item, CallDelta | CallEnded | ResponseEnded):  # a tee's others
                raise TypeError(f"expect() takes call.started events or CallKeys, not {item!r}")
        self.changed.set()

    def report(self) -> TurnReport:
        return TurnReport(self.fold.outcomes(), self.fold.binding_refused, self.forgotten)

    async def wait(self, timeout: float, *, until: Until = "settled") -> TurnReport:
        """Wait until every expected call is settled (``until="decided"``: decided by the worker,
        dispatched counting as decided) or ``timeout`` seconds pass; the report names the calls
        still open at the bound. Without expected calls it waits for the calls it has seen."""
        deadline = time.monotonic() + timeout
        decided = until == "decided"
        self.follower._raise_if_failed()
        while not self.forgotten and not self.fold.all_settled(decided=decided):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
            self.follower._raise_if_failed()
        return self.report()

    def close(self) -> None:
        """Stop following this turn (its records are dropped from now on)."""
        self.follower._release(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class OutcomeFollower:
    """Follows turns to their outcomes with one consumer (``async with``)."""

    def __init__(
        self, settings: Settings, *, max_turns: int = 10_000, executor_group: str | None = None
    ) -> None:
        if max_turns < 1:
            raise ConfigurationError(detail="max_turns must be at least 1")
        self.settings = settings
        self.max_turns = max_turns
        self.executor_group = executor_group
        self._topics = {settings.topics.output(role): role for role in _ROLES}
        self._partitions: dict[str, int] = {}
        self._turns: OrderedDict[bytes, FollowedTurn] = OrderedDict()
        self._bindings: dict[str, FollowedTurn] = {}
        self._consumer: AIOKafkaConsumer | None = None
        # end offsets on a connection of its own: on the reader's, a ListOffsets queues behind
        # its long-polled fetch (a broker answers one connection in order), ~0.45 s a follow
        self._offsets: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    async def start(self) -> None:
        """Assign every partition of the four topics and take their end offsets."""
        async with admin_client(self.settings) as admin:
            described = await described_topics(admin, self._topics)
        tps = [
            TopicPartition(info["topic"], part["partition"])
            for info in described
            for part in info["partitions"]
        ]
        counts = {topic: sum(1 for tp in tps if tp.topic == topic) for topic in self._topics}
        missing = sorted(topic for topic, count in counts.items() if count == 0)
        if missing:
            raise ConfigurationError(detail=f"topics missing: {', '.join(missing)}")
        self._partitions = counts
        consumer = committed_reader(self.settings, auto_offset_reset="latest")
        offsets = committed_reader(
            self.settings, client_id=f"{self.settings.client_id}-outcome-offsets"
        )
        await consumer.start()
        try:
            await offsets.start()
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:  # resolved now: nothing written after start is missed
                await consumer.position(tp)
        except BaseException:
            await stop_consumer(consumer)
            await stop_consumer(offsets)
            raise
        self._consumer, self._offsets = consumer, offsets
        self._task = asyncio.create_task(self._pump(), name="outcome-follower")
        self._task.add_done_callback(self._pump_ended)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])  # its failure, if any, was reported to the waits
        consumer, self._consumer = self._consumer, None
        offsets, self._offsets = self._offsets, None
        for client in (consumer, offsets):
            if client is not None:
                await stop_consumer(client)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def following(self) -> int:
        """How many turns are followed now."""
        return len(self._turns)

    async def follow(
        self,
        turn: TurnContext,
        *,
        command_id: str | None = None,
        calls: Iterable[object] = (),
    ) -> FollowedTurn:
        """Follow ``turn`` from now on (call it before ``start_turn``). ``command_id``: the
        ``turn.started`` command id, whose refusal on ``audit`` settles the turn's undecided
        calls ``rejected``. ``calls``: see :meth:`FollowedTurn.expect` (also later)."""
        if self._consumer is None or self._offsets is None:
            raise ConfigurationError(detail="the OutcomeFollower is not started (async with)")
        self._raise_if_failed()
        key = turn_key(turn.tenant, turn.turn_id).encode()
        if key in self._turns:
            raise ConfigurationError(detail="this turn is already followed")
        fold = TurnOutcomes(
            turn.tenant,
            turn.turn_id,
            executor_group=self.executor_group,
            binding_command_id=command_id,
        )
        followed = FollowedTurn(fold, self)
        self._turns[key] = followed  # 1. registered first: records from here on are kept
        if command_id is not None:
            self._bindings[command_id] = followed
        while len(self._turns) > self.max_turns:
            _, old = self._turns.popitem(last=False)
            self._forget(old)
        tps = [
            TopicPartition(topic, partition_for(key, self._partitions[topic]))
            for topic, role in self._topics.items()
            if role in _TURN_KEYED
        ]
        try:  # 2. then the starting positions: what lies below them is older than the turn
            followed.starts = dict(await self._offsets.end_offsets(tps))
        except BaseException:
            self._release(followed)
            raise
        early, followed.early = followed.early, []
        for role, record in early:
            self._take(followed, role, record)
        followed.expect(calls)
        return followed

    # ------------------------------------------------------------------------------ internals

    def _release(self, followed: FollowedTurn) -> None:
        key = turn_key(followed.fold.tenant, followed.fold.turn_id).encode()
        if self._turns.get(key) is followed:
            del self._turns[key]
        self._forget(followed)

    def _forget(self, followed: FollowedTurn) -> None:
        followed.forgotten = True
        followed.early.clear()
        command_id = followed.fold.binding_command_id
        if command_id is not None and self._bindings.get(command_id) is followed:
            del self._bindings[command_id]
        followed.changed.set()

    def _pump_ended(self, task: asyncio.Task[None]) -> None:
        """The consumer loop ended: unless stopped, every wait learns it at once (a follower
        that reads nothing must not look like calls that never settle)."""
        if task.cancelled():
            return
        self._failure = task.exception() or ProcessorError("follower_failed", "the reader ended")
        for followed in self._turns.values():
            followed.changed.set()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ProcessorError(
                "follower_failed", f"the outcome reader stopped: {type(self._failure).__name__}"
            ) from self._failure

    async def _pump(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            batch = await consumer.getmany(timeout_ms=_POLL_MS)
            for tp, records in batch.items():
                role = self._topics[tp.topic]
                for record in records:
                    self._route(role, record)

    def _route(self, role: str, record: ConsumerRecord) -> None:
        if role == "audit":
            if self._bindings:
                decoded = decode_outcome_record(role, record.value)
                command_id = getattr(decoded, "command_id", None)
                followed = self._bindings.get(command_id) if command_id else None
                if followed is not None and decoded is not None and followed.fold.apply(decoded):
                    followed.changed.set()
            return
        followed = self._turns.get(record.key) if record.key is not None else None
        if followed is None:  # another turn's record: dropped before it is decoded
            return
        if followed.starts is None:  # between registration and the start offsets
            followed.early.append((role, record))
            return
        self._take(followed, role, record)

    def _take(self, followed: FollowedTurn, role: str, record: ConsumerRecord) -> None:
        assert followed.starts is not None
        start = followed.starts.get(TopicPartition(record.topic, record.partition), 0)
        if record.offset < start:  # older than the turn (a reused turn id): not its outcome
            return
        decoded = decode_outcome_record(role, record.value)
        if decoded is not None and followed.fold.apply(decoded):
            followed.changed.set()


class BlockingOutcomeFollower:
    """An :class:`OutcomeFollower` for synchronous code (``with BlockingOutcomeFollower(s)``): it
    owns an event loop in a daemon thread; each call blocks."""

    def __init__(self, settings: Settings, **options: Any) -> None:
        self._background = BackgroundLoop(
            "processor-outcomes", lambda: OutcomeFollower(settings, **options)
        )
        self._run = self._background.run

    def start(self) -> None:
        self._background.start()

    def stop(self) -> None:
        self._background.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def follower(self) -> OutcomeFollower:
        follower = self._background.client
        if follower is None:
            raise ConfigurationError(detail="BlockingOutcomeFollower is not started (use `with`)")
        return follower

    def follow(self, turn: TurnContext, **options: Any) -> FollowedTurn:
        """:meth:`OutcomeFollower.follow`, blocking."""
        return self._run(self.follower.follow(turn, **options))

    def expect(self, followed: FollowedTurn, calls: Iterable[object]) -> None:
        """:meth:`FollowedTurn.expect`, on the follower's loop."""

        async def expect() -> None:
            followed.expect(list(getattr(calls, "events", calls)))

        self._run(expect())

    def wait(
        self, followed: FollowedTurn, timeout: float, *, until: Until = "settled"
    ) -> TurnReport:
        """:meth:`FollowedTurn.wait`, blocking."""
        return self._run(followed.wait(timeout, until=until))

    def close(self, followed: FollowedTurn) -> None:
        """:meth:`FollowedTurn.close`, on the follower's loop."""

        async def close() -> None:
            followed.close()

        self._run(close())
