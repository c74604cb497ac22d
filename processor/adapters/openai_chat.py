"""OpenAI Chat Completions streams (and compatible servers) → fragment events.

This module owns the reading of ``chat.completion.chunk`` streams, as sent by OpenAI and by the
servers that copy the format (Groq, Mistral, GLM, vLLM, gateways):

* Identity. The response id is the first chunk ``id`` (a server that changes the chunk id while
  the response is open stays in the same response; a new id after the response ended starts a
  new one). A call lives in a *slot*: ``choices[].index`` plus ``tool_calls[].index``, or the
  implicit slot ``_`` when a server sends no ``index``. ``item_id`` is ``"<choice>:<slot>"``,
  with ``#<n>`` appended for the n-th later call in the same slot, so ``n > 1`` choices and
  reused slots never collide. The call id is the first ``id`` seen for the call; fragments are
  held until both id and name are known (some servers send the id late); a call that never got
  an id is given ``synthetic:<item_id>`` when its choice finishes. An entry without ``index``
  continues the choice's most recent call unless it carries a different id.
* Reused slots. A different ``id`` in a slot that already holds a call starts a new call there.
  The previous call can receive no more text, but it is *not* ended: Chat Completions has no
  per-call terminal, so it waits for its choice's ``finish_reason`` like every other call, and
  becomes inert with them if the stream is cut.
* Names and ids are set once: a resent equal value and ``"name": ""`` are ignored; a different
  name is an anomaly and the call's terminal is withheld (it ends inert), never a rename.
* Terminals. ``finish_reason`` ``tool_calls``, ``function_call`` or ``stop`` (a forced tool
  ends with ``stop``) ends every call of that choice; a call that got no argument text gets the
  delta ``{}``. ``length``, ``content_filter`` or any other reason leaves them open, and the
  response's ``response.ended`` (``incomplete``, ``failed`` or ``error``) makes them inert.
  ``response.ended`` is emitted once every choice seen has a ``finish_reason``, on a mid-stream
  ``error`` payload (HTTP 200), or at ``close()`` (``error`` after a bad chunk, ``incomplete``
  when some choice never finished). A choice first seen after that is ignored (fail closed).

Text, reasoning, refusals and usage are ignored. Custom (non-function) tool calls and the
deprecated ``function_call`` delta are ignored with an anomaly. A chunk of the wrong structure
raises :class:`AdapterError`; after that the adapter refuses further chunks and ``close()`` ends
the open response with status ``error``.
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

PROVIDER: Final = "openai-chat"

_CODE: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_STRUCTURE_ERRORS: Final = (KeyError, TypeError, ValueError, AttributeError, IndexError)
_MAX_ID: Final = 256
_MAX_NAME: Final = 128
_IMPLICIT: Final = "_"

_HARMLESS_TYPES: Final = frozenset({"ping", "keepalive"})
_ENDING_FINISH: Final = frozenset({"tool_calls", "function_call", "stop"})
_FINISH_STATUS: Final = {
    "length": ResponseStatus.INCOMPLETE,
    "max_tokens": ResponseStatus.INCOMPLETE,
    "model_length": ResponseStatus.INCOMPLETE,
    "content_filter": ResponseStatus.FAILED,
}
_SEVERITY: Final = {
    ResponseStatus.COMPLETED: 0,
    ResponseStatus.INCOMPLETE: 1,
    ResponseStatus.FAILED: 2,
    ResponseStatus.CANCELLED: 2,
    ResponseStatus.ERROR: 3,
}


# --------------------------------------------------------------------------- small readers


def _shown(value: object) -> str:
    """A provider code safe to put in a reason or message, else a placeholder."""
    return value if isinstance(value, str) and _CODE.fullmatch(value) else "?"


def _bad(detail: str) -> AdapterError:
    return AdapterError("bad_chunk", f"{PROVIDER}: {detail}")


def _opt(obj: dict[str, Any], key: str, kind: type[Any], what: str) -> Any:
    """``obj[key]`` if absent/None or of ``kind`` (bools are not integers), else AdapterError."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _bad(f"field {key!r} of {what} has the wrong type")
    return value


def _ident(value: str | None, limit: int) -> str | None:
    """An id or name: ``""`` means absent; an oversized one is a bad chunk."""
    if not value:
        return None
    if len(value) > limit:
        raise _bad("id or name too long")
    return value


def _arguments(function: dict[str, Any]) -> str:
    value = function.get("arguments")
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):  # a few servers send the object itself
        return orjson.dumps(value).decode()
    raise _bad("field 'arguments' of a tool call has the wrong type")


# --------------------------------------------------------------------------- state


@dataclass
class _Entry:
    """One call in a slot; ``call`` is set once both its id and name are known."""

    choice: int
    slot: str
    item_id: str
    call_id: str | None = None
    tool: str | None = None
    held: list[str] = field(default_factory=list)
    call: OpenCall | None = None
    withheld: bool = False


@dataclass
class _Choice:
    index: int
    finish: str | None = None
    entries: list[_Entry] = field(default_factory=list)
    slots: dict[str, _Entry] = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)
    last: _Entry | None = None


@dataclass
class _Response:
    response_id: str
    chunk_id: str | None
    choices: dict[int, _Choice] = field(default_factory=dict)
    ended: bool = False


class OpenAIChatAdapter(StreamAdapter):
    """One Chat Completions stream → fragment events (see the module docstring)."""

    provider: ClassVar[str] = PROVIDER

    def __init__(self, ctx: TurnContext, *, now: Callable[[], float] | None = None) -> None:
        super().__init__(ctx, now=now)
        self._current: _Response | None = None
        self._responses = 0
        self._failure: str | None = None
        self._closed = False

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
            raise _bad(f"unreadable chunk ({type(exc).__name__})") from None

    def close(self) -> list[FragmentEvent]:
        self._closed = True
        current = self._current
        if current is None or current.ended:
            return []
        if self._failure is not None:
            return [self._end(current, ResponseStatus.ERROR, self._failure)]
        # Some choice never finished (else the response would have ended already).
        status, reason = self._verdict(current)
        if _SEVERITY[status] < _SEVERITY[ResponseStatus.INCOMPLETE]:
            status, reason = ResponseStatus.INCOMPLETE, "no finish_reason"
        return [self._end(current, status, reason)]

    # -- routing ---------------------------------------------------------------------------

    def _require_running(self) -> None:
        if self._closed:
            raise AdapterError("adapter_closed", f"{PROVIDER}: stream already closed")
        if self._failure is not None:
            raise AdapterError("adapter_failed", f"{PROVIDER}: stream already failed")

    def _route(self, chunk: dict[str, Any]) -> list[FragmentEvent]:
        kind = chunk.get("type")
        if kind == "error" or chunk.get("error") is not None:
            return self._on_error(chunk)
        if kind is not None:
            if kind in _HARMLESS_TYPES:
                return []
            raise AdapterError("unknown_event", f"{PROVIDER}: unknown chunk type {_shown(kind)!r}")
        choices = chunk.get("choices")
        if choices is None:
            self.anomaly("chunk without choices ignored")
            return []
        if not isinstance(choices, list):
            raise _bad("field 'choices' is not a list")
        response = self._response_for(chunk, has_choices=bool(choices))
        out: list[FragmentEvent] = []
        for choice in choices:
            if not isinstance(choice, dict):
                raise _bad("a choice is not an object")
            if response is not None:
                out.extend(self._on_choice(response, choice))
        return out

    def _response_for(self, chunk: dict[str, Any], *, has_choices: bool) -> _Response | None:
        chunk_id = _ident(_opt(chunk, "id", str, "a chunk"), _MAX_ID)
        current = self._current
        if current is not None and (not current.ended or chunk_id in (None, current.chunk_id)):
            if chunk_id is not None and chunk_id != current.chunk_id:
                self.anomaly("chunk id changed within a response")
            return current
        if not has_choices:
            return current
        self._responses += 1
        response_id = chunk_id or f"chat-stream-{self._responses}"
        self._current = _Response(response_id, chunk_id)
        return self._current

    # -- choices and tool call entries -----------------------------------------------------

    def _on_choice(self, response: _Response, raw: dict[str, Any]) -> list[FragmentEvent]:
        index = _opt(raw, "index", int, "a choice") or 0
        choice = response.choices.setdefault(index, _Choice(index))
        delta = _opt(raw, "delta", dict, "a choice") or {}
        tool_calls = _opt(delta, "tool_calls", list, "a delta") or []
        finish = _opt(raw, "finish_reason", str, "a choice")
        if delta.get("function_call") is not None:
            self.anomaly("deprecated function_call delta ignored")
        if response.ended or choice.finish is not None:
            if tool_calls or finish:
                self.anomaly("chunk after the choice finished ignored")
            return []
        out: list[FragmentEvent] = []
        for entry in tool_calls:
            if not isinstance(entry, dict):
                raise _bad("a tool call is not an object")
            out.extend(self._on_entry(response, choice, entry))
        if finish:
            out.extend(self._on_finish(response, choice, finish))
        return out

    def _on_entry(
        self, response: _Response, choice: _Choice, raw: dict[str, Any]
    ) -> list[FragmentEvent]:
        if raw.get("type") not in (None, "function"):
            self.anomaly("non-function tool call ignored")
            return []
        index = _opt(raw, "index", int, "a tool call")
        function = _opt(raw, "function", dict, "a tool call") or {}
        call_id = _ident(_opt(raw, "id", str, "a tool call"), _MAX_ID)
        tool = _ident(_opt(function, "name", str, "a function"), _MAX_NAME)
        text = _arguments(function)
        entry = self._entry_for(choice, _IMPLICIT if index is None else str(index), call_id)
        choice.last = entry
        if call_id is not None and entry.call_id is None:
            entry.call_id = call_id
        self._set_tool(entry, tool)
        if text:
            entry.held.append(text)
        return self._release(response, entry)

    def _entry_for(self, choice: _Choice, slot: str, call_id: str | None) -> _Entry:
        """The call this entry continues, or a new call in its slot."""
        current = choice.last if slot == _IMPLICIT else choice.slots.get(slot)
        if current is not None and call_id in (None, current.call_id):
            return current
        if current is not None and current.call_id is None:
            return current  # the id of a call that started without one
        if current is not None:
            self.anomaly("slot reused with a new call id: a new call starts")
        generation = choice.generations.get(slot, 0)
        choice.generations[slot] = generation + 1
        suffix = f"#{generation}" if generation else ""
        entry = _Entry(choice.index, slot, f"{choice.index}:{slot}{suffix}")
        choice.entries.append(entry)
        choice.slots[slot] = entry
        return entry

    def _set_tool(self, entry: _Entry, tool: str | None) -> None:
        if tool is None or tool == entry.tool:
            return
        if entry.tool is None:
            entry.tool = tool
            return
        self.anomaly("conflicting tool name: call withheld")
        entry.withheld = True

    def _release(self, response: _Response, entry: _Entry) -> list[FragmentEvent]:
        """Start the call once id and name are known, then pass on its held text."""
        out: list[FragmentEvent] = []
        call = entry.call
        if call is None:
            if entry.call_id is None or entry.tool is None:
                return out
            call = entry.call = OpenCall(
                response.response_id, entry.item_id, entry.call_id, entry.tool
            )
            out.append(self.started(call))
        out.extend(self.delta(call, text) for text in entry.held)
        entry.held.clear()
        return out

    # -- finishing -------------------------------------------------------------------------

    def _on_finish(self, response: _Response, choice: _Choice, finish: str) -> list[FragmentEvent]:
        choice.finish = finish
        out: list[FragmentEvent] = []
        if finish in _ENDING_FINISH:
            for entry in choice.entries:
                out.extend(self._end_entry(response, entry, choice.index))
        if all(c.finish is not None for c in response.choices.values()):
            out.append(self._end(response, *self._verdict(response)))
        return out

    def _end_entry(self, response: _Response, entry: _Entry, choice: int) -> list[FragmentEvent]:
        if entry.tool is None:
            self.anomaly("call without a name dropped")
            return []
        if entry.call_id is None:
            entry.call_id = f"synthetic:{entry.item_id}"
        out = self._release(response, entry)
        call = entry.call
        if call is None or call.ended or entry.withheld:
            return out
        if call.next_seq == 1:
            out.append(self.delta(call, "{}"))
        out.append(self.ended(call, f"finish_reason:{choice}:{entry.item_id}"))
        return out

    def _verdict(self, response: _Response) -> tuple[ResponseStatus, str]:
        """The response's status: the worst finish_reason among its choices."""
        status, reason = ResponseStatus.COMPLETED, "completed"
        for choice in response.choices.values():
            if choice.finish is None or choice.finish in _ENDING_FINISH:
                continue
            found = _FINISH_STATUS.get(choice.finish, ResponseStatus.ERROR)
            if _SEVERITY[found] > _SEVERITY[status]:
                status, reason = found, f"finish_reason={_shown(choice.finish)}"
        return status, reason

    def _on_error(self, chunk: dict[str, Any]) -> list[FragmentEvent]:
        error = chunk.get("error")
        details = error if isinstance(error, dict) else chunk
        code = details.get("code") or details.get("type")
        current = self._current
        if current is None or current.ended:
            self.anomaly("error payload outside an open response")
            return []
        return [self._end(current, ResponseStatus.ERROR, _shown(code))]

    def _end(self, response: _Response, status: ResponseStatus, reason: str) -> FragmentEvent:
        response.ended = True
        for choice in response.choices.values():
            if any(entry.call is None for entry in choice.entries):
                self.anomaly("call that never got an id or a name dropped")
        return self.response_ended(response.response_id, status, reason)
