"""openai: ``ChatCompletionChunk`` and Responses stream events → their wire dicts.

The openai SDK builds its stream events with ``construct_type`` from the JSON the API sent, so
``model_dump(mode="json", exclude_unset=True)`` is that JSON again: only the fields the API sent,
unknown ones included (checked against the recordings in ``tests/adapters/data``).

The helper streams are accepted too: ``client.chat.completions.stream()`` yields its own events,
of which only ``chunk`` carries what the API sent (its ``.chunk``; the others are derived from
it), and ``client.responses.stream()`` yields the raw events with a ``snapshot`` added, which is
dropped.
"""

from __future__ import annotations

from typing import Any, Final

CHAT: Final = "openai-chat"
RESPONSES: Final = "openai-responses"

_MODULES: Final = (
    ("openai.types.chat", CHAT),
    ("openai.lib.streaming.chat", CHAT),
    ("openai.types.responses", RESPONSES),
    ("openai.lib.streaming.responses", RESPONSES),
)


def provider_of(event: object) -> str | None:
    """``openai-chat`` or ``openai-responses`` for an openai SDK stream object, else None."""
    module = type(event).__module__
    for prefix, provider in _MODULES:
        if module.startswith(prefix):
            return provider
    return None


def to_wire(event: Any) -> dict[str, Any] | None:
    """The wire JSON of one openai stream event; None for a helper event the SDK derived."""
    if type(event).__module__.startswith("openai.lib.streaming.chat"):
        if getattr(event, "type", None) != "chunk":
            return None
        event = event.chunk
    data: dict[str, Any] = event.model_dump(mode="json", exclude_unset=True)
    if type(event).__module__.startswith("openai.lib.streaming.responses"):
        data.pop("snapshot", None)
    return data
