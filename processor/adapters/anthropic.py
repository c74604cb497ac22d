"""Anthropic Messages streams (``event: message_start`` … ``message_stop``) → fragment events.

This module owns the reading of the Messages streaming vocabulary:

* Identity. ``message_start`` names the response (``message.id``). A ``tool_use`` content
  block is one call: item id = the block index as a string, call id = ``tool_use.id``, tool =
  ``name``. ``server_tool_use`` (and every other block type: text, thinking, hosted tool results)
  is not a client tool call; its deltas, ``input_json_delta`` included, are ignored.
* Positions. Anthropic gives none, so ``seq`` is arrival order within the block. Empty
  ``partial_json`` strings are not deltas.
* Terminals. ``content_block_stop`` ends a tool_use block; a block that got no argument text gets
  the input object of its ``content_block_start`` (normally ``{}``).
* Response ends (one rule, :mod:`processor.adapters.verdicts`). ``message_delta`` brings the
  ``stop_reason``; :data:`STOP_REASONS` judges it. A voiding reason (``max_tokens``,
  ``refusal``, ``pause_turn``, any reason not in the table) ends the message at once with the
  table's status and the raw reason; a normal one (``end_turn``, ``tool_use``,
  ``stop_sequence``) ends it ``completed`` only at ``message_stop``, the provider's end event.
  A ``message_stop`` without a stop reason is voiding (``unknown``). An ``error`` event ends it
  ``error`` (reason: the error type); a second ``message_start`` while the first message is open
  ends the first one ``error`` (``spliced``); ``close()`` before ``message_stop`` ends it
  ``incomplete`` (``stream_cut``). Each message gets one ``response.ended``; calls still open then
  are inert, and a call that did end waits in the Assembler for a ``completed`` verdict.
* Names and ids are set once: a repeated identical ``content_block_start`` is ignored; a
  conflicting one, or a delta of another kind on a tool_use block (unknown content inside a
  call), withholds that call's terminal, so it ends inert.

``ping`` is ignored. Anthropic documents that new event types may be added: an event of an
unknown type is ignored and counted (``unknown_events``). A known event with the wrong structure
raises :class:`AdapterError`; after that the adapter refuses further chunks and ``close()`` ends
the open message with status ``error``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from processor.adapters.base import Handler, OpenCall, StreamAdapter, TurnContext
from processor.adapters.fields import MAX_ID, MAX_NAME, Fields, shown
from processor.adapters.providers import ANTHROPIC
from processor.adapters.verdicts import SPLICED
from processor.core.events import FragmentEvent, ResponseStatus

PROVIDER: Final = "anthropic"

_HARMLESS_TYPES: Final = frozenset({"ping"})
STOP_REASONS: Final = ANTHROPIC.stops
_F: Final = Fields(PROVIDER)


# --------------------------------------------------------------------------- state


@dataclass
class _Call(OpenCall):
    start_input: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Message:
    response_id: str
    ended: bool = False
    stop_reason: str | None = None
    calls: dict[int, _Call] = field(default_factory=dict)
    other_blocks: set[int] = field(default_factory=set)


class AnthropicMessagesAdapter(StreamAdapter):
    """One Messages stream (or several concatenated) → fragment events."""

    provider: ClassVar[str] = PROVIDER
    failure_ending = "bad_chunk"

    def __init__(
        self,
        ctx: TurnContext,
        *,
        now: Callable[[], float] | None = None,
        alternative: int | None = 0,
    ) -> None:
        super().__init__(ctx, now=now, alternative=alternative)
        self._messages: dict[str, _Message] = {}
        self._current: _Message | None = None
        self._handlers: dict[str, Handler] = {
            "message_start": self._on_message_start,
            "content_block_start": self._on_block_start,
            "content_block_delta": self._on_block_delta,
            "content_block_stop": self._on_block_stop,
            "message_delta": self._on_message_delta,
            "message_stop": self._on_message_stop,
            "error": self._on_error,
        }

    # -- routing ---------------------------------------------------------------------------

    def _read_event(self, event: dict[str, Any]) -> list[FragmentEvent]:
        kind = event.get("type")
        if not isinstance(kind, str):
            raise _F.bad("event has no type")
        handler = self._handlers.get(kind)
        if handler is not None:
            return handler(event)
        if kind in _HARMLESS_TYPES:
            return []
        return self.ignore_unknown(kind)

    def _end_open(self, status: ResponseStatus, reason: str) -> list[FragmentEvent]:
        current = self._current
        if current is None or current.ended or not self.endable(current.response_id):
            return []
        return [self._end(current, status, reason)]

    def _live(self) -> _Message | None:
        """The message later events belong to, or None if it has ended (they are ignored)."""
        current = self._current
        if current is None:
            raise _F.bad("event before message_start")
        if current.ended:
            self.anomaly("event after the message ended ignored")
            return None
        return current

    # -- messages --------------------------------------------------------------------------

    def _on_message_start(self, event: dict[str, Any]) -> list[FragmentEvent]:
        response_id = _F.text(_F.obj(event, "message"), "id", MAX_ID)
        current = self._current
        if current is not None and current.response_id == response_id:
            self.anomaly("repeated message_start ignored")
            return []
        out: list[FragmentEvent] = []
        if current is not None and not current.ended:
            self.anomaly("message_start while the previous message was open")
            out.append(self._end(current, ResponseStatus.ERROR, SPLICED))
        known = self._messages.get(response_id)
        if known is not None:
            self.anomaly("message_start for an earlier message ignored")
            self._current = known
            return out
        self._current = self._messages[response_id] = _Message(response_id)
        return out

    def _on_message_delta(self, event: dict[str, Any]) -> list[FragmentEvent]:
        stop_reason = _F.obj(event, "delta").get("stop_reason")
        message = self._live()
        if message is None or stop_reason is None:
            return []
        if not isinstance(stop_reason, str):
            raise _F.bad("field 'stop_reason' is not a string")
        message.stop_reason = stop_reason
        status, reason = STOP_REASONS.judge(stop_reason)
        if status is ResponseStatus.COMPLETED:
            return []  # normal: completed only at message_stop, the provider's end event
        return [self._end(message, status, reason)]

    def _on_message_stop(self, event: dict[str, Any]) -> list[FragmentEvent]:
        message = self._live()
        if message is None:
            return []
        if any(not call.ended for call in message.calls.values()):
            self.anomaly("message_stop with tool_use blocks that never stopped")
        return [self._end(message, *STOP_REASONS.judge(message.stop_reason))]

    def _on_error(self, event: dict[str, Any]) -> list[FragmentEvent]:
        error = event.get("error")
        code = error.get("type") if isinstance(error, dict) else None
        ended = self._end_open(ResponseStatus.ERROR, shown(code))
        if not ended:
            self.anomaly("error event outside an open message")
        return ended

    def _end(self, message: _Message, status: ResponseStatus, reason: str) -> FragmentEvent:
        message.ended = True
        return self.response_ended(message.response_id, status, reason)

    # -- content blocks --------------------------------------------------------------------

    def _on_block_start(self, event: dict[str, Any]) -> list[FragmentEvent]:
        index = _F.index(event, "index")
        block = _F.obj(event, "content_block")
        message = self._live()
        if message is None:
            return []
        existing = message.calls.get(index)
        if block.get("type") != "tool_use":
            if existing is not None:
                self.withhold(existing, "block index reused")
            message.other_blocks.add(index)
            return []
        call_id = _F.text(block, "id", MAX_ID)
        tool = _F.text(block, "name", MAX_NAME)
        if existing is not None:
            if (existing.call_id, existing.tool) != (call_id, tool):
                self.withhold(existing, "conflicting content_block_start")
            return []
        if index in message.other_blocks:
            self.anomaly("tool_use block at an index already used: ignored")
            return []
        start_input = block.get("input")
        call = _Call(message.response_id, str(index), call_id, tool)
        call.start_input = start_input if isinstance(start_input, dict) else {}
        message.calls[index] = call
        return [self.started(call)]

    def _on_block_delta(self, event: dict[str, Any]) -> list[FragmentEvent]:
        index = _F.index(event, "index")
        delta = _F.obj(event, "delta")
        message = self._live()
        call = message.calls.get(index) if message is not None else None
        if message is None or call is None:
            if message is not None and index not in message.other_blocks:
                self.anomaly("delta for a block that never started ignored")
            return []
        if delta.get("type") != "input_json_delta":
            self.withhold(call, "unexpected delta type in a tool_use block")
            return []
        text = delta.get("partial_json")
        if not isinstance(text, str):
            raise _F.bad("field 'partial_json' missing or not a string")
        if call.ended:
            self.anomaly("delta after content_block_stop ignored")
            return []
        return [self.delta(call, text)] if text else []

    def _on_block_stop(self, event: dict[str, Any]) -> list[FragmentEvent]:
        index = _F.index(event, "index")
        message = self._live()
        call = message.calls.get(index) if message is not None else None
        if call is None or call.ended:
            return []
        if call.withheld:
            self.anomaly("content_block_stop of a withheld call ignored")
            return []
        return self.end_call(
            call, "content_block_stop", empty=_F.json_text(call.start_input, "tool_use input")
        )
