"""openai: ``ChatCompletionChunk`` and Responses stream events → their wire dicts.

The openai SDK builds its stream events with ``construct_type`` from the JSON the API sent, so
``model_dump(mode="json", exclude_unset=True)`` is that JSON again: only the fields the API sent,
unknown ones included (checked against the recordings in ``tests/adapters/data``).
"""

from __future__ import annotations

from typing import Any, Final

CHAT: Final = "openai-chat"
RESPONSES: Final = "openai-responses"


def provider_of(event: object) -> str | None:
    """``openai-chat`` or ``openai-responses`` for an openai SDK stream object, else None."""
    module = type(event).__module__
    if module.startswith("openai.types.chat"):
        return CHAT
    if module.startswith("openai.types.responses"):
        return RESPONSES
    return None


def to_wire(event: Any) -> dict[str, Any]:
    """The wire JSON of one openai stream event (a pydantic model)."""
    data: dict[str, Any] = event.model_dump(mode="json", exclude_unset=True)
    return data
