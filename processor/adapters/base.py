"""What every provider adapter shares: the turn context, the fail-closed stream, event builders.

An adapter is pure and stateful per provider stream: ``feed(chunk)`` takes one provider event (a
decoded JSON object, or its JSON text) and returns the fragment events it implies; ``close()``
ends the stream: it writes the ``completed`` verdicts held for the stream's end (a response's
verdict is its stream's last word) and makes every call still open inert through
``response.ended``. Adapters name calls and cut their argument text into positioned deltas; they
never assemble or judge arguments.

Failing closed is :class:`StreamAdapter`'s job, not each adapter's. A subclass reads one event in
``_read_event`` and ends its open responses in ``_end_open``; the base turns whatever goes wrong
while reading (an :class:`AdapterError`, a pydantic ``ValidationError``, an unexpected
``KeyError``, ``TypeError``, ``ValueError``, ``AttributeError`` or ``IndexError``) into an
``AdapterError`` and marks the stream failed. From then on, and after ``close()``, every chunk is
refused (see :attr:`StreamAdapter.refusal`), and the open responses end with status ``error``
and the reason :attr:`StreamAdapter.failure_ending`.

Event ids are deterministic (derived from the turn, the call key, the kind and the position), so a
reconnect replay of the same provider events produces the same ids and the Assembler dedupes it.
The builders (``started``, ``delta``, ``ended``, ``response_ended``) refuse what the wire contract
refuses (an id over 256 characters, a tool name over 128) as an ``AdapterError`` ``bad_chunk``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from processor.adapters.fields import bad_chunk, decode_object, shown
from processor.adapters.verdicts import STREAM_CUT
from processor.core.errors import AdapterError
from processor.core.events import (
    CallDelta,
    CallEnded,
    CallStarted,
    FragmentEvent,
    Ident,
    ResponseEnded,
    ResponseStatus,
    TurnStarted,
    describe_validation_error,
    stable_id,
)

_UNEXPECTED: Final = (KeyError, TypeError, ValueError, AttributeError, IndexError)
_RESPONSE_ID: Final[TypeAdapter[str]] = TypeAdapter(Ident)  # ResponseEnded.response_id's type

T = TypeVar("T")
Record = TypeVar("Record", bound=BaseModel)

Handler = Callable[[dict[str, Any]], list[FragmentEvent]]
"""Reads one kind of provider event (adapters that route by event type keep a table of these)."""

Refusal = Literal["raise", "ignore"]
"""How an adapter treats a chunk fed after it failed or closed (see ``StreamAdapter.refusal``)."""


@dataclass(frozen=True)
class TurnContext:
    """Who and where: the authenticated turn this provider stream belongs to."""

    tenant: str
    turn_id: str
    actor: str
    session: str | None = None

    def __post_init__(self) -> None:
        """Ids outside the wire contract's alphabet fail here, before any event is built."""
        try:
            TurnStarted(
                command_id="context",
                issued_by="adapter",
                issued_at=0.0,
                tenant=self.tenant,
                turn_id=self.turn_id,
                actor=self.actor,
                session=self.session,
            )
        except ValidationError as exc:
            detail = f"turn context: {describe_validation_error(exc)}"
            raise AdapterError("bad_context", detail) from None


@dataclass
class OpenCall:
    """An adapter's view of one call it has started and not yet ended.

    ``withheld`` marks a call whose terminal must not be emitted (a conflicting name or id, a gap
    in the provider's numbering): it stays open and becomes inert with its response.
    """

    response_id: str
    item_id: str
    call_id: str
    tool: str
    next_seq: int = 1
    ended: bool = False
    withheld: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    namespace: str | None = None  # the tool's namespace, where the protocol names one


class StreamAdapter(ABC):
    """One provider stream (one HTTP response, or several concatenated) → fragment events."""

    provider: ClassVar[str]
    unit: ClassVar[str] = "event"
    """What the protocol calls one provider payload, in messages ("event", "chunk")."""
    cut_reason: ClassVar[str] = STREAM_CUT
    """The ``response.ended`` reason (``incomplete``) of a response the stream ended first."""
    refusal: ClassVar[Refusal] = "raise"
    """A chunk after a failure or ``close()``: ``"raise"`` refuses it with AdapterError
    ``adapter_failed`` / ``adapter_closed``; ``"ignore"`` records an anomaly, returns nothing
    and, after a failure, ends the open responses at once (a caller that keeps feeding instead of
    calling ``close()`` still sees them end)."""
    failure_ending: ClassVar[str] = "adapter_error: {reason}"
    """The ``response.ended`` reason (``error``) of a response cut by a failure; ``{reason}`` is
    the reason code of the first AdapterError the stream raised."""

    def __init__(
        self,
        ctx: TurnContext,
        *,
        now: Callable[[], float] | None = None,
        alternative: int | None = 0,
    ) -> None:
        self.ctx = ctx
        self._now = now or (lambda: 0.0)
        self.alternative = alternative
        """Which alternative of a multi-alternative response may act (``None``: none); see
        :mod:`processor.adapters.verdicts`. Protocols whose responses have one alternative
        (Responses, Anthropic, Bedrock) ignore it."""
        self.anomalies: list[str] = []
        self.unknown_events = 0
        """Provider events of a type this adapter does not know, ignored (they named no call)."""
        self._failure_reason: str | None = None
        self._closed = False
        self._responses_opened = 0

    # -- what a subclass provides ------------------------------------------------------------

    @abstractmethod
    def _read_event(self, event: dict[str, Any]) -> list[FragmentEvent]:
        """Read one decoded provider event; raise AdapterError for one that cannot be read."""

    @abstractmethod
    def _end_open(self, status: ResponseStatus, reason: str) -> list[FragmentEvent]:
        """End every response still open with ``status`` and ``reason`` (none open: ``[]``)."""

    def _cut_ending(self) -> tuple[ResponseStatus, str]:
        """How ``close()`` ends a response the stream cut short (no failure)."""
        return ResponseStatus.INCOMPLETE, self.cut_reason

    def _settle(self) -> list[FragmentEvent]:
        """The stream reached its end: write the verdicts held for it.

        A protocol whose documented end is the end of the stream (Chat Completions' ``[DONE]``
        or EOF, Gemini's last chunk, Bedrock's ``metadata`` then EOF) holds a normal stop's
        ``completed`` until ``close()``, so a voiding event between the stop marker and the end
        (an asynchronous content filter's verdict, an exception event) can still void it. The
        default holds nothing (the protocol's end event is its stop marker)."""
        return []

    # -- the interface -------------------------------------------------------------------

    def feed(self, chunk: dict[str, Any] | str | bytes) -> list[FragmentEvent]:
        """Take one provider event as a dict or JSON text. A bad chunk raises AdapterError."""
        if self._stopped:
            return self._refuse()
        if isinstance(chunk, dict):
            return self.feed_event(chunk)
        return self.feed_event(self._framed(lambda: decode_object(chunk, self.provider)))

    def feed_event(self, event: dict[str, Any]) -> list[FragmentEvent]:
        """Take one decoded provider event; return the fragment events it implies."""
        if self._stopped:
            return self._refuse()
        try:
            return self._read_event(event)
        except AdapterError as exc:
            self._mark_failed(exc.reason)
            raise
        except ValidationError as exc:
            raise self._unreadable(describe_validation_error(exc)) from None
        except _UNEXPECTED as exc:
            raise self._unreadable(f"unreadable {self.unit} ({type(exc).__name__})") from None

    def close(self) -> list[FragmentEvent]:
        """The stream is over: a response whose normal stop was held until the end of the
        stream completes (:meth:`_settle`); every other call still open becomes inert via
        ``response.ended``.

        Never raises: a response whose id the wire contract refuses is skipped (see
        :meth:`endable`)."""
        if self._closed:
            return []
        self._closed = True
        if self._failure_reason is not None:
            return self._end_open(ResponseStatus.ERROR, self._failure_reason)
        return self._settle() + self._end_open(*self._cut_ending())

    @staticmethod
    def endable(response_id: str) -> bool:
        """Whether ``close()`` can end this response: its id fits the wire contract.

        A response opens with the provider's id before any event is built. When that id is
        refused (a control character, over 256 characters), no event was ever written under it
        (each carries the id, and was refused as a bad chunk), so nothing waits for its end;
        building one at close would raise out of ``close()`` and leave the other open responses
        unended. Found by the fuzzer (``tests/fuzz``, seed 20261204).
        """
        try:
            _RESPONSE_ID.validate_python(response_id)
        except ValidationError:
            return False
        return True

    def abort(self, reason: str) -> list[FragmentEvent]:
        """The transport failed around the adapter (an unreadable frame or SSE payload, a
        dropped connection): end every open response as ``error``; nothing open can complete."""
        self._mark_failed(reason)
        return self.close()

    # -- failing closed --------------------------------------------------------------------

    @property
    def _stopped(self) -> bool:
        return self._closed or self._failure_reason is not None

    def _framed(self, decode: Callable[[], T]) -> T:
        """Run a framing step (text or bytes → events); its AdapterError fails the stream."""
        try:
            return decode()
        except AdapterError as exc:
            self._mark_failed(exc.reason)
            raise

    def _mark_failed(self, reason: str) -> None:
        """The stream failed (the first failure's reason code is the one kept)."""
        if self._failure_reason is None:
            self._failure_reason = self.failure_ending.format(reason=reason)

    def _unreadable(self, detail: str) -> AdapterError:
        self._mark_failed("bad_chunk")
        return bad_chunk(self.provider, detail)

    def ignore_unknown(self, kind: object) -> list[FragmentEvent]:
        """An event type this adapter does not know and that carries no call data: the
        provider may add event types, so it is ignored, counted and recorded as an anomaly."""
        self.unknown_events += 1
        self.anomaly(f"unknown {self.unit} type {shown(kind)!r} ignored")
        return []

    def unknown(self, kind: object) -> AdapterError:
        """The error of an event type this adapter does not know (it fails the stream)."""
        return AdapterError(
            "unknown_event", f"{self.provider}: unknown {self.unit} type {shown(kind)!r}"
        )

    def _refuse(self) -> list[FragmentEvent]:
        if self.refusal == "raise":
            if self._closed:
                raise AdapterError("adapter_closed", f"{self.provider}: stream already closed")
            raise AdapterError("adapter_failed", f"{self.provider}: stream already failed")
        self.anomaly(f"{self.unit} ignored: the stream is closed or failed")
        if self._failure_reason is None:
            return []
        return self._end_open(ResponseStatus.ERROR, self._failure_reason)

    # -- builders: every event goes through these so ids stay deterministic --------------

    def _event_id(self, *parts: str | int) -> str:
        return stable_id(self.provider, self.ctx.tenant, self.ctx.turn_id, *(str(p) for p in parts))

    def next_response_id(self, kind: str, given: str | None = None) -> str:
        """The id of the next response this stream opens: ``given`` (the provider's own) or,
        for a protocol that names none, ``_event_id(kind, n)``.

        ``n`` counts every response this adapter has opened, named or not, from 0; a reconnect
        replay of the same provider events through a fresh adapter therefore gets the same ids.
        Gemini (``kind="response"``, when ``responseId`` is absent) and Bedrock
        (``kind="message"``) use it.
        """
        number = self._responses_opened
        self._responses_opened += 1
        return given or self._event_id(kind, number)

    def _build(self, record: type[Record], **fields: Any) -> Record:
        """A fragment event; a value the wire contract refuses is a ``bad_chunk``."""
        try:
            return record(
                tenant=self.ctx.tenant,
                turn_id=self.ctx.turn_id,
                provider=self.provider,
                ts=self._now(),
                **fields,
            )
        except ValidationError as exc:
            raise bad_chunk(self.provider, describe_validation_error(exc)) from None

    def _call_event(
        self, record: type[Record], call: OpenCall, *kind: str | int, **fields: Any
    ) -> Record:
        return self._build(
            record,
            event_id=self._event_id(call.response_id, call.item_id, call.call_id, *kind),
            response_id=call.response_id,
            item_id=call.item_id,
            call_id=call.call_id,
            **fields,
        )

    def started(self, call: OpenCall) -> CallStarted:
        return self._call_event(
            CallStarted,
            call,
            "started",
            tool=call.tool,
            namespace=call.namespace,
            actor=self.ctx.actor,
            session=self.ctx.session,
        )

    def delta(self, call: OpenCall, text: str, seq: int | None = None) -> CallDelta:
        """A delta at ``seq`` (protocol position) or, when None, the next arrival position."""
        if seq is None:
            seq = call.next_seq
        event = self._call_event(CallDelta, call, "delta", seq, seq=seq, delta=text)
        call.next_seq = max(call.next_seq, seq + 1)
        return event

    def ended(self, call: OpenCall, terminal: str, arguments: str | None = None) -> CallEnded:
        """The protocol's terminal signal; ``terminal`` names the provider event that gave it.

        The terminal event id is derived from the call key and ``terminal``, so a replayed
        terminal keeps its id and two calls never share one.
        """
        terminal_id = self._event_id(
            call.response_id, call.item_id, call.call_id, "terminal", terminal
        )
        event = self._call_event(
            CallEnded,
            call,
            "ended",
            seq=call.next_seq,
            terminal_event_id=terminal_id,
            arguments=arguments,
        )
        call.ended = True
        return event

    def end_call(
        self, call: OpenCall, terminal: str, *, empty: str = "{}", arguments: str | None = None
    ) -> list[FragmentEvent]:
        """``ended`` at ``terminal``; a call that got no argument text first gets ``empty``."""
        out: list[FragmentEvent] = [] if call.next_seq > 1 else [self.delta(call, empty)]
        out.append(self.ended(call, terminal, arguments))
        return out

    def response_ended(
        self, response_id: str, status: ResponseStatus, reason: str, *, inert: int = 0
    ) -> ResponseEnded:
        """The response ended with ``status`` and ``reason`` (a short code, see
        :mod:`processor.adapters.verdicts`); ``inert`` counts its calls left without a trusted
        terminal (recorded as an anomaly; the reason stays a code)."""
        if inert:
            self.anomaly(f"{inert} call(s) without a trusted terminal made inert")
        return self._build(
            ResponseEnded,
            event_id=self._event_id(response_id, "response.ended"),
            response_id=response_id,
            status=status,
            reason=reason,
        )

    def withhold(self, call: OpenCall, why: str) -> None:
        """Record ``why`` and withhold the call's terminal: it stays open and ends inert."""
        self.anomaly(f"{why}: call withheld")
        if not call.ended:
            call.withheld = True

    def anomaly(self, text: str) -> None:
        """Record something odd but harmless (a repeated name, an unknown event type)."""
        self.anomalies.append(text)
