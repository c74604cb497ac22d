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
adapter process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from processor.core.events import FragmentEvent, encode, turn_key
from processor.observability import metrics
from processor.runtime.clients import IdempotentProducer
from processor.runtime.codec import TRACEPARENT, valid_traceparent
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
        trace = valid_traceparent(traceparent)
        headers = [(TRACEPARENT, trace.encode())] if trace else []
        futures: list[Any] = []
        for event in events:
            futures.append(
                await self._producer.send(
                    self.topic,
                    value=encode(event),
                    key=turn_key(event.tenant, event.turn_id).encode(),
                    headers=headers,
                )
            )
        await asyncio.gather(*futures)
        metrics.PUBLISHED_EVENTS.inc(len(futures))
        return len(futures)


async def publish_events(
    settings: Settings, events: Iterable[FragmentEvent], traceparent: str | None = None
) -> int:
    """Publish ``events`` to ``fragments`` with one short-lived idempotent producer."""
    async with Publisher(settings) as publisher:
        return await publisher.publish(events, traceparent)
