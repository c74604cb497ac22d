"""Response-level verdicts: each provider's stop reasons → ``response.ended`` status and reason.

One rule for every provider. A call acts only if its response completed normally, so an adapter
writes ``response.ended`` with status ``completed`` for exactly one thing: a stream that reached
its documented normal end (``[DONE]`` or EOF for Chat Completions, ``message_stop``,
``response.completed``, the last Gemini chunk, Bedrock's ``metadata`` then EOF) after a stop
reason its table calls :attr:`Verdict.NORMAL`. The stream's last word decides. Everything else
voids the response's calls (the Assembler holds a validated call until its response's verdict):

* a stop reason the table calls :attr:`Verdict.VOIDING` (refusal, max tokens, content filter,
  SAFETY, malformed or unexpected tool call, guardrail, ...), with the table's status:
  ``incomplete`` for limits (retry with a higher limit), ``failed`` for refusals, filters, safety
  and malformed output;
* a stop reason the table does not know: voiding, status ``failed`` (fail closed: a provider that
  adds a reason must be read before its calls can act);
* a provider error, a transport error or an unreadable chunk: status ``error``;
* a stream that ends without the provider's end event: ``incomplete`` / :data:`STREAM_CUT`;
* a voiding event after the stop marker and before the stream's documented end (see
  :mod:`processor.adapters.providers`): the stop marker alone does not complete a response;
* an alternative that is not the chosen one (``n > 1``, ``candidateCount > 1``): status
  ``not_chosen`` / :data:`ALTERNATIVE`.

``reason`` is always a short code: the provider's raw stop reason (passed through
:func:`~processor.adapters.fields.shown`), or one of the adapter codes below.

The tables themselves are data in :mod:`processor.adapters.providers` (each adapter module
re-exports its own as ``STOP_REASONS``); :func:`readme_section` renders them, and a test keeps
the README's copy in step. This module imports no adapter.

Alternatives. One request can return several alternatives (Chat Completions ``choices[i]``,
Gemini ``candidates[i]``). At most one of them may act: the adapter's ``alternative`` option
(default ``0``, the first; ``None``: none). Every other alternative still reaches the Assembler,
under its own response id (:func:`alternative_response_id`), so the ledger records its calls; its
calls' terminals are withheld and its response ends ``not_chosen``, so none of them can dispatch,
whatever a tool's dispatch policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from processor.adapters.fields import shown
from processor.core.events import ResponseStatus

STREAM_CUT: Final = "stream_cut"
"""The stream ended before the provider's end event."""
ALTERNATIVE: Final = "alternative"
"""The reason of a ``not_chosen`` alternative's ``response.ended``."""
ARGUMENTS_MISMATCH: Final = "arguments_mismatch"
"""Two provider finals of one call disagree: the response ends ``error`` with this reason."""
SPLICED: Final = "spliced"
"""A new response began while the previous one was open."""
UNKNOWN: Final = "unknown"
"""A stop reason that is absent or not a short code."""
AFTER_STOP: Final = "after_stop"
"""Content (or a second, different stop) after the stop marker, before the stream's end."""
UNNAMED_CALL: Final = "unnamed_call"
"""A tool call that never got a name voids its response (it cannot start, so cannot be a call)."""

ALTERNATIVE_SEPARATOR: Final = "~alt"


class Verdict(StrEnum):
    """What a stop reason means for the calls of its response."""

    NORMAL = "normal"
    VOIDING = "voiding"


@dataclass(frozen=True)
class Stop:
    """One row of a stop-reason table."""

    verdict: Verdict
    status: ResponseStatus
    meaning: str

    def __post_init__(self) -> None:
        if (self.verdict is Verdict.NORMAL) != (self.status is ResponseStatus.COMPLETED):
            raise ValueError("a normal stop is exactly one with status completed")


def normal(meaning: str) -> Stop:
    return Stop(Verdict.NORMAL, ResponseStatus.COMPLETED, meaning)


def voiding(status: ResponseStatus, meaning: str) -> Stop:
    return Stop(Verdict.VOIDING, status, meaning)


UNKNOWN_STOP: Final = voiding(ResponseStatus.FAILED, "any reason not listed (fail closed)")


@dataclass(frozen=True)
class StopTable:
    """A provider's documented stop reasons → verdicts (``judge`` is the only reader)."""

    provider: str
    read_from: str
    """Where the reason is read (shown in the README)."""
    rules: Mapping[str, Stop]
    unknown: Stop = field(default=UNKNOWN_STOP)

    def judge(self, reason: object) -> tuple[ResponseStatus, str]:
        """``(status, reason code)`` for the ``response.ended`` of a response stopped so."""
        rule = self.rules.get(reason) if isinstance(reason, str) else None
        if rule is None:
            return self.unknown.status, shown(reason, UNKNOWN)
        return rule.status, shown(reason, UNKNOWN)

    def is_normal(self, reason: object) -> bool:
        return self.judge(reason)[0] is ResponseStatus.COMPLETED

    def markdown(self) -> str:
        """The table as README markdown."""
        lines = [
            f"**{self.provider}** (`{self.read_from}`)",
            "",
            "| reason | verdict | status | meaning |",
            "|---|---|---|---|",
        ]
        rows = [*self.rules.items(), ("*(any other)*", self.unknown)]
        for reason, stop in rows:
            code = reason if reason.startswith("*") else f"`{reason}`"
            verdict, status = stop.verdict.value, stop.status.value
            lines.append(f"| {code} | {verdict} | `{status}` | {stop.meaning} |")
        return "\n".join(lines)


def readme_section(tables: Iterable[StopTable]) -> str:
    """Every table, one after the other (the README's "Provider stop reasons" body)."""
    return "\n\n".join(table.markdown() for table in tables)


def alternative_response_id(response_id: str, index: int) -> str:
    """The response id of alternative ``index`` that is not the chosen one."""
    return f"{response_id}{ALTERNATIVE_SEPARATOR}{index}"


def is_chosen(alternative: int | None, index: int) -> bool:
    """Whether alternative ``index`` is the one allowed to act."""
    return alternative is not None and index == alternative
