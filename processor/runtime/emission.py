"""How an output joins a step: its traceparent, its span, its count.

Each output takes the ``traceparent`` header of the input record that caused it; outputs of a
tick (idle expiry) and outputs caused by a record without the header use the last traceparent
seen on a fragment of the same turn (:class:`Emitter` keeps them in a bounded, in-memory map:
lost on restart, cleared on each preparation). An assembly decision (a ledger record) and a
dispatch get a span of their own when OpenTelemetry records spans.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from processor.core.events import Audit, DeadLetter, Dispatch, Ledger, OutputRecord, turn_key
from processor.kafka.codec import encode_output, output_role, valid_traceparent
from processor.observability import tracing
from processor.runtime.step_plan import Step
from processor.settings import TopicNames

_MAX_TRACES: Final = 10_000


class Emitter:
    """Partition p's outputs into steps, and the last traceparent seen per turn."""

    def __init__(self, partition: int, topics: TopicNames) -> None:
        self.partition = partition
        self.topics = topics
        self._traces: OrderedDict[str, str] = OrderedDict()

    def clear(self) -> None:
        self._traces.clear()

    def remember(self, key: str, trace: str) -> None:
        """``trace`` is the last traceparent of turn ``key``'s fragments."""
        self._traces[key] = trace
        self._traces.move_to_end(key)
        while len(self._traces) > _MAX_TRACES:
            self._traces.popitem(last=False)

    def emit(
        self, step: Step, out: OutputRecord, trace: str | None, trigger_time: float | None
    ) -> None:
        """Add ``out`` to the step's plan (encoded, with its traceparent) and its counts."""
        if trace is None and not isinstance(out, Audit | DeadLetter):
            trace = self._traces.get(turn_key(out.tenant, out.turn_id))
        if isinstance(out, Ledger | Dispatch):
            trace = self._trace_decision(out, trace)
        step.plan.outputs.append(encode_output(out, self.topics, trace))
        role = output_role(out)
        step.outputs[role] = step.outputs.get(role, 0) + 1
        if isinstance(out, Dispatch) and trigger_time is not None:
            step.dispatch_triggers.append(trigger_time)
        elif isinstance(out, Ledger):
            step.terminal.append((out.state, out.terminal_reason or "none"))
        elif isinstance(out, DeadLetter):
            step.deadletters.append(out.reason)
        elif isinstance(out, Audit):
            step.commands.append((out.command_type, out.outcome.value, out.rejection or "none"))

    def _trace_decision(self, out: Ledger | Dispatch, trace: str | None) -> str | None:
        """The span of an assembly decision (a ledger record: dispatched, failed, …) or of a
        dispatch (a ``send`` to the dispatch topic, whose context the dispatch record carries on
        to the executor). Without OpenTelemetry, or with nothing recording spans: no span,
        ``trace`` unchanged (a non-recording span would only carry ``trace`` on)."""
        if not tracing.recording():
            return trace if isinstance(out, Ledger) else valid_traceparent(trace)
        if isinstance(out, Ledger):
            attributes: dict[str, tracing.AttributeValue] = {
                "toolcall.tool": out.tool or "",
                "toolcall.state": out.state,
                "toolcall.terminal_reason": out.terminal_reason or "",
                "toolcall.dispatch_decision": out.dispatch_decision,
                "toolcall.fragment_count": out.fragment_count,
                "messaging.destination.partition.id": str(self.partition),
            }
            with tracing.span(
                f"assemble {out.tool or 'call'}", "internal", attributes, traceparent=trace
            ):
                return trace
        topic = self.topics.dispatch
        attributes = tracing.kafka_attributes(topic, "send", key=turn_key(out.tenant, out.turn_id))
        attributes.update({"toolcall.tool": out.tool, "toolcall.dispatch_id": out.dispatch_id})
        with tracing.span(f"send {topic}", "producer", attributes, traceparent=trace):
            return valid_traceparent(tracing.current_traceparent(trace))
