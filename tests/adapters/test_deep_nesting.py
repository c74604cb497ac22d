"""Provider objects nested deeper than orjson writes (255 levels) are bad chunks, not crashes.

orjson decodes 1,024 levels but encodes 255, so an adapter that re-encodes a provider object
(Chat ``arguments`` sent as an object, Anthropic ``tool_use.input``, Gemini ``args``) met a
``TypeError`` on a deep one. Every adapter must fail such a chunk with ``AdapterError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from processor.adapters.anthropic import AnthropicMessagesAdapter
from processor.adapters.base import StreamAdapter
from processor.adapters.gemini import GeminiAdapter
from processor.adapters.openai_chat import OpenAIChatAdapter
from processor.core.errors import AdapterError
from tests.adapters.harness import CTX

DEPTH = 300


def deep() -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    for _ in range(DEPTH):
        value = {"a": value}
    return value


def chat_events() -> list[dict[str, Any]]:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}}
    call["function"]["arguments"] = deep()
    choice = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
    return [{"id": "chatcmpl-1", "choices": [choice]}]


def anthropic_events() -> list[dict[str, Any]]:
    return [
        {"type": "message_start", "message": {"id": "msg_1", "content": []}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": deep()},
        },
        {"type": "content_block_stop", "index": 0},
    ]


def gemini_events() -> list[dict[str, Any]]:
    part = {"functionCall": {"name": "f", "args": deep()}}
    return [{"candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}]}]


CASES: list[tuple[Callable[[], StreamAdapter], Callable[[], list[dict[str, Any]]]]] = [
    (lambda: OpenAIChatAdapter(CTX), chat_events),
    (lambda: AnthropicMessagesAdapter(CTX), anthropic_events),
    (lambda: GeminiAdapter(CTX), gemini_events),
]


@pytest.mark.parametrize(("make", "events"), CASES, ids=["openai-chat", "anthropic", "gemini"])
def test_a_too_deep_object_is_a_bad_chunk(
    make: Callable[[], StreamAdapter], events: Callable[[], list[dict[str, Any]]]
) -> None:
    adapter = make()
    with pytest.raises(AdapterError) as raised:
        for event in events():
            adapter.feed(event)
    assert raised.value.reason == "bad_chunk"
    assert "nested too deep" in str(raised.value)
