"""OpenAI Responses API streams (and compatible servers: Azure, Bedrock Mantle) → fragments.

This module owns the reading of the Responses event vocabulary:

* Identity. ``response.created`` names the response (``response.id``); every later event
  belongs to the latest created response. A ``function_call`` output item is one call: item id
  = ``item.id`` (``#<output_index>`` if a server omits it), call id = ``item.call_id`` (the item
  id if a server omits it), tool = ``item.name`` in namespace ``item.namespace`` (absent or
  null: a bare tool; a namespace is part of the tool's identity). Argument deltas are found
  by ``item_id``, else by ``output_index``; when both are given they must agree.
* Positions. ``seq`` is arrival order per call. ``sequence_number`` is checked per response: an
  already seen number is a replay (a delta is re-emitted at the position it had, so it carries
  the same event id and the Assembler dedupes it; other replayed events are ignored); a gap or a
  reordering withholds the terminal of every call open at that point, so they end inert.
* Terminals. ``response.function_call_arguments.done`` or, if that never came, a completed
  ``response.output_item.done`` ends a call, carrying the provider's full ``arguments`` as the
  cross-check (the Assembler compares it with the streamed text). A call that got no argument
  text at all gets the delta ``{}``. The provider repeats the final arguments: whichever of the
  two finals comes second is compared with the first (or, when the first carried none, with the
  streamed text), as JSON; if they disagree the response ends ``error`` /
  ``arguments_mismatch`` at once, so the call never acts. A ``function_call`` item done with a
  status other than ``completed`` after its call ended forbids a ``completed`` ending: a later
  ``response.completed`` ends the response ``error`` / ``item_incomplete``; so does one naming
  another call id, name or namespace (``call_identity_changed``).
* Response ends (one rule, :mod:`processor.adapters.verdicts`). Only ``response.completed``
  ends a response ``completed``. ``response.incomplete`` is judged by
  ``incomplete_details.reason`` in :data:`STOP_REASONS` (never normal); ``response.failed``
  and a mid-stream ``error`` event end it ``failed`` / ``error`` with the provider's error code;
  a second ``response.created`` while the response is still open (a splice), a bad chunk, or the
  end of the stream end it voiding too. One ``response.ended`` per response; every call still
  open then is inert, and a call that ended waits in the Assembler for ``completed``. Several
  concatenated streams (each starting with ``response.created``, ``sequence_number``
  restarting) are several responses.

Reasoning, text, refusal, audio and hosted-tool events are ignored; ``custom_tool_call`` and
``computer_call`` items are not function calls and are ignored with an anomaly. An event of an
unknown type is ignored and counted (``unknown_events``): the API adds event types. If it
belongs to the function-call vocabulary (``response.function_call…``) or names a call's
``item_id``, it is unknown content inside that call, and the call's terminal is withheld. A known
event with the wrong structure raises :class:`AdapterError`; after that the adapter refuses
further chunks and ``close()`` ends every open response with status ``error``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import orjson

from processor.adapters.base import Handler, OpenCall, StreamAdapter, TurnContext
from processor.adapters.fields import MAX_ID, MAX_NAME, Fields, shown
from processor.adapters.providers import RESPONSES
from processor.adapters.verdicts import (
    ARGUMENTS_MISMATCH,
    SPLICED,
)
from processor.core.events import FragmentEvent, ResponseStatus

PROVIDER: Final = "openai-responses"

_HARMLESS_EXACT: Final = frozenset({"response.in_progress", "response.queued", "keepalive", "ping"})
_HARMLESS_PREFIXES: Final = (
    "response.output_text.",
    "response.content_part.",
    "response.reasoning",
    "response.refusal.",
    "response.audio.",
    "response.audio_transcript.",
    "response.output_audio",
    "response.web_search_call.",
    "response.file_search_call.",
    "response.code_interpreter_call",
    "response.image_generation_call.",
    "response.mcp_call",
    "response.mcp_list_tools.",
    "response.custom_tool_call_input.",
)
_UNSUPPORTED_ITEMS: Final = frozenset({"custom_tool_call", "computer_call"})
_DELTA: Final = "response.function_call_arguments.delta"
_CALL_EVENTS: Final = "response.function_call"
_ITEM_INCOMPLETE: Final = "item_incomplete"
_IDENTITY_CHANGED: Final = "call_identity_changed"
STOP_REASONS: Final = RESPONSES.stops
_F: Final = Fields(PROVIDER)


def _is_harmless(kind: str) -> bool:
    return kind in _HARMLESS_EXACT or kind.startswith(_HARMLESS_PREFIXES)


# --------------------------------------------------------------------------- state


@dataclass
class _Call(OpenCall):
    output_index: int | None = None
    # sequence_number → the seq its delta got, so a replayed delta keeps its event id
    positions: dict[int, int] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)
    # the first provider final seen (arguments.done or output_item.done), for the second one
    final: str | None = None
    has_final: bool = False


@dataclass
class _Response:
    response_id: str
    ended: bool = False
    last_sn: int | None = None
    calls: dict[str, _Call] = field(default_factory=dict)
    by_index: dict[int, _Call] = field(default_factory=dict)
    # a reason found before the end that forbids a completed ending (a call's item incomplete)
    voided: str | None = None

    def open_calls(self) -> list[_Call]:
        return [c for c in self.calls.values() if not c.ended]


class OpenAIResponsesAdapter(StreamAdapter):
    """One Responses stream (or several concatenated) → fragment events."""

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
        self._responses: dict[str, _Response] = {}
        self._current: _Response | None = None
        self._handlers: dict[str, Handler] = {
            "response.created": self._on_created,
            "response.output_item.added": self._on_item_added,
            _DELTA: self._on_delta,
            "response.function_call_arguments.done": self._on_args_done,
            "response.output_item.done": self._on_item_done,
            "response.completed": self._on_completed,
            "response.incomplete": self._on_incomplete,
            "response.failed": self._on_failed,
            "error": self._on_error,
        }

    # -- routing ---------------------------------------------------------------------------

    def _read_event(self, event: dict[str, Any]) -> list[FragmentEvent]:
        kind = event.get("type")
        if not isinstance(kind, str):
            raise _F.bad("event has no type")
        handler = self._handlers.get(kind)
        if kind != "response.created" and self._is_replay(event):
            return self._on_replay(kind, event)
        if handler is None and not _is_harmless(kind):
            return self._on_unknown(kind, event)
        return handler(event) if handler is not None else []

    def _on_unknown(self, kind: str, event: dict[str, Any]) -> list[FragmentEvent]:
        """Ignored and counted; inside a call (its vocabulary or its item id) it withholds it."""
        out = self.ignore_unknown(kind)
        current = self._current
        if current is None or current.ended:
            return out
        item_id = event.get("item_id")
        call = current.calls.get(item_id) if isinstance(item_id, str) else None
        if call is None and kind.startswith(_CALL_EVENTS):
            output_index = event.get("output_index")
            call = current.by_index.get(output_index) if isinstance(output_index, int) else None
            if call is None:
                for open_call in current.open_calls():
                    self.withhold(open_call, "unknown function-call event")
                return out
        if call is not None:
            self.withhold(call, "unknown event inside a call")
        return out

    def _end_open(self, status: ResponseStatus, reason: str) -> list[FragmentEvent]:
        current = self._current
        if current is None or current.ended or not self.endable(current.response_id):
            return []
        return [self._end(current, status, reason)]

    def _live(self) -> _Response | None:
        """The response later events belong to, or None if it has ended (they are ignored)."""
        current = self._current
        if current is None:
            raise _F.bad("event before response.created")
        if current.ended:
            self.anomaly("event after the response ended ignored")
            return None
        return current

    # -- sequence numbers ------------------------------------------------------------------

    def _is_replay(self, event: dict[str, Any]) -> bool:
        """Check ``sequence_number``; True when this event was already seen."""
        sn = _F.opt(event, "sequence_number", int)
        current = self._current
        if sn is None or current is None or current.ended:
            return False
        last = current.last_sn
        if last is not None and sn <= last:
            return True
        if last is not None and sn != last + 1:
            self.anomaly("sequence_number gap: open calls withheld")
            for call in current.open_calls():
                call.withheld = True
        current.last_sn = sn
        return False

    def _on_replay(self, kind: str, event: dict[str, Any]) -> list[FragmentEvent]:
        self.anomaly("replayed sequence_number")
        current = self._current
        sn = _F.opt(event, "sequence_number", int)
        if kind != _DELTA or current is None or sn is None:
            return []
        call = self._find(current, event)
        seq = call.positions.get(sn) if call is not None else None
        if call is None or seq is None:
            return []
        return [self.delta(call, _F.opt(event, "delta", str) or "", seq=seq)]

    # -- responses -------------------------------------------------------------------------

    def _on_created(self, event: dict[str, Any]) -> list[FragmentEvent]:
        response_id = _F.text(_F.obj(event, "response"), "id", MAX_ID)
        current = self._current
        if current is not None and current.response_id == response_id:
            self.anomaly("repeated response.created ignored")
            return []
        out: list[FragmentEvent] = []
        if current is not None and not current.ended:
            self.anomaly("response.created while the previous response was open")
            out.append(self._end(current, ResponseStatus.ERROR, SPLICED))
        known = self._responses.get(response_id)
        if known is not None:
            self.anomaly("response.created for an earlier response ignored")
            self._current = known
            return out
        self._current = _Response(response_id, last_sn=_F.opt(event, "sequence_number", int))
        self._responses[response_id] = self._current
        return out

    def _on_completed(self, event: dict[str, Any]) -> list[FragmentEvent]:
        response = self._terminal_response(event)
        if response is None:
            return []
        if response.open_calls():
            self.anomaly("response completed with calls that never ended")
        if response.voided is not None:
            return [self._end(response, ResponseStatus.ERROR, response.voided)]
        return [self._end(response, *STOP_REASONS.judge("completed"))]

    def _on_incomplete(self, event: dict[str, Any]) -> list[FragmentEvent]:
        response = self._terminal_response(event)
        if response is None:
            return []
        details = _F.obj(event, "response").get("incomplete_details")
        code = details.get("reason") if isinstance(details, dict) else None
        status, reason = STOP_REASONS.judge(code)
        if status is ResponseStatus.COMPLETED:  # an incomplete response is never normal
            status = ResponseStatus.INCOMPLETE
        return [self._end(response, status, reason)]

    def _on_failed(self, event: dict[str, Any]) -> list[FragmentEvent]:
        response = self._terminal_response(event)
        if response is None:
            return []
        error = _F.obj(event, "response").get("error")
        code = error.get("code") if isinstance(error, dict) else None
        return [self._end(response, ResponseStatus.FAILED, shown(code))]

    def _on_error(self, event: dict[str, Any]) -> list[FragmentEvent]:
        error = event.get("error")
        details = error if isinstance(error, dict) else event
        code = details.get("code") or details.get("type")
        ended = self._end_open(ResponseStatus.ERROR, shown(code))
        if not ended:
            self.anomaly("error event outside an open response")
        return ended

    def _terminal_response(self, event: dict[str, Any]) -> _Response | None:
        response_id = _F.text(_F.obj(event, "response"), "id", MAX_ID)
        known = self._responses.get(response_id)
        if known is None or known is not self._current:
            raise _F.bad("terminal event for a response that is not the current one")
        return None if known.ended else known

    def _end(self, response: _Response, status: ResponseStatus, reason: str) -> FragmentEvent:
        response.ended = True
        return self.response_ended(response.response_id, status, reason)

    # -- calls -----------------------------------------------------------------------------

    def _on_item_added(self, event: dict[str, Any]) -> list[FragmentEvent]:
        item = _F.obj(event, "item")
        if not self._is_function_call(item):
            return []
        response = self._live()
        if response is None:
            return []
        output_index = _F.opt(event, "output_index", int)
        item_id = _F.opt(item, "id", str) or f"#{output_index}"
        call_id = _F.opt(item, "call_id", str) or item_id
        tool = _F.text(item, "name", MAX_NAME)
        namespace = _F.opt_text(item, "namespace", MAX_NAME)
        call = _Call(response.response_id, item_id, call_id, tool, output_index=output_index)
        call.namespace = namespace
        started = self.started(call)  # first: an oversized id is a bad chunk, not a conflict
        existing = response.calls.get(item_id)
        if existing is not None:
            self._check_same(existing, call_id, tool, namespace)
            return []
        self._register(response, call)
        return [started]

    def _is_function_call(self, item: dict[str, Any]) -> bool:
        kind = item.get("type")
        if kind in _UNSUPPORTED_ITEMS:
            self.anomaly("unsupported client tool item ignored")
        return kind == "function_call"

    def _register(self, response: _Response, call: _Call) -> None:
        response.calls[call.item_id] = call
        if call.output_index is None:
            return
        clash = response.by_index.get(call.output_index)
        if clash is not None and not clash.ended:
            self.anomaly("two calls at one output_index: the first is withheld")
            clash.withheld = True
        response.by_index[call.output_index] = call

    def _check_same(
        self, call: _Call, call_id: str | None, tool: str | None, namespace: str | None
    ) -> bool:
        """Names, namespaces and ids are set once: a repeat is ignored (True), a conflict
        withholds the end (False; a namespace changes which tool runs)."""
        if (
            (call_id is None or call_id == call.call_id)
            and (tool is None or tool == call.tool)
            and (namespace is None or namespace == call.namespace)
        ):
            return True
        self.withhold(call, "conflicting call id, name or namespace")
        return False

    def _find(self, response: _Response, event: dict[str, Any]) -> _Call | None:
        item_id = _F.opt(event, "item_id", str)
        output_index = _F.opt(event, "output_index", int)
        by_id = response.calls.get(item_id) if item_id else None
        by_index = response.by_index.get(output_index) if output_index is not None else None
        if by_id is not None and by_index is not None and by_id is not by_index:
            self.withhold(by_id, "item_id and output_index disagree")
        call = by_id if item_id else by_index
        if call is None:
            self.anomaly("event for an unknown call item ignored")
        return call

    def _on_delta(self, event: dict[str, Any]) -> list[FragmentEvent]:
        response = self._live()
        call = self._find(response, event) if response is not None else None
        if call is None:
            return []
        text = _F.opt(event, "delta", str)
        if text is None:
            raise _F.bad("field 'delta' missing")
        if call.ended:
            self.anomaly("delta after the call ended ignored")
            return []
        if not text:
            return []
        call.text.append(text)
        delta = self.delta(call, text)
        sn = _F.opt(event, "sequence_number", int)
        if sn is not None:
            call.positions[sn] = delta.seq
        return [delta]

    def _on_args_done(self, event: dict[str, Any]) -> list[FragmentEvent]:
        response = self._live()
        call = self._find(response, event) if response is not None else None
        if response is None or call is None:
            return []
        arguments = _F.opt(event, "arguments", str)
        return self._final(response, call, "response.function_call_arguments.done", arguments)

    def _on_item_done(self, event: dict[str, Any]) -> list[FragmentEvent]:
        item = _F.obj(event, "item")
        if item.get("type") != "function_call":
            return []
        response = self._live()
        if response is None:
            return []
        lookup = {"item_id": item.get("id"), "output_index": event.get("output_index")}
        call = self._find(response, lookup)
        if call is None:
            return []
        same = self._check_same(
            call,
            _F.opt(item, "call_id", str),
            _F.opt(item, "name", str),
            _F.opt(item, "namespace", str),
        )
        if not same and call.ended:  # too late to withhold: the response must not complete
            response.voided = _IDENTITY_CHANGED
        arguments = _F.opt(item, "arguments", str)
        if item.get("status") not in (None, "completed"):
            if call.ended:
                self.anomaly("function_call item done but not completed after its call ended")
                response.voided = _ITEM_INCOMPLETE
                return []
            self.withhold(call, "function_call item done but not completed")
            return []
        return self._final(response, call, "response.output_item.done", arguments)

    def _final(
        self, response: _Response, call: _Call, terminal: str, arguments: str | None
    ) -> list[FragmentEvent]:
        """One provider final: the first ends the call, a later one must agree with it."""
        if call.has_final:
            first = call.final if call.final is not None else "".join(call.text)
            if arguments is not None and not _same_json(first or "{}", arguments):
                self.anomaly("two provider finals of one call disagree")
                return [self._end(response, ResponseStatus.ERROR, ARGUMENTS_MISMATCH)]
            return []
        call.has_final = True
        call.final = arguments or None
        if call.ended:
            return []
        return self._finish_call(call, terminal, arguments)

    def _finish_call(
        self, call: _Call, terminal: str, arguments: str | None
    ) -> list[FragmentEvent]:
        """End ``call`` unless withheld; a call without argument text gets ``{}``."""
        if call.withheld:
            self.anomaly("terminal of a withheld call ignored")
            return []
        return self.end_call(call, terminal, empty=arguments or "{}", arguments=arguments or None)


def _same_json(first: str, second: str) -> bool:
    """Two argument texts mean the same JSON (unparseable text must match exactly)."""
    try:
        return bool(orjson.loads(first) == orjson.loads(second))
    except orjson.JSONDecodeError:
        return first == second
