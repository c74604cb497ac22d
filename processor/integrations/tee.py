"""The tee: yield a provider stream's events unchanged, publish its fragment events on the side.

::

    async with Publisher(settings) as publisher:
        await publisher.start_turn(turn)                   # turn.started binds the actor
        stream = await client.chat.completions.create(..., stream=True)
        async for chunk in tee_stream(stream, publisher, turn=turn):
            send_text_to_user(chunk)                       # the SDK's own objects, unchanged

``tee_stream`` accepts an async iterable of openai ``ChatCompletionChunk`` or Responses events,
anthropic ``RawMessageStreamEvent``/``MessageStreamEvent``, google-genai
``GenerateContentResponse`` or boto3 ``converse_stream`` event dicts; the provider is recognised
from the first event (or named with ``provider=``, one of :data:`ADAPTERS`). ``tee_stream_sync``
is the same for a synchronous stream and a :class:`~processor.kafka.publish.BlockingPublisher`.

How the response ends on the publishing side:

* the stream ends: ``adapter.close()``. A response's verdict is its stream's last word (issue
  29): Anthropic and Responses emitted ``response.ended`` at their end events (``message_stop``,
  ``response.completed``); for Chat Completions, Gemini and Bedrock the end of the SDK stream
  is the documented end (``[DONE]``, the last chunk, ``metadata`` then EOF), so ``close()``
  writes their ``completed`` only now, after every event that could still void it (Azure's
  asynchronous content filter, a Bedrock exception, which botocore raises: an abort) was seen;
  a response the stream cut short ends ``incomplete``;
* the caller stops iterating (``break`` then ``aclose()``, or the generator is collected), the
  task is cancelled, or the stream raises: ``adapter.abort(reason)`` ends every open response
  ``error`` (``consumer_stopped``, ``cancelled``, ``stream_error``), so nothing of it can act;
* a publish raises (the publisher already replaced a broken producer and sent the events again
  within its bound, :mod:`processor.kafka.idempotent`; what reached Kafka of them is a prefix,
  in order): the same abort (``stream_error``), its ``response.ended`` published if the
  publisher can, and the error propagates to the caller;
* a provider event the adapter cannot read: the adapter fails closed (its open responses end
  ``error`` at once) and the tee keeps yielding the provider's events without feeding them; the
  error is kept in :attr:`TeeState.failure`.

Fragments are published (and acknowledged) before the event that implied them is yielded, so a
call the user sees mentioned is already on Kafka; events that imply none (text) cost nothing.
With an async generator, ``break`` leaves the abort to the generator's finaliser: use
``contextlib.aclosing(tee_stream(...))`` for it to happen at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from processor.adapters.anthropic import AnthropicMessagesAdapter
from processor.adapters.base import StreamAdapter, TurnContext
from processor.adapters.bedrock import BedrockConverseAdapter
from processor.adapters.gemini import GeminiAdapter
from processor.adapters.openai_chat import OpenAIChatAdapter
from processor.adapters.openai_responses import OpenAIResponsesAdapter
from processor.core.errors import AdapterError, ConfigurationError
from processor.core.events import FragmentEvent, TurnStarted
from processor.integrations import anthropic, boto3, google_genai, openai
from processor.observability import tracing

__all__ = [
    "ADAPTERS",
    "AsyncSink",
    "SyncSink",
    "TeeState",
    "tee_stream",
    "tee_stream_sync",
]

log = logging.getLogger(__name__)

E = TypeVar("E")

ADAPTERS: Final[dict[str, type[StreamAdapter]]] = {
    openai.CHAT: OpenAIChatAdapter,
    openai.RESPONSES: OpenAIResponsesAdapter,
    anthropic.PROVIDER: AnthropicMessagesAdapter,
    google_genai.PROVIDER: GeminiAdapter,
    boto3.PROVIDER: BedrockConverseAdapter,
}
"""Provider name → adapter (the names of ``processor adapt --provider``)."""

ToWire = Callable[[Any], dict[str, Any] | None]

_TO_WIRE: Final[dict[str, ToWire]] = {
    openai.CHAT: openai.to_wire,
    openai.RESPONSES: openai.to_wire,
    anthropic.PROVIDER: anthropic.to_wire,
    google_genai.PROVIDER: google_genai.to_wire,
    boto3.PROVIDER: boto3.to_wire,
}

_RECOGNISERS: Final = (
    openai.provider_of,
    anthropic.provider_of,
    google_genai.provider_of,
    boto3.provider_of,
)

CONSUMER_STOPPED: Final = "consumer_stopped"
CANCELLED: Final = "cancelled"
STREAM_ERROR: Final = "stream_error"


class AsyncSink(Protocol):
    """Where an async tee publishes (a :class:`~processor.kafka.publish.Publisher`)."""

    async def publish(
        self, events: Iterable[FragmentEvent], traceparent: str | None = None
    ) -> int: ...

    async def start_turn(self, turn: TurnContext) -> TurnStarted: ...


class SyncSink(Protocol):
    """Where a sync tee publishes (a :class:`~processor.kafka.publish.BlockingPublisher`)."""

    def publish(self, events: Iterable[FragmentEvent], traceparent: str | None = None) -> int: ...

    def start_turn(self, turn: TurnContext) -> TurnStarted: ...


def recognise(event: object) -> str:
    """The provider of an SDK stream event; ConfigurationError for an object no SDK makes."""
    for recogniser in _RECOGNISERS:
        provider = recogniser(event)
        if provider is not None:
            return provider
    raise ConfigurationError(
        "unknown_stream",
        f"tee_stream: cannot tell the provider of a {type(event).__name__} event; "
        f"pass provider= (one of {', '.join(sorted(ADAPTERS))})",
    )


@dataclass
class TeeState:
    """The publishing side of one tee, readable after (or during) the iteration."""

    turn: TurnContext
    provider: str | None = None
    alternative: int | None = 0
    adapter: StreamAdapter | None = None
    failure: AdapterError | None = None
    """The first provider event the adapter could not read (its responses ended ``error``)."""
    published: int = 0
    ending: str | None = None
    """``completed`` (the stream ended), or the abort reason."""
    events: list[FragmentEvent] = field(default_factory=list, repr=False)
    keep_events: bool = False

    def _adapter_for(self, event: object) -> StreamAdapter:
        if self.adapter is None:
            if self.provider is None:
                self.provider = recognise(event)
            if self.provider not in ADAPTERS:
                raise ConfigurationError("unknown_provider", f"no adapter for {self.provider!r}")
            self.adapter = ADAPTERS[self.provider](
                self.turn, now=time.time, alternative=self.alternative
            )
        return self.adapter

    def feed(self, event: object) -> list[FragmentEvent]:
        """The fragment events one provider event implies."""
        adapter = self._adapter_for(event)
        if self.failure is not None:
            return []
        assert self.provider is not None
        wire = _TO_WIRE[self.provider](event)
        if wire is None:
            return []
        try:
            return adapter.feed_event(wire)
        except AdapterError as exc:
            self.failure = exc
            log.warning(
                "provider event unreadable; the response ends inert",
                extra={"fields": {"provider": self.provider, "reason": exc.reason}},
            )
            return adapter.abort(exc.reason)

    def close(self) -> list[FragmentEvent]:
        self.ending = "completed"
        return self.adapter.close() if self.adapter is not None else []

    def abort(self, reason: str) -> list[FragmentEvent]:
        self.ending = reason
        return self.adapter.abort(reason) if self.adapter is not None else []

    def sent(self, events: list[FragmentEvent], count: int) -> None:
        self.published += count
        if self.keep_events:
            self.events.extend(events)


def _abort_reason(exc: BaseException) -> str:
    if isinstance(exc, GeneratorExit):
        return CONSUMER_STOPPED
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return CANCELLED
    return STREAM_ERROR


async def tee_stream(
    stream: AsyncIterable[E],
    publisher: AsyncSink,
    *,
    turn: TurnContext,
    provider: str | None = None,
    traceparent: str | None = None,
    alternative: int | None = 0,
    start_turn: bool = False,
    state: TeeState | None = None,
) -> AsyncIterator[E]:
    """Yield each event of ``stream`` unchanged; publish its fragment events to ``publisher``.

    ``turn`` is the authenticated turn. ``start_turn=True`` first writes its ``turn.started``
    (else the gateway wrote it: :meth:`Publisher.start_turn`). ``traceparent`` defaults to the
    caller's current OpenTelemetry span. ``state`` (a :class:`TeeState` for ``turn``) lets the
    caller read what was published.
    """
    side = state or TeeState(turn)
    side.provider = side.provider or provider
    side.alternative = alternative
    trace = tracing.current_traceparent(traceparent)
    if start_turn:
        await publisher.start_turn(turn)

    async def send(events: list[FragmentEvent]) -> None:
        if events:
            side.sent(events, await publisher.publish(events, trace))

    try:
        async for event in stream:
            await send(side.feed(event))
            yield event
        await send(side.close())
    except BaseException as exc:
        if side.ending is None:
            ending = side.abort(_abort_reason(exc))
            try:
                await send(ending)
            except Exception as publish_error:  # the original exception matters more
                log.error(
                    "could not publish the inert end of an interrupted stream",
                    extra={"fields": {"error": type(publish_error).__name__}},
                )
        raise


def tee_stream_sync(
    stream: Iterable[E],
    publisher: SyncSink,
    *,
    turn: TurnContext,
    provider: str | None = None,
    traceparent: str | None = None,
    alternative: int | None = 0,
    start_turn: bool = False,
    state: TeeState | None = None,
) -> Iterator[E]:
    """:func:`tee_stream` for a synchronous stream (openai ``Stream``, boto3's event stream)."""
    side = state or TeeState(turn)
    side.provider = side.provider or provider
    side.alternative = alternative
    trace = tracing.current_traceparent(traceparent)
    if start_turn:
        publisher.start_turn(turn)

    def send(events: list[FragmentEvent]) -> None:
        if events:
            side.sent(events, publisher.publish(events, trace))

    try:
        for event in stream:
            send(side.feed(event))
            yield event
        send(side.close())
    except BaseException as exc:
        if side.ending is None:
            ending = side.abort(_abort_reason(exc))
            try:
                send(ending)
            except Exception as publish_error:
                log.error(
                    "could not publish the inert end of an interrupted stream",
                    extra={"fields": {"error": type(publish_error).__name__}},
                )
        raise
