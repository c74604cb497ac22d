"""google-genai: ``GenerateContentResponse`` chunks (``generate_content_stream``) → wire dicts.

The SDK's models use snake_case fields with camelCase aliases, so the wire shape (what
``streamGenerateContent`` sent) is ``model_dump(mode="json", by_alias=True, exclude_none=True)``.
Bytes fields (``thoughtSignature``) come out URL-safe base64; the adapter never reads them.
"""

from __future__ import annotations

from typing import Any, Final

PROVIDER: Final = "gemini"


def provider_of(event: object) -> str | None:
    return PROVIDER if type(event).__module__.startswith("google.genai") else None


def to_wire(event: Any) -> dict[str, Any]:
    data: dict[str, Any] = event.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data
