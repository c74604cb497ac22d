"""Provider stream bodies → decoded provider events (one JSON object per event).

This module owns the transport framing that sits below the adapters:

* :class:`SseDecoder`, an incremental Server-Sent Events decoder (the WHATWG "event stream"
  interpretation): CRLF, LF and CR line ends, multi-line ``data``, comments, ``id``, a leading
  BOM, and chunk boundaries anywhere (inside a line, a multi-byte character, or a CRLF pair).
* :func:`detect_text_format`, which tells an SSE body from a JSON-lines body.
* :class:`ProviderEventDecoder` and :func:`iter_provider_events`, which turn an SSE body or a
  JSON-lines body (one provider JSON payload per line) into provider event dicts. For SSE a
  ``[DONE]`` data line ends the stream and an ``event: error`` whose data is a JSON object is
  yielded with ``"type": "error"`` added when it has no ``type``.

It knows nothing about any provider's event vocabulary; the adapters do. A body that cannot be
read raises :class:`~processor.core.errors.AdapterError`, never another exception type, and no
message carries payload text.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

from processor.adapters.fields import decode_object
from processor.core.errors import AdapterError

TextFormat = Literal["sse", "jsonl"]

DONE_SENTINEL: Final = "[DONE]"
DISCARDED_TAIL: Final = "the body ended inside an SSE event (no terminating blank line): discarded"
"""The anomaly an adapter records when its body's last SSE event was cut (and discarded)."""
_BOM: Final = "\ufeff"
_EOL: Final = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SseEvent:
    """One dispatched SSE event.

    ``event`` is the ``event:`` field (None when absent), ``data`` the ``data:`` lines joined with
    ``\\n``, ``id`` the stream's last event id at dispatch time (it persists across events, as
    the SSE specification says), None when no ``id:`` field has been seen.
    """

    event: str | None
    data: str
    id: str | None


class SseDecoder:
    """Incremental SSE decoder: ``feed`` any slice of the body, get the events it completes.

    Bytes must be UTF-8: where a browser would substitute U+FFFD, this raises
    :class:`AdapterError`, because a silently altered byte could change a tool argument.
    ``flush()`` ends the body. As the specification says (and as the provider SDKs' decoders do),
    an event not terminated by a blank line when the body ends is discarded, never dispatched:
    the body may have been cut inside it. Failing closed so, ``processor adapt`` reaches the
    verdict the SDK tee reached on the same bytes (issue 29). :attr:`discarded` tells that it
    happened.
    """

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self._line = ""
        self._skip_lf = False
        self._started = False
        self._event: str | None = None
        self._data: list[str] = []
        self._has_data = False
        self._last_id: str | None = None
        self.discarded = False
        """The body ended inside an event (no terminating blank line): it was discarded."""

    def feed(self, chunk: bytes | str) -> list[SseEvent]:
        """Take the next slice of the body; return the events completed by it."""
        return self._consume(self._text(chunk, final=False))

    def flush(self) -> list[SseEvent]:
        """The body is over: an unterminated last line and event are discarded (fail closed)."""
        events = self._consume(self._text(b"", final=True))
        if self._line:
            self._process_line(self._line)
            self._line = ""
        self.discarded = self._dispatch() is not None
        return events

    def _text(self, chunk: bytes | str, *, final: bool) -> str:
        if isinstance(chunk, str):
            return chunk
        try:
            return self._utf8.decode(chunk, final=final)
        except UnicodeDecodeError:
            raise AdapterError("bad_chunk", "sse body is not UTF-8") from None

    # -- line splitting ----------------------------------------------------------------------

    def _consume(self, text: str) -> list[SseEvent]:
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix(_BOM)
        if self._skip_lf and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF pair split across two slices
        self._skip_lf = text.endswith("\r")
        events: list[SseEvent] = []
        start = 0
        for match in _EOL.finditer(text):
            line, self._line = self._line + text[start : match.start()], ""
            start = match.end()
            event = self._end_line(line)
            if event is not None:
                events.append(event)
        self._line += text[start:]
        return events

    def _end_line(self, line: str) -> SseEvent | None:
        if line == "":
            return self._dispatch()
        self._process_line(line)
        return None

    # -- fields --------------------------------------------------------------------------------

    def _process_line(self, line: str) -> None:
        if line.startswith(":"):
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        elif name == "id" and "\x00" not in value:
            self._last_id = value
        # "retry" and unknown fields are ignored, as the specification says.

    def _dispatch(self) -> SseEvent | None:
        event, data, has_data = self._event, self._data, self._has_data
        self._event, self._data, self._has_data = None, [], False
        if not has_data:
            return None
        return SseEvent(event=event or None, data="\n".join(data), id=self._last_id)


def detect_text_format(first_bytes: bytes | str) -> TextFormat:
    """``"jsonl"`` when the body starts (after a BOM and blanks) with ``{``, else ``"sse"``."""
    if isinstance(first_bytes, bytes):
        first_bytes = first_bytes.decode("utf-8", errors="replace")
    head = first_bytes.removeprefix(_BOM).lstrip()
    return "jsonl" if head.startswith("{") else "sse"


# --------------------------------------------------------------------------- provider events


class ProviderEventDecoder:
    """Incremental body → provider event dicts, for SSE and JSON-lines bodies alike.

    The format is detected from the first non-blank characters unless given. After an SSE
    ``[DONE]`` the decoder is ``done`` and ignores the rest of the body. An SSE event cut by the
    end of the body (no terminating blank line) is discarded (:attr:`discarded_tail`). An
    unreadable payload also makes it ``done``: its :class:`AdapterError` is raised at once when
    no good event precedes it in the same call, else by the next ``feed``/``close``/``check``
    call.
    """

    def __init__(self, text_format: TextFormat | None = None) -> None:
        self.format: TextFormat | None = text_format
        self.done = False
        self._error: AdapterError | None = None
        self._held: list[bytes | str] = []
        self._head = ""
        self._sse = SseDecoder()
        self._jsonl = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self._pending = ""

    def feed(self, chunk: bytes | str) -> list[dict[str, Any]]:
        """Take the next slice of the body; return the provider events completed by it."""
        self._raise_deferred()
        if self.done:
            return []
        if self.format is None:
            return self._sniff(chunk)
        if self.format == "sse":
            return self._from_sse(self._sse.feed(chunk))
        return self._from_jsonl(self._jsonl_text(chunk), final=False)

    def close(self) -> list[dict[str, Any]]:
        """The body is over: return the events of its unterminated tail."""
        self._raise_deferred()
        out = self._release(detect_text_format(self._head)) if self.format is None else []
        if self.done:
            return out
        if self.format == "sse":
            return out + self._from_sse(self._sse.flush())
        return out + self._from_jsonl(self._jsonl_text(b"", final=True), final=True)

    @property
    def discarded_tail(self) -> bool:
        """The SSE body ended inside an event, which was discarded (the SSE specification)."""
        return self._sse.discarded

    def check(self) -> None:
        """Raise the AdapterError of an unreadable payload that followed the events returned."""
        self._raise_deferred()

    def _raise_deferred(self) -> None:
        if self._error is not None:
            raise self._error

    def _decode_all(self, payloads: list[str], where: str) -> list[dict[str, Any]]:
        """Decode in order; an unreadable payload ends the body after the good ones before it.

        Its AdapterError is raised at once when nothing precedes it, else on the next call, so
        a consumer sees every event that came before the bad one.
        """
        out: list[dict[str, Any]] = []
        for payload in payloads:
            try:
                out.append(decode_object(payload, where, "payload"))
            except AdapterError as exc:
                self.done = True
                if not out:
                    raise
                self._error = exc
                break
        return out

    def _sniff(self, chunk: bytes | str) -> list[dict[str, Any]]:
        """Hold slices until a non-blank character shows the format, then replay them."""
        self._held.append(chunk)
        self._head += chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else chunk
        if not self._head.removeprefix(_BOM).strip():
            return []
        return self._release(detect_text_format(self._head))

    def _release(self, text_format: TextFormat) -> list[dict[str, Any]]:
        self.format = text_format
        held, self._held, self._head = self._held, [], ""
        out: list[dict[str, Any]] = []
        for chunk in held:
            if self.done:
                break
            out.extend(self.feed(chunk))
        return out

    def _jsonl_text(self, chunk: bytes | str, *, final: bool = False) -> str:
        if isinstance(chunk, str):
            return chunk
        try:
            return self._jsonl.decode(chunk, final=final)
        except UnicodeDecodeError:
            raise AdapterError("bad_chunk", "json-lines body is not UTF-8") from None

    def _from_sse(self, events: list[SseEvent]) -> list[dict[str, Any]]:
        payloads: list[str] = []
        errors: set[int] = set()
        for event in events:
            data = event.data.strip()
            if data == DONE_SENTINEL:
                self.done = True
                break
            if data:
                if event.event == "error":
                    errors.add(len(payloads))
                payloads.append(data)
        out = self._decode_all(payloads, "sse event")
        for position in errors.intersection(range(len(out))):
            out[position].setdefault("type", "error")
        return out

    def _from_jsonl(self, text: str, *, final: bool) -> list[dict[str, Any]]:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        if final:
            lines.append(self._pending)
            self._pending = ""
        payloads: list[str] = []
        for raw_line in lines:
            line = raw_line.removeprefix(_BOM).strip()
            if line == DONE_SENTINEL:
                self.done = True
                break
            if line:
                payloads.append(line)
        return self._decode_all(payloads, "json-lines record")


def iter_provider_events(
    body: bytes | str | Iterable[bytes | str], text_format: TextFormat | None = None
) -> Iterator[dict[str, Any]]:
    """Yield the provider events of a whole body, or of an iterable of body slices."""
    decoder = ProviderEventDecoder(text_format)
    chunks: Iterable[bytes | str] = (body,) if isinstance(body, bytes | str) else body
    for chunk in chunks:
        yield from decoder.feed(chunk)
        if decoder.done:
            break
    yield from decoder.close()
    decoder.check()
