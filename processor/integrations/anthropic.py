"""anthropic: ``RawMessageStreamEvent`` (``client.messages.create(stream=True)``) and the
``MessageStreamEvent`` of ``client.messages.stream()`` → their wire dicts.

``model_dump(mode="json", exclude_unset=True)`` is the JSON the API sent (the SDK builds events
with ``construct_type``). The helper stream of ``messages.stream()`` also yields events it derives
itself (``text``, ``input_json``, ``citation``, ``thinking``, ``signature``) besides the raw ones;
they repeat what a raw event already carried, so they are not fed to the adapter.
"""

from __future__ import annotations

from typing import Any, Final

PROVIDER: Final = "anthropic"

WIRE_TYPES: Final = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        "error",
    }
)
"""The event types the Messages API sends (everything else comes from the SDK's helpers)."""


def provider_of(event: object) -> str | None:
    return PROVIDER if type(event).__module__.startswith("anthropic.") else None


def to_wire(event: Any) -> dict[str, Any] | None:
    """The wire JSON of one raw event; None for an event the SDK derived (not sent by the API)."""
    if getattr(event, "type", None) not in WIRE_TYPES:
        return None
    data: dict[str, Any] = event.model_dump(mode="json", exclude_unset=True)
    if data.get("type") == "content_block_stop":
        data.pop("content_block", None)  # added by the helper stream's accumulator
    return data
