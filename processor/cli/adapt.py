"""``processor adapt``: a provider's raw stream in, fragment events out (stdout or ``fragments``).

Reads the stream as the provider sends it — raw SSE text, one JSON payload a line, or Bedrock's
binary ``application/vnd.amazon.eventstream`` — detected from the first bytes or named with
``--format``, runs the provider's adapter over it incrementally, and writes the fragment events
as JSON lines, so ``processor adapt ... | processor replay --tools T.yaml`` is the whole pipeline
offline. With ``--publish`` the events go to the ``fragments`` topic instead (idempotent producer,
key = turn key, ``--traceparent`` propagated to the dispatch record).

A chunk the adapter cannot read is reported on stderr; the stream's open calls end inert through
``response.ended`` and the command exits 1. Nothing partial ever completes. Provider events of an
unknown type that name no call are ignored, and their count is reported on stderr (and, with
``--publish``, added to ``toolcall_adapter_unknown_events_total``). An SSE event the end of the
body cut (no terminating blank line) is discarded, as the SSE specification and the provider
SDKs say, and reported on stderr. ``--alternative`` chooses
which alternative of a multi-alternative response may act (see
:mod:`processor.adapters.verdicts`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import zlib
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Final, Literal

from processor.cli.flags import add_common_flags, settings_from_args
from processor.exits import UsageError

if TYPE_CHECKING:  # imported when the command runs, so `processor adapt --help` stays fast
    from processor.adapters.base import StreamAdapter, TurnContext
    from processor.core.events import FragmentEvent, TurnStarted

#: provider → ``module:class`` of its adapter (imported when the command runs)
PROVIDERS: Final[dict[str, str]] = {
    "openai-responses": "processor.adapters.openai_responses:OpenAIResponsesAdapter",
    "openai-chat": "processor.adapters.openai_chat:OpenAIChatAdapter",
    "anthropic": "processor.adapters.anthropic:AnthropicMessagesAdapter",
    "gemini": "processor.adapters.gemini:GeminiAdapter",
    "bedrock": "processor.adapters.bedrock:BedrockConverseAdapter",
}


def adapter_class(provider: str) -> type[StreamAdapter]:
    """The adapter class of ``provider`` (a key of :data:`PROVIDERS`)."""
    module, _, name = PROVIDERS[provider].partition(":")
    cls: type[StreamAdapter] = getattr(importlib.import_module(module), name)
    return cls


InputFormat = Literal["sse", "jsonl", "eventstream"]
READ_SIZE: Final = 64 * 1024


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    adapt = subparsers.add_parser("adapt", help="normalise a provider stream into fragment events")
    adapt.add_argument("--provider", required=True, choices=sorted(PROVIDERS))
    adapt.add_argument("--tenant", required=True)
    adapt.add_argument("--turn", required=True, help="turn id")
    adapt.add_argument("--actor", required=True, help="the authenticated actor of the turn")
    adapt.add_argument("--session")
    adapt.add_argument("--format", choices=["sse", "jsonl", "eventstream"], help="default: detect")
    adapt.add_argument(
        "--emit-turn-started",
        action="store_true",
        help="first write the turn.started control event the gateway would write (offline use)",
    )
    adapt.add_argument(
        "--alternative",
        type=_alternative,
        default=0,
        metavar="N|none",
        help="which alternative of a multi-alternative response (Chat n > 1, Gemini "
        "candidateCount > 1) may act: its index (default 0), or none; the others are recorded, "
        "never dispatched",
    )
    adapt.add_argument("--publish", action="store_true", help="publish to the fragments topic")
    adapt.add_argument("--traceparent", help="W3C trace context to attach (with --publish)")
    adapt.add_argument("file", nargs="?", default="-", help="the provider body, or - for stdin")
    add_common_flags(adapt)
    adapt.set_defaults(func=_adapt_command)


def _alternative(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        index = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("an alternative index (0, 1, ...) or none") from None
    if index < 0:
        raise argparse.ArgumentTypeError("an alternative index is 0 or more")
    return index


def detect_format(head: bytes) -> InputFormat:
    """eventstream when the first 12 bytes are a valid eventstream prelude, else SSE or JSONL."""
    if len(head) >= 12 and zlib.crc32(head[:8]) == int.from_bytes(head[8:12], "big"):
        return "eventstream"
    text = head.lstrip()
    return "jsonl" if text.startswith((b"{", b"[")) else "sse"


def adapt_stream(
    stream: IO[bytes], adapter: StreamAdapter, fmt: InputFormat | None = None
) -> Iterator[FragmentEvent]:
    """Yield fragment events as the stream is read. A bad chunk or frame raises AdapterError;
    the caller then calls ``adapter.abort(reason)`` for the inert ``response.ended``."""
    from processor.adapters.bedrock import BedrockConverseAdapter  # noqa: PLC0415
    from processor.adapters.sse import DISCARDED_TAIL, ProviderEventDecoder  # noqa: PLC0415
    from processor.core.errors import AdapterError  # noqa: PLC0415

    head = stream.read(READ_SIZE)
    chosen = fmt or detect_format(head)
    chunks = _chunks(head, stream)
    if chosen == "eventstream":
        if not isinstance(adapter, BedrockConverseAdapter):
            raise AdapterError("bad_format", f"{adapter.provider} streams are not eventstream")
        for chunk in chunks:
            yield from adapter.feed_bytes(chunk)
        yield from adapter.close()
        return
    decoder = ProviderEventDecoder(chosen)
    for chunk in chunks:
        for event in decoder.feed(chunk):
            yield from adapter.feed(event)
        if decoder.done:
            break
    for event in decoder.close():
        yield from adapter.feed(event)
    decoder.check()
    if decoder.discarded_tail:  # as the SDKs do: an event the body cut is never dispatched
        adapter.anomaly(DISCARDED_TAIL)
    yield from adapter.close()


def _chunks(head: bytes, stream: IO[bytes]) -> Iterator[bytes]:
    if head:
        yield head
    while chunk := stream.read(READ_SIZE):
        yield chunk


def _turn_started(ctx: TurnContext, now: float) -> TurnStarted:
    from processor.core.events import TurnStarted, stable_id  # noqa: PLC0415

    return TurnStarted(
        command_id=stable_id("turn.started", ctx.tenant, ctx.turn_id),
        issued_by="processor-adapt",
        issued_at=now,
        tenant=ctx.tenant,
        turn_id=ctx.turn_id,
        actor=ctx.actor,
        session=ctx.session,
    )


def _adapt_command(args: argparse.Namespace) -> int:
    if args.emit_turn_started and args.publish:
        raise UsageError(
            "--emit-turn-started is for offline use",
            hint="the gateway (or `processor ctl start-turn`) writes turn.started to control",
        )
    stream: IO[bytes] = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    with stream:
        return _adapt(args, stream)


def _adapt(args: argparse.Namespace, stream: IO[bytes]) -> int:
    from processor.adapters.base import TurnContext  # noqa: PLC0415
    from processor.adapters.sse import DISCARDED_TAIL  # noqa: PLC0415
    from processor.core.errors import AdapterError  # noqa: PLC0415
    from processor.core.events import encode  # noqa: PLC0415

    try:
        ctx = TurnContext(
            tenant=args.tenant, turn_id=args.turn, actor=args.actor, session=args.session
        )
    except AdapterError as exc:
        raise UsageError(str(exc), where="--tenant, --turn, --actor, --session") from None
    adapter = adapter_class(args.provider)(ctx, now=time.time, alternative=args.alternative)
    collected: list[FragmentEvent] = []

    def emit(event: FragmentEvent) -> None:
        if args.publish:
            collected.append(event)
        else:
            _write_line(encode(event))

    if args.emit_turn_started:
        _write_line(encode(_turn_started(ctx, time.time())))
    failure: AdapterError | None = None
    try:
        for event in adapt_stream(stream, adapter, args.format):
            emit(event)
    except AdapterError as exc:
        failure = exc
        for event in adapter.abort(exc.reason):  # every call still open becomes inert
            emit(event)
    if failure is not None:
        from processor.observability.terminal import printable  # noqa: PLC0415

        print(f"processor adapt: {printable(str(failure))}", file=sys.stderr)
    if DISCARDED_TAIL in adapter.anomalies:
        print(f"processor adapt: {DISCARDED_TAIL} (as the provider SDKs do)", file=sys.stderr)
    if adapter.unknown_events:
        print(
            f"processor adapt: {adapter.unknown_events} unknown {adapter.provider} event(s) "
            "ignored (they named no call)",
            file=sys.stderr,
        )
    if args.publish:
        _publish(args, collected, adapter)
    return 1 if failure is not None else 0


def _write_line(data: bytes) -> None:
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


def _publish(args: argparse.Namespace, events: list[FragmentEvent], adapter: StreamAdapter) -> None:
    import asyncio  # noqa: PLC0415

    from processor.kafka.publish import publish_events  # noqa: PLC0415
    from processor.observability import metrics  # noqa: PLC0415

    settings = settings_from_args(args)
    count = asyncio.run(publish_events(settings, events, args.traceparent))
    metrics.ADAPTER_UNKNOWN_EVENTS.labels(adapter.provider).inc(adapter.unknown_events)
    print(f"published {count} fragment events to {settings.topics.fragments}", file=sys.stderr)
