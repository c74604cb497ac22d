"""httpx: tee a raw provider response for servers that proxy the bytes.

::

    async with client.stream("POST", url, json=body) as response:
        async for chunk in tee_response(response, publisher, turn=turn, provider="anthropic"):
            await downstream.send(chunk)            # the provider's bytes, unchanged

The body is decoded as ``processor adapt`` decodes it: SSE or JSON lines
(:class:`~processor.adapters.sse.ProviderEventDecoder`), or Bedrock's binary
``application/vnd.amazon.eventstream`` (``provider="bedrock"``), in any chunking. The endings
are those of :mod:`processor.integrations.tee`: the stream's own end, or an inert abort when the
caller stops, the task is cancelled, the transport fails, or a frame cannot be read.
``tee_response_sync`` is the same for ``httpx.Client.stream``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from processor.adapters.base import TurnContext
from processor.adapters.bedrock import BedrockConverseAdapter
from processor.adapters.sse import ProviderEventDecoder
from processor.core.errors import AdapterError
from processor.core.events import FragmentEvent
from processor.integrations.tee import AsyncSink, SyncSink, TeeState, tee_stream, tee_stream_sync

__all__ = ["BodyTeeState", "tee_response", "tee_response_sync"]


class BodyTeeState(TeeState):
    """A :class:`TeeState` fed slices of the raw body instead of SDK event objects."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._decoder = ProviderEventDecoder()

    def feed(self, event: object) -> list[FragmentEvent]:
        assert isinstance(event, bytes)
        if self.provider is None:
            raise AdapterError("unknown_provider", "tee_response needs provider=")
        adapter = self._adapter_for(event)
        if self.failure is not None:
            return []
        try:
            if isinstance(adapter, BedrockConverseAdapter):
                return adapter.feed_bytes(event)
            out: list[FragmentEvent] = []
            for wire in self._decoder.feed(event):
                out += adapter.feed_event(wire)
            return out
        except AdapterError as exc:
            return self._failed(adapter, exc)

    def close(self) -> list[FragmentEvent]:
        adapter = self.adapter
        if adapter is None or isinstance(adapter, BedrockConverseAdapter) or self.failure:
            return super().close()
        out: list[FragmentEvent] = []
        try:
            for wire in self._decoder.close():
                out += adapter.feed_event(wire)
            self._decoder.check()
        except AdapterError as exc:
            return out + self._failed(adapter, exc)
        return out + super().close()

    def _failed(self, adapter: Any, exc: AdapterError) -> list[FragmentEvent]:
        self.failure = exc
        ended: list[FragmentEvent] = adapter.abort(exc.reason)
        return ended


async def tee_response(
    response: Any,
    publisher: AsyncSink,
    *,
    turn: TurnContext,
    provider: str,
    traceparent: str | None = None,
    alternative: int | None = 0,
    start_turn: bool = False,
) -> AsyncIterator[bytes]:
    """Yield the body of an ``httpx.Response`` (``aiter_bytes()``) unchanged; publish its
    fragment events."""
    state = BodyTeeState(turn, provider=provider)
    async for chunk in tee_stream(
        response.aiter_bytes(),
        publisher,
        turn=turn,
        provider=provider,
        traceparent=traceparent,
        alternative=alternative,
        start_turn=start_turn,
        state=state,
    ):
        yield chunk


def tee_response_sync(
    response: Any,
    publisher: SyncSink,
    *,
    turn: TurnContext,
    provider: str,
    traceparent: str | None = None,
    alternative: int | None = 0,
    start_turn: bool = False,
) -> Iterator[bytes]:
    """:func:`tee_response` for ``httpx.Client.stream`` (``iter_bytes()``)."""
    state = BodyTeeState(turn, provider=provider)
    yield from tee_stream_sync(
        response.iter_bytes(),
        publisher,
        turn=turn,
        provider=provider,
        traceparent=traceparent,
        alternative=alternative,
        start_turn=start_turn,
        state=state,
    )
