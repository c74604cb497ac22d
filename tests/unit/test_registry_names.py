"""The registry refuses at load a tool name, alias or namespace the wire refuses (issue 38,
item 11): every call of such a tool would be a dead letter."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from processor.core.errors import RegistryError
from processor.core.events import CallStarted
from processor.core.registry import Registry

OBJECT = {"type": "object"}


def started(tool: str, namespace: str | None = None) -> None:
    """What the wire itself says of the name (the fragment event's tool field)."""
    CallStarted.model_validate(
        {
            "tenant": "t",
            "turn_id": "turn",
            "response_id": "r",
            "item_id": "i",
            "call_id": "c",
            "seq": 0,
            "ts": 1.0,
            "provider": "openai",
            "event_id": "e1",
            "actor": "a",
            "tool": tool,
            **({"namespace": namespace} if namespace is not None else {}),
        }
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x" * 129}, "'name' is not a tool name a call can carry"),
        ({"name": "book\tslot"}, "'name' is not a tool name a call can carry"),
        ({"name": "book", "aliases": ["y" * 129]}, "alias"),
        ({"name": "book", "aliases": ["old\nname"]}, "alias"),
        (
            {"name": "book", "namespace": "n" * 129},
            "'namespace' must be a namespace a call can carry",
        ),
    ],
)
def test_a_name_the_wire_refuses_is_refused_at_load(entry: dict[str, Any], message: str) -> None:
    name = entry.get("aliases", [entry["name"]])[0]
    with pytest.raises(ValidationError) as refused:  # no call could carry it
        started(name, entry.get("namespace"))
    assert {e["loc"][0] for e in refused.value.errors()} <= {"tool", "namespace"}
    with pytest.raises(RegistryError, match=message):
        Registry.from_document({"tools": [{**entry, "parameters": OBJECT}]})


def test_the_longest_name_the_wire_carries_loads() -> None:
    name = "x" * 128
    started(name, "n" * 128)
    registry = Registry.from_document(
        {"tools": [{"name": name, "namespace": "n" * 128, "parameters": OBJECT}]}
    )
    assert registry.resolve(name, "n" * 128) is not None
