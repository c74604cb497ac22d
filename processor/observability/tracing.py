"""OpenTelemetry spans for the shells: publish, assembly decision, dispatch, execution.

Optional: with ``opentelemetry-api`` absent (``pip install 'toolcall-processor[otel]'`` adds it)
every function here is a no-op and :func:`span` yields ``None``. The sans-IO core never imports
this module; the publisher, the worker and the executor client do.

Spans follow the OpenTelemetry messaging semantic conventions for Kafka: ``messaging.system`` =
``kafka``, ``messaging.destination.name``, ``messaging.operation.type`` (``send`` for a publish,
``process`` for a consumed record; ``send`` is the current name of what older conventions called
``publish``), ``messaging.operation.name``, ``messaging.kafka.message.key``,
``messaging.destination.partition.id``, ``messaging.kafka.offset``,
``messaging.consumer.group.name`` and ``messaging.batch.message_count``. Span names are
``"{operation} {topic}"``; spans of the tool call itself (``assemble``, ``execute``) are internal.

The spans are linked by the W3C ``traceparent`` the records carry in their Kafka headers (see
:mod:`processor.kafka.codec`): a span started for a record is the child of the record's
``traceparent``, and a publish writes its own span's context into the header it sends, so the
worker's and the executor's spans join the gateway's trace. Nothing here records argument values:
attributes are names, ids, topics, offsets and outcomes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, Literal

try:  # optional dependency
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised when the extra is not installed
    _trace = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

__all__ = [
    "ENABLED",
    "SpanKindName",
    "annotate",
    "current_traceparent",
    "kafka_attributes",
    "recording",
    "span",
]

ENABLED: Final = _trace is not None
"""True when ``opentelemetry-api`` is importable."""

SCOPE: Final = "toolcall-processor"

SpanKindName = Literal["producer", "consumer", "internal"]

AttributeValue = str | bool | int | float


def _kind(name: SpanKindName) -> Any:
    assert _trace is not None
    return {
        "producer": _trace.SpanKind.PRODUCER,
        "consumer": _trace.SpanKind.CONSUMER,
        "internal": _trace.SpanKind.INTERNAL,
    }[name]


def kafka_attributes(
    topic: str,
    operation: Literal["send", "process"],
    *,
    key: bytes | str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    group: str | None = None,
    batch: int | None = None,
) -> dict[str, AttributeValue]:
    """The messaging attributes of one Kafka operation (absent values are left out)."""
    attrs: dict[str, AttributeValue] = {
        "messaging.system": "kafka",
        "messaging.destination.name": topic,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }
    if key is not None:
        attrs["messaging.kafka.message.key"] = (
            key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        )
    if partition is not None:
        attrs["messaging.destination.partition.id"] = str(partition)
    if offset is not None:
        attrs["messaging.kafka.offset"] = offset
    if group is not None:
        attrs["messaging.consumer.group.name"] = group
    if batch is not None:
        attrs["messaging.batch.message_count"] = batch
    return attrs


@contextmanager
def span(
    name: str,
    kind: SpanKindName,
    attributes: Mapping[str, AttributeValue],
    *,
    traceparent: str | None = None,
) -> Iterator[Any]:
    """A span named ``name``, child of ``traceparent`` when given, else of the current span.

    Yields the span (``None`` without OpenTelemetry). An exception leaving the block is recorded
    by type only (``record_exception=False``: messages may quote argument text) and re-raised.
    """
    if _trace is None:
        yield None
        return
    context = None
    if traceparent:
        context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    tracer = _trace.get_tracer(SCOPE)
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=_kind(kind),
        attributes=dict(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute("error.type", type(exc).__name__)
            current.set_status(_trace.Status(_trace.StatusCode.ERROR, type(exc).__name__))
            raise


def recording() -> bool:
    """Whether spans can be recorded: OpenTelemetry is importable and a tracer provider other
    than the API's default (proxy, no-op) is installed. Without one a span is a non-recording
    carrier of its parent's context, which a caller holding that context may skip."""
    if _trace is None:
        return False
    provider = _trace.get_tracer_provider()
    return not isinstance(provider, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))


def annotate(attributes: Mapping[str, AttributeValue]) -> None:
    """Set attributes on the current span (the ``process`` span of the record in hand)."""
    if _trace is not None:
        _trace.get_current_span().set_attributes(dict(attributes))


def current_traceparent(fallback: str | None = None) -> str | None:
    """The W3C ``traceparent`` of the current span (to write into a record's headers), or
    ``fallback`` when there is no valid current span or no OpenTelemetry."""
    if _trace is None:
        return fallback
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", fallback)
