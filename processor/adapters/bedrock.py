"""Amazon Bedrock ConverseStream events → fragment events.

Input is the event dicts boto3's ``converse_stream()`` yields (one key per event), or the raw
``application/vnd.amazon.eventstream`` body through :meth:`BedrockConverseAdapter.feed_bytes`:

* ``messageStart`` opens a response. Bedrock gives no response id, so it is derived
  deterministically from the turn and this adapter's message counter (a reconnect replay through
  a fresh adapter gets the same ids).
* ``contentBlockStart`` with ``start.toolUse{toolUseId, name}`` opens a call: ``item_id`` is the
  ``contentBlockIndex``, ``call_id`` the ``toolUseId``. Text blocks have no start event. A
  ``toolUse`` start with a ``type`` (``server_tool_use``: a system tool Bedrock runs itself,
  answered by a ``toolResult`` block in the model's own output) and a ``toolResult`` start are
  provider-side blocks: no call starts, their deltas are ignored, so they never reach
  ``dispatch`` (fail closed: any ``type`` at all, known or not, is not a client call).
* ``contentBlockDelta`` with ``delta.toolUse.input`` is argument text (arrival order gives
  ``seq``); ``delta.text`` and other kinds are not published.
* ``contentBlockStop`` is the call's terminal. A call that received no input gets the delta
  ``{}``.
* ``messageStop{stopReason}`` is the stop marker; :data:`STOP_REASONS` judges the reason (one
  rule, :mod:`processor.adapters.verdicts`): ``max_tokens``, a guardrail, a content filter,
  malformed output and any reason not in the table void the response at once, with the raw
  reason. ``end_turn``, ``tool_use`` and ``stop_sequence`` are normal, but the response ends
  ``completed`` only at the stream's documented end, ``metadata`` then the end of the stream
  (``close()``), or when the next ``messageStart`` of a concatenated stream follows that
  ``metadata`` (issue 29). A stream that ends after ``messageStop`` without ``metadata`` ends
  ``incomplete`` / ``stream_cut``.
* ``…Exception`` events (and an eventstream ``error`` frame) end the response ``error``, the
  reason being the exception's name, also after ``messageStop`` (``serviceUnavailableException``
  and the others can come instead of ``metadata``; the gateway's retry would otherwise run the
  call twice). Content after ``messageStop`` voids the response (``error`` / ``after_stop``);
  content outside a message (after an exception) is ignored.

A block's ``contentBlockStop`` is trusted once the model has moved on (a later block starts or
streams) or the message stopped normally. Under a voiding ``stopReason`` the last stopped block
stays open and becomes inert with the rest, because the cut may have fallen inside it; every
other ended call waits in the Assembler for the ``completed`` verdict. A conflicting start
(another name or id for a block) makes the response inert; a repeated identical start or stop is
ignored. An event of an unknown type is ignored and counted (``unknown_events``: the service adds
event types); a delta of another kind than ``toolUse`` on a tool block is unknown content inside
the call, whose terminal is then withheld. An event the adapter cannot read raises
:class:`AdapterError`; the adapter then refuses the rest of the stream and ends the open response
as ``error``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from processor.adapters.base import Handler, OpenCall, StreamAdapter, TurnContext
from processor.adapters.eventstream import (
    STREAM_ERROR_EVENT,
    EventStreamDecoder,
    is_error_event,
    message_to_event,
)
from processor.adapters.fields import MAX_ID, MAX_NAME, Fields
from processor.adapters.providers import BEDROCK
from processor.adapters.verdicts import AFTER_STOP
from processor.core.errors import AdapterError
from processor.core.events import FragmentEvent, ResponseStatus

_EVENT_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")

_F: Final = Fields("bedrock")
STOP_REASONS: Final = BEDROCK.stops


class _InertError(AdapterError):
    """A readable event that makes its response inert (a conflict, input without a start)."""

    reason = "protocol_violation"


class _AfterStopError(_InertError):
    """Content after ``messageStop``: the response ends ``error`` / ``after_stop``."""

    reason = AFTER_STOP


@dataclass
class _Message:
    response_id: str
    calls: dict[int, OpenCall] = field(default_factory=dict)
    stopped_unconfirmed: list[OpenCall] = field(default_factory=list)
    provider_blocks: set[int] = field(default_factory=set)
    """Blocks of provider-side tools (``server_tool_use``, ``toolResult``): never calls."""
    stop_reason: str | None = None
    """The normal ``stopReason`` of ``messageStop``; ``completed`` waits for the stream's end."""
    metadata: bool = False
    """``metadata`` came after ``messageStop``: the stream's end may complete the message."""
    finished: bool = False

    @property
    def unterminated(self) -> int:
        """Calls of this message without a trusted terminal."""
        return sum(1 for call in self.calls.values() if not call.ended)


class BedrockConverseAdapter(StreamAdapter):
    """One Bedrock ConverseStream (or several, concatenated)."""

    provider: ClassVar[str] = "bedrock"
    refusal = "ignore"

    def __init__(
        self,
        ctx: TurnContext,
        *,
        now: Callable[[], float] | None = None,
        alternative: int | None = 0,
    ) -> None:
        super().__init__(ctx, now=now, alternative=alternative)
        self._message: _Message | None = None
        self._decoder = EventStreamDecoder()
        self._handlers: dict[str, Handler] = {
            "messageStart": self._message_start,
            "contentBlockStart": self._block_start,
            "contentBlockDelta": self._block_delta,
            "contentBlockStop": self._block_stop,
            "messageStop": self._message_stop,
            "metadata": self._metadata,
        }

    # -- entry points ----------------------------------------------------------------------

    def feed_bytes(self, raw: bytes) -> list[FragmentEvent]:
        """Feed a slice of the raw eventstream body (any chunking)."""
        if self._stopped:
            return self._refuse()
        events = self._framed(lambda: [message_to_event(m) for m in self._decoder.feed(raw)])
        out: list[FragmentEvent] = []
        for event in events:
            out.extend(self.feed_event(event))
        return out

    def close(self) -> list[FragmentEvent]:
        if not self._closed and self._decoder.pending_bytes:
            self.anomaly("the eventstream body ended inside a frame")
        return super().close()

    def _end_open(self, status: ResponseStatus, reason: str) -> list[FragmentEvent]:
        message = self._message
        if message is None or message.finished or not self.endable(message.response_id):
            return []
        return [self._finish(message, status, reason)]

    def _settle(self) -> list[FragmentEvent]:
        """The stream ended: a message stopped normally and followed by ``metadata`` completes
        (without ``metadata`` it is left to the cut ending)."""
        message = self._message
        if message is None or message.finished or not message.metadata:
            return []
        return [self._finish(message, *STOP_REASONS.judge(message.stop_reason))]

    # -- events ----------------------------------------------------------------------------

    def _read_event(self, event: dict[str, Any]) -> list[FragmentEvent]:
        if len(event) != 1:
            raise _F.bad("an event must have exactly one type key")
        ((name, body),) = event.items()
        if is_error_event(event):
            return self._exception(name)
        handler = self._handlers.get(name)
        if handler is None:
            return self.ignore_unknown(name)
        if not isinstance(body, dict):
            raise _F.bad("event body is not an object")
        try:
            return handler(body)
        except _InertError as exc:
            return self._inert(exc)

    def _inert(self, exc: _InertError) -> list[FragmentEvent]:
        self.anomaly(f"response made inert: {exc.detail}")
        return self._end_open(ResponseStatus.ERROR, exc.reason)

    def _exception(self, name: str) -> list[FragmentEvent]:
        shown = name if name == STREAM_ERROR_EVENT or _EVENT_NAME.fullmatch(name) else "unknown"
        self.anomaly(f"provider exception ({shown})")
        return self._end_open(ResponseStatus.ERROR, shown)

    def _message_start(self, _body: dict[str, Any]) -> list[FragmentEvent]:
        out: list[FragmentEvent] = []
        previous = self._message
        if previous is not None and not previous.finished:
            if previous.metadata:  # the next stream of a concatenation: the previous one ended
                out.extend(self._settle())
            elif previous.stop_reason is not None:
                self.anomaly("messageStart after messageStop without metadata")
                out.append(self._finish(previous, *self._cut_ending()))
            else:
                self.anomaly("messageStart before the previous messageStop")
                out.append(self._finish(previous, ResponseStatus.INCOMPLETE, "superseded"))
        self._open_message()
        return out

    def _open_message(self) -> _Message:
        self._message = _Message(response_id=self.next_response_id("message"))
        return self._message

    def _live_message(self) -> _Message | None:
        """The open message; content outside one (after an exception, say) is ignored, and
        content after its ``messageStop`` voids it (``after_stop``)."""
        if self._message is None or self._message.finished:
            self.anomaly("content outside a message ignored")
            return None
        if self._message.stop_reason is not None:
            raise _AfterStopError("after_stop", "content after messageStop")
        return self._message

    # -- content blocks --------------------------------------------------------------------

    def _block_start(self, body: dict[str, Any]) -> list[FragmentEvent]:
        index = _F.index(body, "contentBlockIndex")
        message = self._live_message()
        if message is None:
            return []
        out = self._confirm_stopped(message)
        start = body.get("start")
        tool_use = start.get("toolUse") if isinstance(start, dict) else None
        if isinstance(start, dict) and start.get("toolResult") is not None:
            return out + self._provider_block(message, index, "toolResult")
        if tool_use is None:
            return out
        if not isinstance(tool_use, dict):
            raise _F.bad("start.toolUse is not an object")
        if tool_use.get("type") is not None:  # server_tool_use, or a type not known: not ours
            return out + self._provider_block(message, index, "toolUse with a type")
        if index in message.provider_blocks:
            raise _InertError("identity_conflict", "a client toolUse at a provider block's index")
        tool = _F.text(tool_use, "name", MAX_NAME, "toolUse")
        call_id = _F.text(tool_use, "toolUseId", MAX_ID, "toolUse")
        existing = message.calls.get(index)
        if existing is not None:
            return out + self._repeated_start(existing, tool, call_id)
        if any(call.call_id == call_id for call in message.calls.values()):
            raise _InertError("identity_conflict", "a toolUseId is reused by another block")
        call = OpenCall(message.response_id, str(index), call_id, tool)
        message.calls[index] = call
        return [*out, self.started(call)]

    def _provider_block(self, message: _Message, index: int, kind: str) -> list[FragmentEvent]:
        """A provider-side tool's block: recorded so its deltas are ignored; never a call."""
        if index in message.calls:
            raise _InertError("identity_conflict", "a provider block at a client call's index")
        message.provider_blocks.add(index)
        self.anomaly(f"provider-side tool block ({kind}) not dispatched")
        return []

    def _repeated_start(self, call: OpenCall, tool: str, call_id: str) -> list[FragmentEvent]:
        if (call.tool, call.call_id) != (tool, call_id):
            raise _InertError("identity_conflict", "a block restarted with another name or id")
        self.anomaly("repeated contentBlockStart ignored")
        return []

    def _block_delta(self, body: dict[str, Any]) -> list[FragmentEvent]:
        index = _F.index(body, "contentBlockIndex")
        message = self._live_message()
        if message is None:
            return []
        out = self._confirm_stopped(message)
        delta = body.get("delta")
        if not isinstance(delta, dict):
            raise _F.bad("contentBlockDelta without a delta object")
        if index in message.provider_blocks:
            return out
        tool_use = delta.get("toolUse")
        if tool_use is None:
            call = message.calls.get(index)
            if call is not None and not call.extra.get("stopped"):
                self.withhold(call, "a delta of another kind in a tool block")
            return out
        text = tool_use.get("input") if isinstance(tool_use, dict) else None
        if not isinstance(text, str):
            raise _F.bad("delta.toolUse.input is not a string")
        call = message.calls.get(index)
        if call is None:
            raise _InertError("protocol_violation", "tool input for a block that did not start")
        if call.extra.get("stopped"):
            self.anomaly("tool input after contentBlockStop ignored")
            return out
        if text:
            call.extra["has_input"] = call.extra.get("has_input", False) or bool(text.strip())
            out.append(self.delta(call, text))
        return out

    def _block_stop(self, body: dict[str, Any]) -> list[FragmentEvent]:
        index = _F.index(body, "contentBlockIndex")
        message = self._live_message()
        if message is None:
            return []
        call = message.calls.get(index)
        if call is None:
            return []
        if call.extra.get("stopped"):
            self.anomaly("repeated contentBlockStop ignored")
            return []
        call.extra["stopped"] = True
        message.stopped_unconfirmed.append(call)
        if call.extra.get("has_input"):
            return []
        return [self.delta(call, "{}")]

    def _confirm_stopped(self, message: _Message) -> list[FragmentEvent]:
        """The model moved on: stopped blocks were not cut, their terminals are trusted."""
        ended: list[FragmentEvent] = [
            self.ended(call, "contentBlockStop")
            for call in message.stopped_unconfirmed
            if not call.withheld
        ]
        message.stopped_unconfirmed.clear()
        return ended

    # -- the end of a message --------------------------------------------------------------

    def _message_stop(self, body: dict[str, Any]) -> list[FragmentEvent]:
        message = self._message
        if message is None or message.finished:
            self.anomaly("messageStop outside a message ignored")
            return []
        if message.stop_reason is not None:
            raise _AfterStopError("after_stop", "a second messageStop")
        status, reason = STOP_REASONS.judge(body.get("stopReason"))
        if status is not ResponseStatus.COMPLETED:
            return [self._finish(message, status, reason)]
        message.stop_reason = reason  # completed only at metadata, then the end of the stream
        return self._confirm_stopped(message)

    def _metadata(self, _body: dict[str, Any]) -> list[FragmentEvent]:
        message = self._message
        if message is None or message.finished or message.stop_reason is None:
            self.anomaly("metadata outside a stopped message ignored")
            return []
        if message.metadata:
            self.anomaly("repeated metadata ignored")
        message.metadata = True
        return []

    def _finish(self, message: _Message, status: ResponseStatus, reason: str) -> FragmentEvent:
        inert = message.unterminated
        message.finished = True
        message.stopped_unconfirmed.clear()
        return self.response_ended(message.response_id, status, reason, inert=inert)
