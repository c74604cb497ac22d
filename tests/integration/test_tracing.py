"""OpenTelemetry spans, checked with the SDK's in-memory exporter.

The gateway's publish (through the tee), the worker's assembly decision and dispatch, and the
executor's processing and execution of the call are spans of ONE trace, linked by the
``traceparent`` the records carry, with the messaging attributes of the Kafka conventions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from processor import Call, Handlers, Publisher, TurnContext, tee_stream
from processor.core.assembler import Assembler
from processor.core.registry import Registry
from processor.runtime.partition import PartitionTask
from processor.settings import Settings
from tests.integration import sdk_streams as sdk
from tests.integration.conftest import TOOLS_YAML, Runtime, call_events, turn_started, wait_until
from tests.integration.executor_harness import Executor, group_of
from tests.integration.fetched_records import records_of

TRACE = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """A global SDK tracer provider with an in-memory exporter, removed afterwards (so other
    tests see the no-op API again)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER_SET_ONCE._done = False  # type: ignore[attr-defined]
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
        trace._TRACER_PROVIDER_SET_ONCE._done = False  # type: ignore[attr-defined]


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _traceparent(span: ReadableSpan) -> str:
    ctx = span.context
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _attrs(span: ReadableSpan) -> Mapping[str, Any]:
    return dict(span.attributes or {})


def test_worker_decision_and_dispatch_spans(spans: InMemorySpanExporter) -> None:
    registry = Registry.from_document(yaml.safe_load(TOOLS_YAML), source="test")
    settings = Settings(topic_prefix="x.", application_id="app")
    task = PartitionTask(2, settings, lambda: Assembler(registry))
    task.expected.update({task.fragments_tp: 0, task.control_tp: 0})
    frags = records_of(
        "x.fragments",
        call_events("acme", "t1", "c1", '{"city": "Oslo"}'),
        start_ms=2000,
        trace=TRACE,
    )
    ctrl = records_of("x.control", [turn_started("acme", "t1")], start_ms=1000)
    step = task.build({"fragments": frags, "control": ctrl}, time.time())

    (decision,) = _named(spans, "assemble get_weather")
    assert decision.kind is SpanKind.INTERNAL
    assert decision.parent is not None
    assert f"{decision.parent.span_id:016x}" == "bbbbbbbbbbbbbbbb"
    assert f"{decision.context.trace_id:032x}" == "a" * 32
    assert _attrs(decision)["toolcall.state"] == "dispatched"
    assert _attrs(decision)["toolcall.dispatch_decision"] == "dispatched"

    (send,) = _named(spans, "send x.dispatch")
    assert send.kind is SpanKind.PRODUCER
    assert _attrs(send) == {
        "messaging.system": "kafka",
        "messaging.destination.name": "x.dispatch",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.kafka.message.key": "acme/t1",
        "toolcall.tool": "get_weather",
        "toolcall.dispatch_id": _attrs(send)["toolcall.dispatch_id"],
    }
    # the dispatch record carries the dispatch span's context to the executor
    dispatch = next(o for o in step.plan.outputs if o.topic == "x.dispatch")
    assert dict(dispatch.headers)["traceparent"] == _traceparent(send).encode()
    # other outputs keep the fragment's traceparent
    ledger = next(o for o in step.plan.outputs if o.topic == "x.ledger")
    assert dict(ledger.headers)["traceparent"] == TRACE.encode()
    # nothing records argument values
    for span in spans.get_finished_spans():
        assert "Oslo" not in repr(_attrs(span))


async def test_publish_dispatch_and_execution_share_one_trace(
    runtime: Runtime, spans: InMemorySpanExporter
) -> None:
    worker = runtime.start_worker()
    await worker.wait_ready()
    turn = TurnContext(tenant="acme", turn_id="traced", actor="user-1")
    tracer = trace.get_tracer("test-gateway")
    async with Publisher(runtime.settings) as publisher:
        with tracer.start_as_current_span("POST /chat", kind=SpanKind.SERVER):
            stream = sdk.openai_chat("openai-chat/single-tool-gpt4o.sse")
            async for _ in tee_stream(stream, publisher, turn=turn, start_turn=True):
                pass
    (request,) = _named(spans, "POST /chat")
    publishes = _named(spans, f"send {runtime.topics.fragments}")
    assert publishes and all(
        s.parent and s.parent.span_id == request.context.span_id for s in publishes
    )
    first = publishes[0]
    assert first.kind is SpanKind.PRODUCER
    assert _attrs(first)["messaging.system"] == "kafka"
    assert _attrs(first)["messaging.destination.name"] == runtime.topics.fragments
    assert _attrs(first)["messaging.kafka.message.key"] == "acme/traced"
    assert _attrs(first)["messaging.batch.message_count"] >= 1
    (control,) = _named(spans, f"send {runtime.topics.control}")
    assert control.parent is not None and control.parent.span_id == request.context.span_id

    fragments = await runtime.read("fragments")
    assert {f["_traceparent"] for f in fragments} == {_traceparent(s) for s in publishes}

    async def dispatched() -> list[dict[str, Any]]:
        return await runtime.dispatches()

    (dispatch,) = await wait_until(dispatched, timeout=60, what="the dispatch")
    header = dispatch["_traceparent"]
    assert header is not None and header.split("-")[1] == f"{request.context.trace_id:032x}"

    handlers = Handlers()
    ran: list[str] = []

    @handlers.tool("get_weather", version="2", requires_confirmation=False)
    async def get_weather(call: Call) -> dict[str, Any]:
        ran.append(call.dispatch_id)
        return {"ok": True}

    executor = Executor(runtime.settings, handlers, group=group_of(runtime))
    await executor.start()
    try:

        async def executed() -> bool:
            return bool(_named(spans, f"process {runtime.topics.dispatch}"))

        await wait_until(executed, timeout=60, what="the executor's process span")
    finally:
        await executor.stop()
    assert ran == [dispatch["dispatch_id"]]

    (process,) = _named(spans, f"process {runtime.topics.dispatch}")
    assert process.kind is SpanKind.CONSUMER
    assert _traceparent(process).split("-")[1] == header.split("-")[1]
    assert process.parent is not None and f"{process.parent.span_id:016x}" == header.split("-")[2]
    attrs = _attrs(process)
    assert attrs["messaging.system"] == "kafka"
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.destination.name"] == runtime.topics.dispatch
    assert attrs["messaging.consumer.group.name"] == group_of(runtime)
    assert attrs["messaging.kafka.message.key"] == "acme/traced"
    assert attrs["messaging.kafka.offset"] == 0
    assert attrs["toolcall.outcome"] == "succeeded"

    (execute,) = _named(spans, "execute get_weather")
    assert execute.parent is not None and execute.parent.span_id == process.context.span_id
    assert _attrs(execute)["toolcall.dispatch_id"] == dispatch["dispatch_id"]
