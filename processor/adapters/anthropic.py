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
* Response ends. ``message_delta`` with ``stop_reason`` ``max_tokens`` or
  ``model_context_window_exceeded`` ends the message ``incomplete`` at once (a block cut by the
  limit never got its ``content_block_stop`` and stays inert), ``refusal`` ends it ``failed``;
  ``message_stop`` ends it ``completed``; an ``error`` event ends it ``error``; a second
  ``message_start`` while the first message is open ends the first one ``error`` ("spliced
  message"); ``close()`` before ``message_stop`` ends it ``incomplete``. Each message gets one
  ``response.ended``; calls still open then are inert.
* Names and ids are set once: a repeated identical ``content_block_start`` is ignored; a
  conflicting one, or a delta of another kind on a tool_use block, withholds that call's
  terminal, so it ends inert.

``ping`` is ignored. Any other event type, or a known one with the wrong structure, raises
:class:`AdapterError`; after that the adapter refuses further chunks and ``close()`` ends the
open message with status ``error``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import orjson

from processor.adapters.base import OpenCall, StreamAdapter, TurnContext
from processor.core.errors import AdapterError
from processor.core.events import FragmentEvent, ResponseStatus

PROVIDER: Final = "anthropic"

_CODE: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_STRUCTURE_ERRORS: Final = (KeyError, TypeError, ValueError, AttributeError, IndexError)
_MAX_ID: Final = 256
_MAX_NAME: Final = 128

_HARMLESS_TYPES: Final = frozenset({"ping"})
_STOP_STATUS: Final = {
    "max_tokens": ResponseStatus.INCOMPLETE,
    "model_context_window_exceeded": ResponseStatus.INCOMPLETE,
    "refusal": ResponseStatus.FAILED,
}


# --------------------------------------------------------------------------- small readers


def _shown(value: object) -> str:
    """A provider code safe to put in a reason or message, else a placeholder."""
    return value if isinstance(value, str) and _CODE.fullmatch(value) else "?"


def _bad(detail: str) -> AdapterError:
    return AdapterError("bad_chunk", f"{PROVIDER}: {detail}")


def _obj(event: dict[str, Any], key: str) -> dict[str, Any]:
    value = event.get(key)
    if not isinstance(value, dict):
        raise _bad(f"field {key!r} missing or not an object")
    return value


def _text(event: dict[str, Any], key: str, limit: int) -> str:
    value = event.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise _bad(f"field {key!r} missing, empty, too long or not a string")
    return value


def _index(event: dict[str, Any]) -> int:
    value = event.get("index")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad("field 'index' missing or not a non-negative integer")
    return value


# --------------------------------------------------------------------------- state


@dataclass
class _Call(OpenCall):
    start_input: dict[str, Any] = field(default_factory=dict)
    withheld: bool = False


@dataclass
class _Message:
    response_id: str
    ended: bool = False
    stop_reason: str | None = None
    calls: dict[int, _Call] = field(default_factory=dict)
    other_blocks: set[int] = field(default_factory=set)


Handler = Callable[[dict[str, Any]], list[FragmentEvent]]


class AnthropicMessagesAdapter(StreamAdapter):
    """One Messages stream (or several concatenated) → fragment events."""

    provider: ClassVar[str] = PROVIDER

    def __init__(self, ctx: TurnContext, *, now: Callable[[], float] | None = None) -> None:
        super().__init__(ctx, now=now)
        self._messages: dict[str, _Message] = {}
        self._current: _Message | None = None
        self._failure: str | None = None
        self._closed = False
        self._handlers: dict[str, Handler] = {
            "message_start": self._on_message_start,
            "content_block_start": self._on_block_start,
            "content_block_delta": self._on_block_delta,
            "content_block_stop": self._on_block_stop,
            "message_delta": self._on_message_delta,
            "message_stop": self._on_message_stop,
            "error": self._on_error,
        }

    # -- the interface -------------------------------------------------------------------

    def feed(self, chunk: dict[str, Any] | str | bytes) -> list[FragmentEvent]:
        self._require_running()
        try:
            return super().feed(chunk)
        except AdapterError:
            self._failure = "bad_chunk"
            raise

    def feed_event(self, event: dict[str, Any]) -> list[FragmentEvent]:
        self._require_running()
        try:
            return self._route(event)
        except AdapterError:
            self._failure = "bad_chunk"
            raise
        except _STRUCTURE_ERRORS as exc:
            self._failure = "bad_chunk"
            raise _bad(f"unreadable event ({type(exc).__name__})") from None

    def close(self) -> list[FragmentEvent]:
        self._closed = True
        current = self._current
        if current is None or current.ended:
            return []
        if self._failure is not None:
            return [self._end(current, ResponseStatus.ERROR, self._failure)]
        return [self._end(current, ResponseStatus.INCOMPLETE, "stream ended before message_stop")]

    # -- routing ---------------------------------------------------------------------------

    def _require_running(self) -> None:
        if self._closed:
            raise AdapterError("adapter_closed", f"{PROVIDER}: stream already closed")
        if self._failure is not None:
            raise AdapterError("adapter_failed", f"{PROVIDER}: stream already failed")

    def _route(self, event: dict[str, Any]) -> list[FragmentEvent]:
        kind = event.get("type")
        if not isinstance(kind, str):
            raise _bad("event has no type")
        handler = self._handlers.get(kind)
        if handler is not None:
            return handler(event)
        if kind in _HARMLESS_TYPES:
            return []
        raise AdapterError("unknown_event", f"{PROVIDER}: unknown event type {_shown(kind)!r}")

    def _live(self) -> _Message | None:
        """The message later events belong to, or None if it has ended (they are ignored)."""
        current = self._current
        if current is None:
            raise _bad("event before message_start")
        if current.ended:
            self.anomaly("event after the message ended ignored")
            return None
        return current

    # -- messages --------------------------------------------------------------------------

    def _on_message_start(self, event: dict[str, Any]) -> list[FragmentEvent]:
        response_id = _text(_obj(event, "message"), "id", _MAX_ID)
        current = self._current
        if current is not None and current.response_id == response_id:
            self.anomaly("repeated message_start ignored")
            return []
        out: list[FragmentEvent] = []
        if current is not None and not current.ended:
            self.anomaly("message_start while the previous message was open")
            out.append(self._end(current, ResponseStatus.ERROR, "spliced message"))
        known = self._messages.get(response_id)
        if known is not None:
            self.anomaly("message_start for an earlier message ignored")
            self._current = known
            return out
        self._current = self._messages[response_id] = _Message(response_id)
        return out

    def _on_message_delta(self, event: dict[str, Any]) -> list[FragmentEvent]:
        stop_reason = _obj(event, "delta").get("stop_reason")
        message = self._live()
        if message is None or stop_reason is None:
            return []
        if not isinstance(stop_reason, str):
            raise _bad("field 'stop_reason' is not a string")
        message.stop_reason = stop_reason
        status = _STOP_STATUS.get(stop_reason)
        if status is None:
            return []
        return [self._end(message, status, _shown(stop_reason))]

    def _on_message_stop(self, event: dict[str, Any]) -> list[FragmentEvent]:
        message = self._live()
        if message is None:
            return []
        if any(not call.ended for call in message.calls.values()):
            self.anomaly("message_stop with tool_use blocks that never stopped")
        reason = _shown(message.stop_reason) if message.stop_reason else "message_stop"
        return [self._end(message, ResponseStatus.COMPLETED, reason)]

    def _on_error(self, event: dict[str, Any]) -> list[FragmentEvent]:
        error = event.get("error")
        code = error.get("type") if isinstance(error, dict) else None
        current = self._current
        if current is None or current.ended:
            self.anomaly("error event outside an open message")
            return []
        return [self._end(current, ResponseStatus.ERROR, _shown(code))]

    def _end(self, message: _Message, status: ResponseStatus, reason: str) -> FragmentEvent:
        message.ended = True
        return self.response_ended(message.response_id, status, reason)

    # -- content blocks --------------------------------------------------------------------

    def _on_block_start(self, event: dict[str, Any]) -> list[FragmentEvent]:
        index = _index(event)
        block = _obj(event, "content_block")
        message = self._live()
        if message is None:
            return []
        existing = message.calls.get(index)
        if block.get("type") != "tool_use":
            if existing is not None:
                self._withhold(existing, "block index reused")
            message.other_blocks.add(index)
            return []
        call_id = _text(block, "id", _MAX_ID)
        tool = _text(block, "name", _MAX_NAME)
        if existing is not None:
            if (existing.call_id, existing.tool) != (call_id, tool):
                self._withhold(existing, "conflicting content_block_start")
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
        index = _index(event)
        delta = _obj(event, "delta")
        message = self._live()
        call = message.calls.get(index) if message is not None else None
        if message is None or call is None:
            if message is not None and index not in message.other_blocks:
                self.anomaly("delta for a block that never started ignored")
            return []
        if delta.get("type") != "input_json_delta":
            self._withhold(call, "unexpected delta type in a tool_use block")
            return []
        text = delta.get("partial_json")
        if not isinstance(text, str):
            raise _bad("field 'partial_json' missing or not a string")
        if call.ended:
            self.anomaly("delta after content_block_stop ignored")
            return []
        return [self.delta(call, text)] if text else []

    def _on_block_stop(self, event: dict[str, Any]) -> list[FragmentEvent]:
        index = _index(event)
        message = self._live()
        call = message.calls.get(index) if message is not None else None
        if call is None or call.ended:
            return []
        if call.withheld:
            self.anomaly("content_block_stop of a withheld call ignored")
            return []
        out: list[FragmentEvent] = []
        if call.next_seq == 1:
            out.append(self.delta(call, orjson.dumps(call.start_input).decode()))
        out.append(self.ended(call, f"content_block_stop:{index}"))
        return out

    def _withhold(self, call: _Call, why: str) -> None:
        self.anomaly(f"{why}: call withheld")
        if not call.ended:
            call.withheld = True
