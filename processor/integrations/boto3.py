"""boto3: the events of ``bedrock-runtime`` ``converse_stream(...)["stream"]``.

boto3 yields each eventstream frame as ``{<event type>: <payload>}``, already the shape
:class:`~processor.adapters.bedrock.BedrockConverseAdapter` reads, so the dict is fed as is.
"""

from __future__ import annotations

from typing import Any, Final

PROVIDER: Final = "bedrock"

EVENT_TYPES: Final = frozenset(
    {
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "internalServerException",
        "modelStreamErrorException",
        "validationException",
        "throttlingException",
        "serviceUnavailableException",
    }
)


def provider_of(event: object) -> str | None:
    if isinstance(event, dict) and len(event) == 1:
        (name,) = event
        if isinstance(name, str) and (name in EVENT_TYPES or name.endswith("Exception")):
            return PROVIDER
    return None


def to_wire(event: Any) -> dict[str, Any]:
    return dict(event)
