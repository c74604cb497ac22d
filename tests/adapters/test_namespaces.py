"""Issue 29, item 2: a tool's identity is its (namespace, name), end to end.

The OpenAI Responses API groups function tools under a namespace (openai-python
``NamespaceTool``: ``{"type": "namespace", "name": "crm", "tools": [...]}``) and a call of one
carries it (``ResponseFunctionToolCall.namespace``). The streams below are written from those
SDK types: the ``function_call`` item of ``response.output_item.added`` / ``.done`` names
``transfer`` in namespace ``crm``. ``crm``'s ``transfer`` is not the registry's bare
``transfer``: before the fix the adapter dropped the namespace and the bare tool ran.
"""

from __future__ import annotations

from typing import Any

import pytest

from processor.adapters.openai_responses import OpenAIResponsesAdapter
from processor.core.errors import AdapterError
from processor.core.events import (
    CallStarted,
    FragmentEvent,
)
from tests.adapters.harness import CTX
from tests.adapters.responses_namespaces import pipeline, stream, tool


def test_the_adapter_passes_the_namespace_through() -> None:
    fragments, _, _ = pipeline([tool()], stream())
    [started] = [e for e in fragments if isinstance(e, CallStarted)]
    assert (started.tool, started.namespace) == ("transfer", "crm")


def test_a_namespaced_call_never_runs_the_bare_tool_of_that_name() -> None:
    """The registry knows only the bare ``transfer``; ``crm.transfer`` fails closed."""
    _, dispatches, ledger = pipeline([tool()], stream())
    assert dispatches == []
    [entry] = ledger
    assert (entry.state, entry.terminal_reason) == ("failed", "unknown_tool")
    assert entry.validation_result == "unknown_namespace"
    assert (entry.tool, entry.namespace) == ("transfer", "crm")


def test_a_namespaced_call_runs_the_tool_declared_in_that_namespace() -> None:
    tools = [tool(version="bare"), tool("crm", version="crm-7")]
    _, [dispatch], [entry] = pipeline(tools, stream())
    assert (dispatch.tool, dispatch.namespace, dispatch.tool_version) == (
        "transfer",
        "crm",
        "crm-7",
    )
    assert (entry.namespace, entry.tool_version) == ("crm", "crm-7")


def test_a_bare_call_never_runs_a_namespaced_tool() -> None:
    _, dispatches, [entry] = pipeline([tool("crm")], stream(namespace=None))
    assert dispatches == []
    assert (entry.terminal_reason, entry.validation_result) == ("unknown_tool", "unknown_tool")
    assert entry.namespace is None


def test_a_bare_call_still_runs_the_bare_tool() -> None:
    _, [dispatch], _ = pipeline([tool("crm", version="crm"), tool(version="bare")], stream(None))
    assert (dispatch.namespace, dispatch.tool_version) == (None, "bare")


@pytest.mark.parametrize("where", [1, 5])
def test_a_namespace_that_changes_between_added_and_done_withholds_the_call(where: int) -> None:
    """The item is named once; a repeat naming another namespace names another tool."""
    events = stream()
    item = events[where]["item"]
    events[where] = {**events[where], "item": {**item, "namespace": "erp"}}
    fragments, dispatches, [entry] = pipeline([tool("crm"), tool("erp")], events)
    assert dispatches == []
    assert entry.state != "dispatched"
    [ended] = [e for e in fragments if e.type == "response.ended"]
    assert (ended.status, ended.reason) == ("error", "call_identity_changed")


def test_an_empty_namespace_is_a_bad_chunk() -> None:
    events = stream()
    events[1]["item"]["namespace"] = ""
    adapter = OpenAIResponsesAdapter(CTX)
    adapter.feed(events[0])
    with pytest.raises(AdapterError, match="namespace"):
        adapter.feed(events[1])


async def test_the_sdk_tee_passes_the_namespace_through() -> None:
    """The openai SDK's own stream objects (built from the JSON as its ``AsyncStream`` does)
    keep ``ResponseFunctionToolCall.namespace``; the tee publishes it on ``call.started``."""
    from openai._models import construct_type
    from openai.types.responses import ResponseFunctionToolCall, ResponseStreamEvent

    from processor.integrations.tee import TeeState, tee_stream

    class Sink:
        def __init__(self) -> None:
            self.events: list[FragmentEvent] = []

        async def publish(self, events: Any, traceparent: str | None = None) -> int:
            batch = list(events)
            self.events += batch
            return len(batch)

        async def start_turn(self, turn: Any) -> Any:
            raise AssertionError("not used")

    objects = [construct_type(type_=ResponseStreamEvent, value=e) for e in stream()]
    item = objects[1].item  # type: ignore[union-attr]
    assert isinstance(item, ResponseFunctionToolCall) and item.namespace == "crm"

    async def sdk_stream() -> Any:
        for obj in objects:
            yield obj

    sink = Sink()
    async for _ in tee_stream(sdk_stream(), sink, turn=CTX, state=TeeState(CTX)):
        pass
    [started] = [e for e in sink.events if isinstance(e, CallStarted)]
    assert (started.tool, started.namespace) == ("transfer", "crm")
