"""Outcomes told back to the model, in each provider's own tool-result shape. Pure.

Owns :func:`tool_results` (what to append to the conversation for the next request) and
:func:`outcome_text` (the short, truthful sentence for a call that did not simply run).

=====================  ===========================================================================
provider               what :func:`tool_results` returns (append it to the next request)
=====================  ===========================================================================
``openai-responses``   ``function_call_output`` items (``call_id``), for ``input``
``openai-chat``        ``role: "tool"`` messages (``tool_call_id``), for ``messages``
``anthropic``          one ``role: "user"`` message of ``tool_result`` blocks (``tool_use_id``;
                       ``is_error`` for anything that did not run), for ``messages``
``gemini``             one ``role: "user"`` content of ``functionResponse`` parts (``name``, and
                       ``id`` when the provider gave one; ``response.output`` or
                       ``response.error``), for ``contents``
``bedrock``            one ``role: "user"`` message of ``toolResult`` blocks (``toolUseId``;
                       ``status: "error"`` when it did not run), for Converse ``messages``
=====================  ===========================================================================

Only a call that ran answers with the executor's output. Everything else is told as not run (or,
for ``unknown``, as possibly run), with codes from fixed vocabularies and never an argument
value; a refusal the user can lift (a confirmation, a tool or tenant switched off for now, a
response held for review) says so. An open call (no outcome at the wait's bound) is told as
still pending, never as failed or done. Names: the model is answered with the name it called
the tool by (the tee's ``call.started``), else the name it was offered
(:func:`processor.core.flat_names.flat_name` for a namespaced tool, except on OpenAI Responses,
which sends the namespace with the call and answers by ``call_id``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

import orjson

from processor.agent.outcomes import Outcome, OutcomeKind
from processor.core.errors import ConfigurationError
from processor.core.flat_names import flat_name

__all__ = ["PROVIDERS", "outcome_text", "tool_results"]

PROVIDERS: Final = ("openai-responses", "openai-chat", "anthropic", "gemini", "bedrock")

_CODE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")

_NOT_RUN: Final = {
    # the fence, or the worker, stopped it; the user (or an operator) can lift these
    "confirmation_missing": (
        "this action needs the user's confirmation, which it did not have; ask the user to "
        "confirm it, then call it again"
    ),
    "confirmation_mismatch": (
        "the user's confirmation did not match this call; ask the user to confirm it again"
    ),
    "confirmation_expired": (
        "the user's confirmation window closed; ask the user to confirm it again"
    ),
    "tool_disabled": "this tool is disabled for now; the user can try again later",
    "tenant_stopped": (
        "actions are paused for the user's organisation for now; a person will follow up"
    ),
    "quarantined": "an operator is holding this response for review; it may be released later",
    # the user decided
    "confirmation_denied": "the user declined this action",
    "user_stop": "the user stopped it",
    "turn_cancelled": "the user's turn was cancelled before it ran",
    "superseded": "the user sent a newer message, which replaced this one",
    "connection_lost": "the user's connection was lost before the request was complete",
    # the call itself
    "malformed_json": "its arguments were not valid JSON; you may correct them and call again",
    "schema_invalid": (
        "its arguments did not match the tool's schema; you may correct them and call again"
    ),
    "business_invalid": (
        "its arguments broke one of the tool's rules; you may correct them and call again"
    ),
    "unknown_tool": "no such tool is available",
    "permission_denied": "the user is not allowed to use this tool",
    "size_limit": "its arguments were too large",
    "turn_binding_refused": "this turn could not be bound to the user, so none of its calls run",
    "actor_mismatch": "this turn belongs to another user",
    "turn_not_bound": "this turn was not bound to a user",
}
_VOIDED: Final = "the response that asked for it did not complete normally"


def _code(value: str | None) -> str:
    """A code-like value as it is, anything else as ``other`` (never free text)."""
    return value if value is not None and _CODE.fullmatch(value) else "other"


def outcome_text(outcome: Outcome) -> str:
    """The sentence the model is told for ``outcome`` (for ``ran``: its output as JSON)."""
    kind = outcome.kind
    if kind is OutcomeKind.RAN:
        if outcome.output is None:
            return "Done: the tool ran and returned no output."
        return orjson.dumps(outcome.output, option=orjson.OPT_SORT_KEYS).decode()
    code = _code(outcome.reason)
    if kind is OutcomeKind.UNKNOWN:
        return (
            f"Unknown ({code}): the tool was started but it is not known whether it took effect; "
            "it may have acted. Do not repeat it before the user has checked."
        )
    if kind is OutcomeKind.FAILED and code == "cancelled_while_running":
        return (
            f"Stopped ({code}): the user stopped this turn while the tool ran, and the tool "
            "stopped without completing the action."
        )
    if kind is OutcomeKind.FAILED:
        again = "asking again may work" if outcome.retry_possible else "it cannot be done as asked"
        return f"Failed ({code}): the tool ran and reported a failure; {again}."
    if kind is OutcomeKind.OPEN:
        if outcome.stage == "awaiting_confirmation":
            return (
                "Pending: this action waits for the user's confirmation; it has not run. "
                "Do not assume it will."
            )
        return (
            f"Pending ({_code(outcome.stage)}): no outcome yet; it has not been confirmed to run "
            "or not to run. Do not assume either."
        )
    if kind is OutcomeKind.VOIDED:
        said = ""
        if outcome.provider_reason:
            said = f" (the provider said {_code(outcome.provider_reason)})"
        return f"Not run ({code}): {_VOIDED}{said}."
    why = _NOT_RUN.get(code, "it was stopped before it ran")
    return f"Not run ({code}): {why}."


def _answer_name(outcome: Outcome, provider: str) -> str:
    if outcome.called_as:
        return outcome.called_as
    tool = outcome.tool or ""
    if outcome.namespace is not None and provider != "openai-responses":
        return flat_name(outcome.namespace, tool)
    return tool


def _gemini_id(outcome: Outcome) -> str | None:
    """The provider's own call id (the adapter makes one up, ``response:position``, without)."""
    key = outcome.key
    return None if key.call_id == f"{key.response_id}:{key.item_id}" else key.call_id


def tool_results(outcomes: Iterable[Outcome], provider: str) -> list[dict[str, Any]]:
    """What to append to ``provider``'s next request for these outcomes (see the module table)."""
    chosen = list(outcomes)
    if provider == "openai-responses":
        items = []
        for o in chosen:
            item = {"type": "function_call_output", "call_id": o.key.call_id}
            namespace = o.called_namespace or (o.namespace if not o.called_as else None)
            if namespace is not None:  # a namespaced call: answered in its namespace
                item.update(namespace=namespace, name=_answer_name(o, provider))
            items.append({**item, "output": outcome_text(o)})
        return items
    if provider == "openai-chat":
        return [
            {"role": "tool", "tool_call_id": o.key.call_id, "content": outcome_text(o)}
            for o in chosen
        ]
    if not chosen:
        return []
    if provider == "anthropic":
        blocks = [
            {
                "type": "tool_result",
                "tool_use_id": o.key.call_id,
                "content": outcome_text(o),
                "is_error": not o.ran,
            }
            for o in chosen
        ]
        return [{"role": "user", "content": blocks}]
    if provider == "gemini":
        parts = []
        for o in chosen:
            reply: dict[str, Any] = {"name": _answer_name(o, provider)}
            call_id = _gemini_id(o)
            if call_id is not None:
                reply["id"] = call_id
            if o.ran:
                reply["response"] = {"output": o.output if o.output is not None else {}}
            else:
                reply["response"] = {"error": outcome_text(o)}
            parts.append({"functionResponse": reply})
        return [{"role": "user", "parts": parts}]
    if provider == "bedrock":
        results = []
        for o in chosen:
            content: list[dict[str, Any]]
            if o.ran and o.output is not None:
                content = [{"json": o.output}]
            else:
                content = [{"text": outcome_text(o)}]
            status = "success" if o.ran else "error"
            results.append(
                {"toolResult": {"toolUseId": o.key.call_id, "content": content, "status": status}}
            )
        return [{"role": "user", "content": results}]
    raise ConfigurationError("unknown_provider", f"no tool-result shape for {provider!r}")
