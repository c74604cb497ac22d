"""Publishing adapter output: fragment events to the ``fragments`` topic.

An idempotent producer (``enable_idempotence``, ``acks=all``): broker-side deduplication of
retried batches keeps each turn's events once and in order on its partition. Key = the turn key
``tenant/turn_id`` (the same key as the turn's control events, so both land on partition p).
A ``traceparent`` header, when given and well-formed, is attached to every event; the worker
copies it onto the outputs, up to the dispatch record.

Adapters are deterministic (event ids derive from the stream), so publishing a replayed stream
again is safe: the Assembler ignores events it has already seen and never revives a terminal
call.

``publish_events(settings, events, traceparent=None)`` is the one-shot form used by
``processor adapt --publish``; :class:`Publisher` keeps one producer open for a long-lived
adapter process (a gateway), and :meth:`Publisher.start_turn` writes the ``turn.started`` that
binds a turn to its actor (what ``processor ctl start-turn`` writes) before its calls can act.
:class:`BlockingPublisher` is the same for synchronous code: it runs a :class:`Publisher` on an
event loop in a background thread.

A fatal error of the idempotent producer (``OutOfOrderSequenceNumber``, an unknown or fenced
producer id, …) does not end a long-lived publisher: the producer is replaced and the publish sent
again, in order, within a bound (:mod:`processor.kafka.idempotent`, which says why repeating
events is safe and why a turn's order holds); a publish that still fails raises, and the tee ends
the response ``error``.

Each publish is one ``send <fragments topic>`` producer span
(:mod:`processor.observability.tracing`) whose context becomes the records' ``traceparent``
header when OpenTelemetry records spans; else the given ``traceparent`` is sent as is.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self, TypeVar

from processor.adapters.base import TurnContext
from processor.core.events import (
    FragmentEvent,
    TurnCancelled,
    TurnStarted,
    encode,
    stable_id,
    turn_key,
)
from processor.kafka.background import BackgroundLoop
from processor.kafka.codec import TRACEPARENT, valid_traceparent
from processor.kafka.idempotent import IdempotentProducer, Outgoing
from processor.observability import metrics, tracing
from processor.settings import Settings


class Publisher(IdempotentProducer):
    """An idempotent producer for fragment events (``async with Publisher(settings) as p``)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(
            settings,
            settings.topics.fragments,
            "adapter",
            linger_ms=5,
            max_request_size=settings.max_message_bytes,
        )

    async def publish(self, events: Iterable[FragmentEvent], traceparent: str | None = None) -> int:
        """Send the events in order and wait until all are acknowledged; return their count."""
        batch = list(events)
        if not batch:
            return 0
        keys = {turn_key(event.tenant, event.turn_id) for event in batch}
        attributes = tracing.kafka_attributes(
            self.topic,
            "send",
            key=next(iter(keys)) if len(keys) == 1 else None,
            batch=len(batch),
        )
        given = valid_traceparent(traceparent)
        with tracing.span(f"send {self.topic}", "producer", attributes, traceparent=given):
            trace = valid_traceparent(tracing.current_traceparent(given))
            headers = ((TRACEPARENT, trace.encode()),) if trace else ()
            records = [
                Outgoing(
                    self.topic,
                    encode(event),
                    turn_key(event.tenant, event.turn_id).encode(),
                    headers=headers,
                )
                for event in batch
            ]
            await self.producers.send_all(records)
        metrics.PUBLISHED_EVENTS.inc(len(records))
        return len(records)

    async def start_turn(
        self,
        turn: TurnContext,
        *,
        issued_by: str = "gateway",
        supersedes: str | None = None,
        command_id: str | None = None,
    ) -> TurnStarted:
        """Write ``turn.started`` for ``turn`` to ``control`` (keyed by the turn key, so it lands
        on the turn's partition) and wait for its ack: the worker dispatches a turn's calls only
        once the turn is bound to its actor. ``supersedes`` first cancels an older turn of the
        same conversation (``reason=superseded``). The command id defaults to one derived from the
        turn, so writing it twice is harmless."""
        now = time.time()
        if supersedes is not None:
            cancel = TurnCancelled(
                command_id=stable_id("turn.superseded", turn.tenant, supersedes, turn.turn_id),
                issued_by=issued_by,
                issued_at=now,
                reason="superseded",
                tenant=turn.tenant,
                turn_id=supersedes,
            )
            await self._send_control(cancel, turn_key(turn.tenant, supersedes))
        started = TurnStarted(
            command_id=command_id or stable_id("turn.started", turn.tenant, turn.turn_id),
            issued_by=issued_by,
            issued_at=now,
            tenant=turn.tenant,
            turn_id=turn.turn_id,
            actor=turn.actor,
            session=turn.session,
        )
        await self._send_control(started, turn_key(turn.tenant, turn.turn_id))
        return started

    async def _send_control(self, event: TurnStarted | TurnCancelled, key: str) -> None:
        topic = self.settings.topics.control
        attributes = tracing.kafka_attributes(topic, "send", key=key)
        with tracing.span(f"send {topic}", "producer", attributes):
            await self.producers.send_all([Outgoing(topic, encode(event), key.encode())])


_T = TypeVar("_T")


class BlockingPublisher:
    """A :class:`Publisher` for synchronous code (``with BlockingPublisher(settings) as p``).

    It owns an event loop in a daemon thread; each call blocks until the broker acknowledged.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._background = BackgroundLoop("processor-publisher", lambda: Publisher(settings))
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
    def publisher(self) -> Publisher:
        publisher = self._background.client
        if publisher is None:
            raise RuntimeError("BlockingPublisher is not started (use it as `with`)")
        return publisher

    def publish(self, events: Iterable[FragmentEvent], traceparent: str | None = None) -> int:
        """:meth:`Publisher.publish`, blocking. The caller's current span is the parent."""
        given = tracing.current_traceparent(traceparent)
        return self._run(self.publisher.publish(list(events), given))

    def start_turn(self, turn: TurnContext, **options: Any) -> TurnStarted:
        """:meth:`Publisher.start_turn`, blocking."""
        return self._run(self.publisher.start_turn(turn, **options))


async def publish_events(
    settings: Settings, events: Iterable[FragmentEvent], traceparent: str | None = None
) -> int:
    """Publish ``events`` to ``fragments`` with one short-lived idempotent producer."""
    async with Publisher(settings) as publisher:
        return await publisher.publish(events, traceparent)
