"""Issue 29, item 4: I-JSON (RFC 7493 §2.1) forbids noncharacters in strings and member names, as
it forbids surrogates; docs/guarantees.md promises I-JSON. A provider stream (OpenAI Responses,
from the SDK's documented event shapes, see ``test_namespaces``) whose arguments hold one, raw or
escaped, in a value or a key, fails the call ``malformed_json`` and dispatches nothing, whatever
the chunking. Before the fix the call dispatched."""

from __future__ import annotations

from typing import Any

import pytest

from tests.adapters.responses_namespaces import pipeline, stream, tool


def with_arguments(text: str, cut: int) -> list[dict[str, Any]]:
    """The namespace-free Responses stream of ``test_namespaces`` carrying ``text``, its deltas
    cut at ``cut``."""
    events = stream(namespace=None)
    events[2]["delta"], events[3]["delta"] = text[:cut], text[cut:]
    events[4]["arguments"] = text
    events[5]["item"]["arguments"] = text
    return events


@pytest.mark.parametrize(
    "text",
    [
        '{"to": "acct-9\ufdd0"}',
        '{"to": "\\uFFFE"}',
        '{"to": "\\ud83f\\udfff"}',
        '{"memo\U0010ffff": "x"}',
        '{"\\uFDEF": 1}',
    ],
)
@pytest.mark.parametrize("cut", [1, 9, 12, 14])
def test_arguments_holding_a_noncharacter_never_dispatch(text: str, cut: int) -> None:
    _, dispatches, [entry] = pipeline([tool()], with_arguments(text, cut))
    assert dispatches == []
    assert (entry.state, entry.terminal_reason) == ("failed", "malformed_json")


def test_the_characters_beside_them_still_dispatch() -> None:
    text = '{"to": "\ufdcf\ufdf0\ufffd\U0010fffd\\uFFFD\\udbff\\udffd"}'
    _, [dispatch], _ = pipeline([tool()], with_arguments(text, 10))
    assert dispatch.arguments == {"to": "\ufdcf\ufdf0\ufffd\U0010fffd\ufffd\U0010fffd"}
