"""Gemini / Vertex AI ``streamGenerateContent`` chunks → fragment events.

A chunk is ``{"candidates": [{"content": {"parts": [...]}, "finishReason": ...}], "responseId":
..., "usageMetadata": ...}``. Text and thoughts are not published. A ``functionCall`` part
takes one of three shapes:

* classic whole call ``{name, args}`` (Gemini API): started, one delta ``orjson.dumps(args)``,
  ended, at once;
* Vertex streamed call: ``{name, willContinue: true}`` opens it, ``{partialArgs: [...],
  willContinue: true}`` parts continue it, and it ends at an empty ``functionCall: {}`` (the
  explicit terminal) or at the first part without ``willContinue`` (the implicit terminal);
  ``{willContinue: true}`` alone is a no-op;
* ``{name}`` alone: a call without arguments, ``{}``.

Vertex streams arguments as ``{jsonPath, stringValue|numberValue|boolValue|nullValue,
willContinue}`` items, not as JSON text. :class:`~processor.adapters.vertex_args.PartialArgsWriter`
turns them into JSON text as they arrive (see its docstring), so the Assembler's deltas
concatenate to the argument object. An
item that cannot be written in document order makes the response inert (``response.ended`` status
``error``) instead of producing wrong JSON.

Candidates (``candidateCount > 1``) are alternatives of one request, and at most one may act
(:mod:`processor.adapters.verdicts`): the candidate whose ``index`` is the adapter's
``alternative`` (default 0) uses the response id; every other candidate ``i`` is its own response
``<id>~alt<i>``, whose calls are started and streamed but never ended, and which ends
``not_chosen`` / ``alternative``. Each candidate ends at its own ``finishReason``.

Identity: ``responseId`` when present, else a deterministic id from the turn and this adapter's
response counter; ``item_id`` is the call's position in its response; ``call_id`` is
``functionCall.id`` when present, else ``"{response_id}:{position}"``. Gemini has no sequence
numbers, so deltas take arrival order.

Verdicts (one rule, :mod:`processor.adapters.verdicts`): :data:`STOP_REASONS` judges each
candidate's ``finishReason``; only ``STOP`` ends it ``completed``, and only at the end of the
stream (``close()``: the last chunk is Gemini's documented end) or when the next response of a
concatenated stream starts; until then another ``finishReason``, content for the candidate
(``after_stop``), an error chunk or a blocked prompt voids it (issue 29). Every other reason (and a
reason not in the table) voids it at once with the raw reason; a blocked prompt ends it ``failed``
with the ``blockReason``; an ``error`` chunk ends it ``failed`` with the error status. An implicit
terminal is trusted only once the model has moved on (a later part) or the candidate finished with
``STOP``; a call whose part arrives in the same chunk as a voiding ``finishReason`` (a whole call
flagged ``MALFORMED_FUNCTION_CALL``, say) gets no terminal at all, since the verdict may concern
that very part. A call that ended earlier waits in the Assembler for the verdict.

Finals reconcile: whole ``args`` repeating a streamed call's id become that call's
``call.ended`` cross-check when its terminal has not been emitted yet (the Assembler fails it
``arguments_mismatch`` if they differ from the streamed text), and must mean the same JSON when
it has, or the response ends ``error`` / ``arguments_mismatch``.

Extensibility: a chunk with none of the known top-level keys is ignored and counted
(``unknown_events``); an unknown field in a ``functionCall`` withholds that call's terminal, an
unknown field in a partial argument makes the response inert. A chunk the adapter cannot read
raises :class:`AdapterError`; the adapter then refuses the rest of the stream and ends the open
response as ``error`` (at ``close()`` or the next ``feed``).

Why one module: the adapter is one state machine over one stream (open candidates, their
responses, the streamed call of each, the calls that wait for a verdict), and its rules
interlock: whether a part may end a call depends on the candidate's ``finishReason`` in the same
chunk, reconciling whole ``args`` depends on the streamed call's state, a voiding reason reaches
every call of the candidate. Split across modules, each rule would read another module's private
state. What stands apart, writing Vertex's ``partialArgs`` as JSON text, is
:mod:`processor.adapters.vertex_args`; the verdict tables are :mod:`processor.adapters.providers`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import orjson

from processor.adapters.base import OpenCall, StreamAdapter, TurnContext
from processor.adapters.fields import MAX_NAME, Fields, shown
from processor.adapters.providers import GEMINI
from processor.adapters.verdicts import (
    AFTER_STOP,
    ALTERNATIVE,
    ARGUMENTS_MISMATCH,
    alternative_response_id,
    is_chosen,
)
from processor.adapters.vertex_args import PartialArgsError, PartialArgsWriter
from processor.core.events import FragmentEvent, ResponseStatus

_MAX_PROVIDER_ID: Final = 200
"""Gemini's own ids (``responseId``, ``functionCall.id``) are refused above this length, which
keeps a derived call id ``{response_id}:{position}`` within the wire contract's bound."""
_F: Final = Fields("gemini")

_ENUM_WORD: Final = re.compile(r"[A-Z][A-Z0-9_]{0,63}")

STOP_REASONS: Final = GEMINI.stops
_FUNCTION_CALL_KEYS: Final = frozenset({"name", "args", "id", "partialArgs", "willContinue"})
_KNOWN_CHUNK_KEYS: Final = frozenset(
    {"candidates", "usageMetadata", "promptFeedback", "responseId", "modelVersion", "createTime"}
)


# --------------------------------------------------------------------------- the adapter


@dataclass
class _StreamedCall:
    """A Vertex streamed call between its start and its terminal."""

    call: OpenCall
    writer: PartialArgsWriter
    provider_id: str | None
    withheld: bool = False


@dataclass
class _Response:
    """One candidate of one provider response: its calls and its verdict."""

    response_id: str
    chosen: bool
    next_item: int = 0
    open: _StreamedCall | None = None
    abandoned: int = 0
    deferred: list[OpenCall] = field(default_factory=list)
    # provider call id → (tool, whole args text) of a whole call, or the streamed call itself
    known_ids: dict[str, tuple[str, str] | OpenCall] = field(default_factory=dict)
    stopped: str | None = None
    """The normal ``finishReason`` seen; ``completed`` waits for the end of the stream."""
    finished: bool = False
    """Its ``response.ended`` was written."""

    @property
    def unterminated(self) -> int:
        """Calls of this response that have no trusted terminal yet."""
        return self.abandoned + len(self.deferred) + (1 if self.open is not None else 0)


@dataclass
class _Group:
    """One provider response (one ``responseId``): its candidates, each an alternative."""

    response_id: str
    provider_id: str | None
    candidates: dict[int, _Response] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return bool(self.candidates) and all(c.finished for c in self.candidates.values())

    @property
    def stopped(self) -> bool:
        """Every candidate stopped or finished: a new ``responseId`` starts the next stream."""
        return bool(self.candidates) and all(
            c.finished or c.stopped is not None for c in self.candidates.values()
        )


class GeminiAdapter(StreamAdapter):
    """One Gemini / Vertex ``streamGenerateContent`` stream (or several, concatenated)."""

    provider: ClassVar[str] = "gemini"
    unit = "chunk"
    refusal = "ignore"

    def __init__(
        self,
        ctx: TurnContext,
        *,
        now: Callable[[], float] | None = None,
        alternative: int | None = 0,
    ) -> None:
        super().__init__(ctx, now=now, alternative=alternative)
        self._current: _Group | None = None
        self._finished_ids: set[str] = set()

    # -- the stream --------------------------------------------------------------------------

    def _end_open(self, status: ResponseStatus, reason: str) -> list[FragmentEvent]:
        group = self._current
        if group is None:
            return []
        out = [
            self._finish(group, resp, status, reason)
            for resp in group.candidates.values()
            if not resp.finished and self.endable(resp.response_id)
        ]
        return out

    def _settle(self) -> list[FragmentEvent]:
        return self._settle_group(self._current) if self._current is not None else []

    def _settle_group(self, group: _Group) -> list[FragmentEvent]:
        """The stream ended after the last chunk: every candidate that stopped with a normal
        ``finishReason`` ends ``completed`` (issue 29: the stream's last word decides)."""
        return [
            self._finish(group, resp, *STOP_REASONS.judge(resp.stopped))
            for resp in group.candidates.values()
            if resp.stopped is not None and not resp.finished
        ]

    # -- chunks ----------------------------------------------------------------------------

    def _read_event(self, chunk: dict[str, Any]) -> list[FragmentEvent]:
        if "error" in chunk:
            return self._provider_error(chunk["error"])
        if not _KNOWN_CHUNK_KEYS.intersection(chunk):
            return self.ignore_unknown("chunk without candidates, usage or response id")
        provider_id = _F.opt_text(chunk, "responseId", _MAX_PROVIDER_ID)
        candidates = _candidates(chunk)
        blocked = _block_reason(chunk)
        if not candidates and blocked is None:
            return []
        out: list[FragmentEvent] = []
        content = any(_parts(c) for _, c in candidates)
        group = self._group_for(provider_id, out, content=content)
        if group is None:
            return out
        if not candidates:
            if not group.candidates:
                self._candidate_response(group, self.alternative or 0)
            out.extend(self._end_open(ResponseStatus.FAILED, shown(blocked, "prompt_blocked")))
            return out
        for index, candidate in candidates:
            resp = group.candidates.get(index)
            if resp is None:
                resp = self._candidate_response(group, index)
            if resp.finished:
                self.anomaly("chunk for a candidate that already finished ignored")
                continue
            if resp.stopped is not None:
                out.extend(self._after_stop(group, resp, candidate))
                continue
            try:
                self._candidate(group, resp, candidate, out)
            except PartialArgsError as exc:
                self.anomaly(f"response made inert: {exc.detail}")
                out.append(self._finish(group, resp, ResponseStatus.ERROR, exc.reason))
        return out

    def _candidate_response(self, group: _Group, index: int) -> _Response:
        chosen = is_chosen(self.alternative, index)
        rid = group.response_id if chosen else alternative_response_id(group.response_id, index)
        resp = group.candidates[index] = _Response(response_id=rid, chosen=chosen)
        return resp

    def _group_for(
        self, provider_id: str | None, out: list[FragmentEvent], *, content: bool
    ) -> _Group | None:
        """The response a chunk belongs to. After every candidate stopped, a chunk with another
        ``responseId`` (or, when the provider names none, with content) starts the next one;
        the same ``responseId``, or a chunk without one nor content, is the stopped one's tail."""
        current = self._current
        if current is not None and not current.finished:
            if provider_id is not None and provider_id == current.provider_id:
                return current
            if provider_id is None and not (current.stopped and content):
                return current
            if current.stopped:  # the next stream of a concatenation: the previous one ended
                out.extend(self._settle_group(current))
            else:
                self.anomaly("a new responseId arrived before finishReason")
                out.extend(self._end_open(ResponseStatus.INCOMPLETE, "superseded"))
        if provider_id is not None and provider_id in self._finished_ids:
            self.anomaly("chunk ignored: its response already finished")
            return None
        response_id = self.next_response_id("response", provider_id)
        self._current = _Group(response_id=response_id, provider_id=provider_id)
        return self._current

    def _provider_error(self, error: object) -> list[FragmentEvent]:
        status = error.get("status") if isinstance(error, dict) else None
        word = status if isinstance(status, str) and _ENUM_WORD.fullmatch(status) else "unknown"
        self.anomaly(f"provider error chunk ({word})")
        return self._end_open(ResponseStatus.FAILED, word)

    def _candidate(
        self, group: _Group, resp: _Response, candidate: dict[str, Any], out: list[FragmentEvent]
    ) -> None:
        """Append the candidate's events part by part, so an inert ending keeps earlier ones.

        A call whose part arrives in the same chunk as a voiding ``finishReason`` gets no
        terminal (the verdict may concern that very part), nor does a call of an alternative
        that may not act.
        """
        finish = candidate.get("finishReason")
        if finish is not None and not isinstance(finish, str):
            raise _F.bad("finishReason is not a string")
        status = STOP_REASONS.judge(finish)[0] if finish else None
        may_end = resp.chosen and status in (None, ResponseStatus.COMPLETED)
        for part in _parts(candidate):
            out.extend(self._part(resp, part, may_end))
        if finish is not None:
            out.extend(self._finish_reason(group, resp, finish))

    # -- parts -----------------------------------------------------------------------------

    def _part(self, resp: _Response, part: dict[str, Any], may_end: bool) -> list[FragmentEvent]:
        fc = part.get("functionCall")
        if fc is not None and not isinstance(fc, dict):
            raise _F.bad("functionCall is not an object")
        if fc is not None and "args" in fc:
            text = _whole_text(fc)
            if self._is_duplicate(resp, _call_id(fc), _tool_name(fc), text):
                return []  # a known call repeated (its final reconciled): the model did not move on
        out: list[FragmentEvent] = []
        if may_end and (fc is not None or part.get("text")):
            out.extend(self._flush(resp))
        if fc is None:
            return out
        if not _FUNCTION_CALL_KEYS.issuperset(fc):
            self.anomaly("unknown field in a functionCall: call withheld")
            may_end = False
        if "args" in fc:
            out.extend(self._whole_call(resp, fc, may_end))
        elif "name" in fc and not self._continues_open(resp, fc):
            out.extend(self._start_streamed(resp, fc, may_end))
        else:
            out.extend(self._continue_streamed(resp, fc, may_end))
        return out

    def _whole_call(
        self, resp: _Response, fc: dict[str, Any], may_end: bool
    ) -> list[FragmentEvent]:
        text = _whole_text(fc)
        provider_id = _call_id(fc)
        self._abandon_open(resp)
        call = self._new_call(resp, fc, provider_id, text)
        out: list[FragmentEvent] = [self.started(call), self.delta(call, text)]
        if may_end:
            out.append(self.ended(call, "whole", text))
        else:
            resp.abandoned += 1
        return out

    def _start_streamed(
        self, resp: _Response, fc: dict[str, Any], may_end: bool
    ) -> list[FragmentEvent]:
        provider_id = _call_id(fc)
        if self._is_duplicate(resp, provider_id, _tool_name(fc), None):
            return []
        self._abandon_open(resp)
        call = self._new_call(resp, fc, provider_id, None)
        resp.open = _StreamedCall(call, PartialArgsWriter(), provider_id)
        return [self.started(call), *self._continue_streamed(resp, fc, may_end)]

    def _continue_streamed(
        self, resp: _Response, fc: dict[str, Any], may_end: bool
    ) -> list[FragmentEvent]:
        streamed = resp.open
        partial = fc.get("partialArgs")
        terminal = fc.get("willContinue") is not True
        if streamed is None:
            if partial or terminal:
                self.anomaly("functionCall continuation without an open call ignored")
            return []
        self._check_identity(streamed, fc)
        if not may_end and not _FUNCTION_CALL_KEYS.issuperset(fc):
            streamed.withheld = True
        text = streamed.writer.feed(partial) if partial is not None else ""
        if terminal:
            text += streamed.writer.finish()
        out: list[FragmentEvent] = []
        if text:
            streamed.call.extra.setdefault("text", []).append(text)
            out.append(self.delta(streamed.call, text))
        if terminal:
            resp.open = None
            if streamed.withheld or not may_end:
                resp.abandoned += 1
            else:
                out.extend(self._terminal(resp, streamed.call, explicit=_is_empty_call(fc)))
        return out

    def _terminal(self, resp: _Response, call: OpenCall, *, explicit: bool) -> list[FragmentEvent]:
        if explicit:
            return [self.ended(call, "empty_function_call", call.extra.get("final"))]
        resp.deferred.append(call)
        return []

    def _flush(self, resp: _Response) -> list[FragmentEvent]:
        """The model moved on (or finished with STOP): deferred implicit terminals are trusted."""
        ended: list[FragmentEvent] = [
            self.ended(call, "last_part", call.extra.get("final")) for call in resp.deferred
        ]
        resp.deferred.clear()
        return ended

    # -- identity --------------------------------------------------------------------------

    def _new_call(
        self, resp: _Response, fc: dict[str, Any], provider_id: str | None, args: str | None
    ) -> OpenCall:
        position = resp.next_item
        resp.next_item += 1
        tool = _tool_name(fc)
        call_id = provider_id or f"{resp.response_id}:{position}"
        call = OpenCall(resp.response_id, str(position), call_id, tool)
        if provider_id is not None:
            resp.known_ids[provider_id] = (tool, args) if args is not None else call
        return call

    def _continues_open(self, resp: _Response, fc: dict[str, Any]) -> bool:
        """A part with a name continues the open call only when it repeats that call's id."""
        open_id = resp.open.provider_id if resp.open is not None else None
        return open_id is not None and _call_id(fc) == open_id

    def _check_identity(self, streamed: _StreamedCall, fc: dict[str, Any]) -> None:
        """Names and ids are set once: a different one on a continuation is a conflict."""
        name = fc.get("name")
        if name is not None and name != streamed.call.tool:
            raise PartialArgsError("identity_conflict", "a continuation names another tool")
        provider_id = _call_id(fc)
        if provider_id is None or provider_id == streamed.provider_id:
            return
        if streamed.provider_id is not None:
            raise PartialArgsError("identity_conflict", "a continuation carries another call id")
        self.anomaly("a call id arrived after the call started; the positional id is kept")

    def _is_duplicate(
        self, resp: _Response, provider_id: str | None, tool: str, args: str | None
    ) -> bool:
        """A call id seen before in this response: the same call again, or a conflict.

        Whole arguments repeating a streamed call (the provider's final after ``partialArgs``)
        are reconciled: before that call's terminal they become its ``call.ended`` cross-check
        (the Assembler fails it ``arguments_mismatch`` if they differ from the streamed text);
        after it they must mean the same JSON, or the response ends ``arguments_mismatch``.
        """
        if provider_id is None or provider_id not in resp.known_ids:
            return False
        known = resp.known_ids[provider_id]
        if isinstance(known, OpenCall):
            if known.tool != tool:
                raise PartialArgsError("identity_conflict", "a call id was reused for another call")
            if args is None:
                self.anomaly("duplicate functionCall part ignored")
                return True
            if known.ended and not _same_json("".join(known.extra.get("text", [])), args):
                raise PartialArgsError(ARGUMENTS_MISMATCH, "whole args contradict the partials")
            known.extra["final"] = args
            self.anomaly("whole args repeating a streamed call: kept as its cross-check")
            return True
        if known != (tool, args):
            raise PartialArgsError("identity_conflict", "a call id was reused for another call")
        self.anomaly("duplicate functionCall part ignored")
        return True

    def _abandon_open(self, resp: _Response) -> None:
        if resp.open is not None:
            self.anomaly("a new call started before the open call's terminal")
            resp.abandoned += 1
            resp.open = None

    # -- the end of a response -------------------------------------------------------------

    def _finish_reason(self, group: _Group, resp: _Response, finish: str) -> list[FragmentEvent]:
        """The candidate's stop marker: a voiding verdict at once, ``completed`` held for the
        end of the stream (a later chunk may still void it)."""
        status, reason = STOP_REASONS.judge(finish)
        if status is not ResponseStatus.COMPLETED:
            return [self._finish(group, resp, status, reason)]
        out: list[FragmentEvent] = self._flush(resp) if resp.chosen else []
        resp.stopped = finish
        return out

    def _after_stop(
        self, group: _Group, resp: _Response, candidate: dict[str, Any]
    ) -> list[FragmentEvent]:
        """A chunk for a candidate that stopped normally, before the end of the stream: another
        ``finishReason`` or any content voids it; the same ``finishReason`` again is harmless."""
        finish = candidate.get("finishReason")
        if finish is not None and not isinstance(finish, str):
            raise _F.bad("finishReason is not a string")
        if finish is not None and finish != resp.stopped:
            status, reason = STOP_REASONS.judge(finish)
            if status is ResponseStatus.COMPLETED:
                status, reason = ResponseStatus.ERROR, AFTER_STOP
            self.anomaly("a second finishReason after the candidate stopped")
            return [self._finish(group, resp, status, reason)]
        if any(
            part.get("functionCall") is not None or part.get("text") for part in _parts(candidate)
        ):
            self.anomaly("content after the candidate's finishReason")
            return [self._finish(group, resp, ResponseStatus.ERROR, AFTER_STOP)]
        return []

    def _finish(
        self, group: _Group, resp: _Response, status: ResponseStatus, reason: str
    ) -> FragmentEvent:
        inert = resp.unterminated
        resp.finished = True
        resp.open = None
        resp.deferred.clear()
        if group.finished and group.provider_id is not None:
            self._finished_ids.add(group.provider_id)
        if not resp.chosen:
            status, reason = ResponseStatus.NOT_CHOSEN, ALTERNATIVE
        return self.response_ended(resp.response_id, status, reason, inert=inert)


def _same_json(first: str, second: str) -> bool:
    try:
        return bool(orjson.loads(first or "{}") == orjson.loads(second))
    except orjson.JSONDecodeError:
        return False


# --------------------------------------------------------------------------- field readers


def _parts(candidate: dict[str, Any]) -> list[dict[str, Any]]:
    content = candidate.get("content")
    if content is None:
        return []
    parts = content.get("parts", []) if isinstance(content, dict) else None
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise _F.bad("content.parts is not a list of objects")
    return parts


def _tool_name(fc: dict[str, Any]) -> str:
    return _F.text(fc, "name", MAX_NAME, "functionCall")


def _call_id(fc: dict[str, Any]) -> str | None:
    """``functionCall.id``; absent or ``""`` is None."""
    return _F.ident(fc, "id", _MAX_PROVIDER_ID, "functionCall")


def _is_empty_call(fc: dict[str, Any]) -> bool:
    """The explicit terminal: no name, no arguments (an id alone is allowed)."""
    return not fc.get("name") and not fc.get("partialArgs") and "args" not in fc


def _whole_text(fc: dict[str, Any]) -> str:
    """The JSON text of a whole call's ``args`` (absent or null: ``{}``)."""
    args = fc.get("args")
    if args is None:
        args = {}
    if not isinstance(args, dict) or "partialArgs" in fc:
        raise _F.bad("functionCall args is not an object")
    return _F.json_text(args, "functionCall args")


def _block_reason(chunk: dict[str, Any]) -> object:
    """``promptFeedback.blockReason`` (None when the prompt was not blocked)."""
    feedback = chunk.get("promptFeedback")
    return feedback.get("blockReason") if isinstance(feedback, dict) else None


def _candidates(chunk: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """``(index, candidate)`` for every candidate of the chunk (``index`` absent: 0)."""
    candidates = chunk.get("candidates")
    if candidates is None:
        return []
    if not isinstance(candidates, list) or not all(isinstance(c, dict) for c in candidates):
        raise _F.bad("candidates is not a list of objects")
    indexed = [(_F.opt(c, "index", int, "a candidate") or 0, c) for c in candidates]
    if len({index for index, _ in indexed}) != len(indexed):
        raise _F.bad("two candidates of one chunk share an index")
    return indexed
