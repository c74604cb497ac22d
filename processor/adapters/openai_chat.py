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
* Alternatives (``n > 1``). Each choice is an alternative of the same request, and at most one
  may act (:mod:`processor.adapters.verdicts`): the choice whose index is the adapter's
  ``alternative`` (default 0) uses the response id; every other choice ``i`` is its own response
  ``<id>~alt<i>``, whose calls are started and streamed (the ledger records them) but never
  ended, and whose ``response.ended`` is ``not_chosen`` / ``alternative``.
* Terminals and verdicts. Chat Completions has no per-call terminal: a choice's
  ``finish_reason`` is the end event of its calls, judged by :data:`STOP_REASONS`. A normal
  reason (``tool_calls``, ``stop`` — a forced tool ends with ``stop`` —, ``function_call``) ends
  every call of the chosen choice (a call that got no argument text gets the delta ``{}``), but
  its response ends ``completed`` only at the stream's documented end, ``[DONE]`` or the end of
  the body (``close()``), or when the next response of a concatenated stream starts: a
  response's verdict is its stream's last word (issue 29). Until then a voiding tail event voids
  it: Azure OpenAI's asynchronous content filter (``content_filter_results`` with ``filtered:
  true``, or a later ``finish_reason: "content_filter"``), any later ``finish_reason`` that is
  not the same normal one, tool-call, function-call or text content for the finished choice
  (``after_stop``), an ``error`` payload. A voiding reason (``length``, ``content_filter``, any
  reason not in the table) ends the response at once with the table's status and the raw
  reason, and its calls stay open and become inert; ``content_filter_results`` with
  ``filtered: true`` voids a choice whenever it comes (``failed`` / ``content_filter``). A
  mid-stream ``error`` payload (HTTP 200) ends every open choice ``error``; ``close()`` ends
  every choice that never finished (``error`` after a bad chunk, else ``incomplete`` /
  ``stream_cut``). A choice first seen after every choice seen so far has finished is ignored
  (fail closed).
* A tool call that never got a name cannot start (a call names its tool): at its choice's
  normal ``finish_reason`` the response is voided instead (``error`` / ``unnamed_call``), so the
  call leaves a trace and its siblings do not act without it.
* The deprecated ``delta.function_call`` (``{name, arguments}``, ``finish_reason:
  "function_call"``), still streamed by compatible servers, is one call per choice: item id
  ``"<choice>:function_call"``, call id ``synthetic:<item_id>`` (the protocol gives none). It
  ends like a tool call, at its choice's ``finish_reason``.

Text, reasoning, refusals and usage are ignored. Custom (non-function) tool calls are ignored
with an anomaly. A payload with an unknown
``type`` and no ``choices`` carries no call data: it is ignored and counted
(``unknown_events``). A chunk of the wrong structure
raises :class:`AdapterError`; after that the adapter refuses further chunks and ``close()`` ends
the open response with status ``error``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from processor.adapters.base import OpenCall, StreamAdapter, TurnContext
from processor.adapters.fields import MAX_ID, MAX_NAME, Fields, shown
from processor.adapters.providers import CHAT
from processor.adapters.verdicts import (
    AFTER_STOP,
    ALTERNATIVE,
    UNNAMED_CALL,
    alternative_response_id,
    is_chosen,
)
from processor.core.events import FragmentEvent, ResponseStatus

PROVIDER: Final = "openai-chat"

_IMPLICIT: Final = "_"
_LEGACY: Final = "function_call"
"""The slot of the deprecated ``delta.function_call`` (one per choice)."""
_CONTENT_FILTER: Final = "content_filter"

_HARMLESS_TYPES: Final = frozenset({"ping", "keepalive"})
STOP_REASONS: Final = CHAT.stops
_F: Final = Fields(PROVIDER)


# --------------------------------------------------------------------------- small readers


def _filtered(choice: dict[str, Any]) -> bool:
    """Azure OpenAI: a ``content_filter_results`` category with ``filtered: true``."""
    results = choice.get("content_filter_results")
    if results is None:
        return False
    if not isinstance(results, dict):
        raise _F.bad("field 'content_filter_results' is not an object")
    return any(isinstance(r, dict) and r.get("filtered") is True for r in results.values())


def _arguments(function: dict[str, Any]) -> str:
    value = function.get("arguments")
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):  # a few servers send the object itself
        return _F.json_text(value, "field 'arguments' of a tool call")
    raise _F.bad("field 'arguments' of a tool call is not a string or an object")


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
    response_id: str
    chosen: bool
    finish: str | None = None
    stopped: bool = False
    """A normal ``finish_reason`` came; ``completed`` waits for the end of the stream."""
    ended: bool = False
    """Its ``response.ended`` was written."""
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

    @property
    def finished(self) -> bool:
        """Every choice seen stopped or ended: later content starts no choice."""
        return self.ended or (
            bool(self.choices) and all(c.stopped or c.ended for c in self.choices.values())
        )


class OpenAIChatAdapter(StreamAdapter):
    """One Chat Completions stream → fragment events (see the module docstring)."""

    provider: ClassVar[str] = PROVIDER
    unit = "chunk"
    failure_ending = "bad_chunk"

    def __init__(
        self,
        ctx: TurnContext,
        *,
        now: Callable[[], float] | None = None,
        alternative: int | None = 0,
    ) -> None:
        super().__init__(ctx, now=now, alternative=alternative)
        self._current: _Response | None = None
        self._responses = 0

    # -- the stream --------------------------------------------------------------------------

    def _end_open(self, status: ResponseStatus, reason: str) -> list[FragmentEvent]:
        current = self._current
        if current is None or current.ended:
            return []
        out = [
            self._end(current, choice, status, reason)
            for choice in current.choices.values()
            if not choice.ended and self.endable(choice.response_id)
        ]
        current.ended = True
        return out

    def _settle(self) -> list[FragmentEvent]:
        return self._settle_response(self._current) if self._current is not None else []

    def _settle_response(self, response: _Response) -> list[FragmentEvent]:
        """The stream ended: every choice that stopped normally ends ``completed``."""
        out = [
            self._end(response, choice, *STOP_REASONS.judge(choice.finish))
            for choice in response.choices.values()
            if choice.stopped and not choice.ended
        ]
        if all(c.ended for c in response.choices.values()):
            response.ended = True
        return out

    # -- routing ---------------------------------------------------------------------------

    def _read_event(self, chunk: dict[str, Any]) -> list[FragmentEvent]:
        kind = chunk.get("type")
        if kind == "error" or chunk.get("error") is not None:
            return self._on_error(chunk)
        if kind is not None:
            if kind in _HARMLESS_TYPES:
                return []
            if "choices" in chunk:
                raise self.unknown(kind)
            return self.ignore_unknown(kind)
        choices = chunk.get("choices")
        if choices is None:
            self.anomaly("chunk without choices ignored")
            return []
        if not isinstance(choices, list):
            raise _F.bad("field 'choices' is not a list")
        out: list[FragmentEvent] = []
        response = self._response_for(chunk, out, has_choices=bool(choices))
        for choice in choices:
            if not isinstance(choice, dict):
                raise _F.bad("a choice is not an object")
            if response is not None:
                out.extend(self._on_choice(response, choice))
        return out

    def _response_for(
        self, chunk: dict[str, Any], out: list[FragmentEvent], *, has_choices: bool
    ) -> _Response | None:
        chunk_id = _F.ident(chunk, "id", MAX_ID, "a chunk")
        current = self._current
        if current is not None and (not current.finished or chunk_id in (None, current.chunk_id)):
            if chunk_id is not None and chunk_id != current.chunk_id:
                self.anomaly("chunk id changed within a response")
            return current
        if not has_choices:
            return current
        if current is not None:  # the next stream of a concatenation: the previous one ended
            out.extend(self._settle_response(current))
        self._responses += 1
        response_id = chunk_id or f"chat-stream-{self._responses}"
        self._current = _Response(response_id, chunk_id)
        return self._current

    # -- choices and tool call entries -----------------------------------------------------

    def _on_choice(self, response: _Response, raw: dict[str, Any]) -> list[FragmentEvent]:
        index = _F.opt(raw, "index", int, "a choice") or 0
        choice = response.choices.get(index)
        if choice is None and not response.finished:
            chosen = is_chosen(self.alternative, index)
            rid = response.response_id
            choice = _Choice(index, rid if chosen else alternative_response_id(rid, index), chosen)
            response.choices[index] = choice
        delta = _F.opt(raw, "delta", dict, "a choice") or {}
        tool_calls = _F.opt(delta, "tool_calls", list, "a delta") or []
        finish = _F.opt(raw, "finish_reason", str, "a choice")
        legacy = _F.opt(delta, "function_call", dict, "a delta")
        filtered = _filtered(raw)
        if choice is None or choice.ended:
            if tool_calls or finish or legacy:
                self.anomaly("chunk after the choice finished ignored")
            return []
        if choice.stopped:
            return self._after_stop(response, choice, delta, finish, filtered)
        out: list[FragmentEvent] = []
        for entry in tool_calls:
            if not isinstance(entry, dict):
                raise _F.bad("a tool call is not an object")
            out.extend(self._on_entry(response, choice, entry))
        if legacy is not None:
            out.extend(self._on_function_call(response, choice, legacy))
        if finish:
            out.extend(self._on_finish(response, choice, finish))
        if filtered and not choice.ended:
            self.anomaly("content_filter_results filtered the choice")
            out.append(self._end(response, choice, ResponseStatus.FAILED, _CONTENT_FILTER))
        return out

    def _after_stop(
        self,
        response: _Response,
        choice: _Choice,
        delta: dict[str, Any],
        finish: str | None,
        filtered: bool,
    ) -> list[FragmentEvent]:
        """A chunk for a choice that stopped normally, before the end of the stream: a voiding
        tail event voids it (its calls ended and wait in the Assembler for the verdict)."""
        if filtered:
            self.anomaly("content_filter_results filtered the choice after its finish_reason")
            return [self._end(response, choice, ResponseStatus.FAILED, _CONTENT_FILTER)]
        if finish is not None and finish != choice.finish:
            status, reason = STOP_REASONS.judge(finish)
            if status is ResponseStatus.COMPLETED:
                status, reason = ResponseStatus.ERROR, AFTER_STOP
            self.anomaly("a second finish_reason after the choice stopped")
            return [self._end(response, choice, status, reason)]
        if delta.get("tool_calls") or delta.get("function_call") or delta.get("content"):
            self.anomaly("content after the choice's finish_reason")
            return [self._end(response, choice, ResponseStatus.ERROR, AFTER_STOP)]
        if finish is not None:
            self.anomaly("repeated finish_reason ignored")
        return []

    def _on_entry(
        self, response: _Response, choice: _Choice, raw: dict[str, Any]
    ) -> list[FragmentEvent]:
        if raw.get("type") not in (None, "function"):
            self.anomaly("non-function tool call ignored")
            return []
        index = _F.opt(raw, "index", int, "a tool call")
        function = _F.opt(raw, "function", dict, "a tool call") or {}
        call_id = _F.ident(raw, "id", MAX_ID, "a tool call")
        tool = _F.ident(function, "name", MAX_NAME, "a function")
        text = _arguments(function)
        entry = self._entry_for(choice, _IMPLICIT if index is None else str(index), call_id)
        choice.last = entry
        if call_id is not None and entry.call_id is None:
            entry.call_id = call_id
        self._set_tool(entry, tool)
        if text:
            entry.held.append(text)
        return self._release(response, entry)

    def _on_function_call(
        self, response: _Response, choice: _Choice, function: dict[str, Any]
    ) -> list[FragmentEvent]:
        """The deprecated ``delta.function_call``: the choice's one call, without an id."""
        tool = _F.ident(function, "name", MAX_NAME, "a function_call")
        text = _arguments(function)
        entry = self._entry_for(choice, _LEGACY, None)
        if entry.call_id is None:
            entry.call_id = f"synthetic:{entry.item_id}"
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
            response_id = response.choices[entry.choice].response_id
            call = entry.call = OpenCall(response_id, entry.item_id, entry.call_id, entry.tool)
            out.append(self.started(call))
        out.extend(self.delta(call, text) for text in entry.held)
        entry.held.clear()
        return out

    # -- finishing -------------------------------------------------------------------------

    def _on_finish(self, response: _Response, choice: _Choice, finish: str) -> list[FragmentEvent]:
        """The choice's stop marker: its calls' terminals when it is normal, then its verdict:
        a voiding one at once, ``completed`` held for the end of the stream."""
        choice.finish = finish
        status, reason = STOP_REASONS.judge(finish)
        if status is ResponseStatus.COMPLETED and any(e.tool is None for e in choice.entries):
            # a call the model never named cannot start (a call names its tool), so it cannot
            # reach the ledger; its response is voided instead, visibly, never completed
            self.anomaly("call without a name: its response is void")
            status, reason = ResponseStatus.ERROR, UNNAMED_CALL
        out: list[FragmentEvent] = []
        for entry in choice.entries:
            out.extend(self._end_entry(response, entry, status is ResponseStatus.COMPLETED))
        if status is ResponseStatus.COMPLETED:
            choice.stopped = True
            return out
        out.append(self._end(response, choice, status, reason))
        if all(c.ended for c in response.choices.values()):
            response.ended = True
        return out

    def _end_entry(
        self, response: _Response, entry: _Entry, normal_end: bool
    ) -> list[FragmentEvent]:
        """Release the entry's text; end the call only when its choice acts and ended normally."""
        if entry.tool is None:  # its response is void (_on_finish)
            return []
        if entry.call_id is None:
            entry.call_id = f"synthetic:{entry.item_id}"
        out = self._release(response, entry)
        call = entry.call
        acts = normal_end and response.choices[entry.choice].chosen
        if call is None or call.ended or entry.withheld or not acts:
            return out
        out.extend(self.end_call(call, "finish_reason"))
        return out

    def _on_error(self, chunk: dict[str, Any]) -> list[FragmentEvent]:
        error = chunk.get("error")
        details = error if isinstance(error, dict) else chunk
        code = details.get("code") or details.get("type")
        ended = self._end_open(ResponseStatus.ERROR, shown(code))
        if not ended:
            self.anomaly("error payload outside an open response")
        return ended

    def _end(
        self, response: _Response, choice: _Choice, status: ResponseStatus, reason: str
    ) -> FragmentEvent:
        """One choice's ``response.ended``; an alternative that may not act is ``not_chosen``."""
        choice.ended = True
        if any(entry.call is None for entry in choice.entries):
            self.anomaly("call that never got an id or a name dropped")
        if not choice.chosen:
            status, reason = ResponseStatus.NOT_CHOSEN, ALTERNATIVE
        return self.response_ended(choice.response_id, status, reason)
