"""An executor never guesses that a tool needs no confirmation (issue 30, "the same class").

Before, a handler registered without ``requires_confirmation`` on an executor without a tool
registry (or whose registry does not declare the tool) took "no confirmation needed": a
dispatch record of a tool that needs one, naming no confirmation, passed the fence. Now such an
executor refuses to start, and the fence's requirement for a tool it cannot resolve is
"required".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from processor.core.authn import AllowUnsigned
from processor.core.errors import ConfigurationError
from processor.core.registry import Registry
from processor.executor.client import ExecutorClient
from processor.executor.handlers import Call, Handlers
from processor.settings import Settings

BOOK = {"name": "book_slot", "version": "1", "parameters": {"type": "object"}}


async def _noop(call: Call) -> Mapping[str, Any]:
    return {}


def _handlers(requires: bool | None, namespace: str | None = None) -> Handlers:
    handlers = Handlers()
    handlers.register("book_slot", _noop, requires_confirmation=requires, namespace=namespace)
    return handlers


def _client(handlers: Handlers, registry: Registry | None) -> ExecutorClient:
    return ExecutorClient(
        Settings(bootstrap_servers="127.0.0.1:1"),
        handlers,
        verifier=AllowUnsigned(),
        registry=registry,
    )


@pytest.mark.parametrize(
    "registry",
    [None, Registry.from_document({"tools": [{**BOOK, "name": "other"}]})],
    ids=["no registry", "registry without the tool"],
)
def test_an_undecided_handler_refuses_to_start(registry: Registry | None) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _client(_handlers(None), registry)
    assert caught.value.reason == "confirmation_rule_unknown"
    assert "book_slot" in str(caught.value)


def test_a_namespaced_handler_is_not_decided_by_the_bare_tool() -> None:
    registry = Registry.from_document({"tools": [BOOK]})
    with pytest.raises(ConfigurationError):
        _client(_handlers(None, namespace="crm"), registry)


@pytest.mark.parametrize("requires", [True, False])
def test_a_handler_that_says_starts_without_a_registry(requires: bool) -> None:
    _client(_handlers(requires), None)


def test_a_handler_that_does_not_say_starts_when_the_registry_declares_its_tool() -> None:
    """It starts; what the registry then decides is shown on a real broker, by what the
    executor does (``tests/integration/test_executor_confirmation_registry.py``)."""
    registry = Registry.from_document({"tools": [{**BOOK, "requires_confirmation": True}]})
    _client(_handlers(None), registry)
