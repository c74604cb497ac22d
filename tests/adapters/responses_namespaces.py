"""OpenAI Responses streams of a function call in a namespace, for tests (written from the SDK's
types: ``ResponseFunctionToolCall.namespace``), registry entries of that tool, and the pipeline
from the stream through the adapter to the Assembler's dispatches and ledger."""

from __future__ import annotations

from typing import Any

from processor.adapters.openai_responses import OpenAIResponsesAdapter
from processor.core.assembler import Assembler
from processor.core.events import Dispatch, FragmentEvent, Ledger, TurnStarted
from processor.core.registry import Registry
from tests.adapters.harness import CTX, run_adapter

ARGS = '{"amount": 10, "to": "acct-9"}'


def call_item(status: str, arguments: str, namespace: str | None) -> dict[str, Any]:
    """A ``ResponseFunctionToolCall`` as the API sends it (``namespace`` only when set)."""
    item: dict[str, Any] = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "transfer",
        "arguments": arguments,
        "status": status,
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def stream(namespace: str | None = "crm") -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": call_item("in_progress", "", namespace),
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "delta": ARGS[:12],
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "delta": ARGS[12:],
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 0,
            "arguments": ARGS,
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": call_item("completed", ARGS, namespace),
        },
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    ]
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


def tool(namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "transfer", "parameters": {"type": "object"}, **extra}
    if namespace is not None:
        entry["namespace"] = namespace
    return entry


def pipeline(
    tools: list[dict[str, Any]], events: list[dict[str, Any]]
) -> tuple[list[FragmentEvent], list[Dispatch], list[Ledger]]:
    fragments = run_adapter(OpenAIResponsesAdapter(CTX), events)
    assembler = Assembler(Registry.from_document({"tools": tools}))
    bind = TurnStarted(command_id="bind", issued_by="gateway", issued_at=0.0,
                       tenant=CTX.tenant, turn_id=CTX.turn_id, actor=CTX.actor)  # fmt: skip
    outputs = assembler.handle(bind, 0.0)
    for event in fragments:
        outputs += assembler.handle(event, 0.0)
    return (
        fragments,
        [o for o in outputs if isinstance(o, Dispatch)],
        [o for o in outputs if isinstance(o, Ledger)],
    )
