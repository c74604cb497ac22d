"""The chaos suite's seeded workload: turns with a fate, as real provider streams.

Each turn is a provider stream written the way a gateway would: Chat Completions chunks (parallel
tool calls) or Anthropic Messages events (one terminal per tool block), run through the project's
own adapters, published with the project's own :class:`~processor.kafka.publish.Publisher`;
turns are bound with ``Publisher.start_turn`` and cancelled with the ``ctl`` control writer. Like
a gateway, the driver opens one of each at start and never replaces them: through a broker or
whole-cluster kill it relies on the library's own renewal of a broken producer
(:mod:`processor.kafka.idempotent`); :meth:`Driver.gateway` reports the turns whose writes
raised and the producers' renewals (the run's ``gateway`` entry). A
turn's *fate* decides what is written and therefore what must happen to its calls:

========================  =====================================================  ============
fate                      written, each step acknowledged before the next        must
========================  =====================================================  ============
normal                    turn.started, the stream, its normal end               dispatch 1x
late_binding              the whole stream first, turn.started afterwards        dispatch 1x
cancel_before_terminal    turn.started, started + deltas, turn.cancelled, rest   never
cancel_between_terminals  two tool blocks: block A ends, turn.cancelled, block   never
                          B ends, the message ends (Anthropic)
truncated_closed          part of the stream, then the adapter closes (cut)      never
truncated_open            part of the stream, nothing more                       never
schema_invalid            a complete stream whose arguments break the schema     never
confirmed                 a ``book_slot`` turn (needs confirmation), normal; on  dispatch 1x
                          each proposal the gateway writes ``call.confirmed``
denied                    the same; on each proposal, ``call.denied``            never
cancel_before_confirm     the same; on each proposal, ``turn.cancelled`` (acked) never
                          and then ``call.confirmed``: the earlier cancel wins
cancel_after_end          normal, then ``turn.cancelled`` at once (only in runs  at most 1x
                          with executors, see below)
========================  =====================================================  ============

``cancel_after_end`` races the worker: the cancellation follows the response's end, so a call
may be dispatched before the worker applies it, or not. What matters is the executor's fence:
a dispatch record written after the cancellation must never run
(:mod:`tests.chaos.executors`). Plans made for executors turn a share of the ``normal`` turns
into it, with a random stream of its own, so every other plan of a seed stays as it was.

The confirming fates read ``proposals`` (read_committed, following) the way a gateway does, and
confirm the digest the proposal carries.

:class:`Plan` is pure (seed → turns); :class:`Driver` writes it at a steady pace and records what
was acknowledged, so the checker compares outputs with what the log really holds: a turn whose
writes failed (a broker outage) may or may not act, but never twice and never with other
arguments, and an unsafe fate stays unsafe whatever failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from processor.adapters.anthropic import AnthropicMessagesAdapter
from processor.adapters.base import StreamAdapter, TurnContext
from processor.adapters.openai_chat import OpenAIChatAdapter
from processor.core.events import CallConfirmed, CallDenied, FragmentEvent, TurnCancelled
from processor.kafka.publish import Publisher
from processor.kafka.tail import read_records
from processor.ops.ctl import ControlWriter
from processor.settings import Settings

TOOL = "get_weather"
BOOKING_TOOL = "book_slot"
BOOKING_TOOL_YAML = """
  - name: book_slot
    version: "1"
    requires_confirmation: true
    confirmation_ttl_seconds: 600
    parameters:
      type: object
      required: [date, time, party_size]
      properties:
        date: {type: string}
        time: {type: string, pattern: "^[0-2][0-9]:[0-5][0-9]$"}
        party_size: {type: integer, minimum: 1, maximum: 20}
      additionalProperties: false
"""
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
ACTOR = "user-1"
CITIES = ("Oslo", "Rome", "Lagos", "Quito", "Hanoi", "Perth", "Cusco", "Turku", "Split")


class Fate(enum.StrEnum):
    NORMAL = "normal"
    LATE_BINDING = "late_binding"
    CANCEL_BEFORE_TERMINAL = "cancel_before_terminal"
    CANCEL_BETWEEN_TERMINALS = "cancel_between_terminals"
    TRUNCATED_CLOSED = "truncated_closed"
    TRUNCATED_OPEN = "truncated_open"
    SCHEMA_INVALID = "schema_invalid"
    CONFIRMED = "confirmed"
    DENIED = "denied"
    CANCEL_BEFORE_CONFIRM = "cancel_before_confirm"
    CANCEL_AFTER_END = "cancel_after_end"  # opt-in (Plan.generate(after_end=...)): no weight

    @property
    def must_dispatch(self) -> bool:
        return self in (Fate.NORMAL, Fate.LATE_BINDING, Fate.CONFIRMED)

    @property
    def confirming(self) -> bool:
        return self in (Fate.CONFIRMED, Fate.DENIED, Fate.CANCEL_BEFORE_CONFIRM)


WEIGHTS: dict[Fate, int] = {
    Fate.NORMAL: 40,
    Fate.LATE_BINDING: 10,
    Fate.CANCEL_BEFORE_TERMINAL: 15,
    Fate.CANCEL_BETWEEN_TERMINALS: 10,
    Fate.TRUNCATED_CLOSED: 8,
    Fate.TRUNCATED_OPEN: 7,
    Fate.SCHEMA_INVALID: 10,
    Fate.CONFIRMED: 6,
    Fate.DENIED: 4,
    Fate.CANCEL_BEFORE_CONFIRM: 4,
}


class Expect(enum.StrEnum):
    """What the checker demands of one call."""

    ONCE = "once"  # dispatched exactly once, with the generated arguments
    NEVER = "never"  # never dispatched
    AT_MOST_ONCE = "at_most_once"  # its writes were not all acknowledged: 0 or 1, same arguments


@dataclass
class Turn:
    tenant: str
    turn_id: str
    fate: Fate
    arguments: list[dict[str, Any]]  # one per call, in call order
    cut: int  # how many argument bytes of the last call are written when truncated or cancelled
    binding_delay: float  # late binding: seconds between the stream's end and turn.started
    # filled by the driver
    acked: bool = False  # every write of the plan was acknowledged
    failed_writes: int = 0
    written_at: float = 0.0  # when its last write was acknowledged (time.time())
    stream_at: float = 0.0  # late binding: when the stream's write began (time.time())
    bound_at: float = 0.0  # late binding: when turn.started was acknowledged (time.time())

    def bound_late(self, wait: float) -> bool:
        """Whether turn.started may have reached the log more than ``wait`` seconds after the
        stream's terminal did (a late-bound turn's binding wait could expire, correctly)."""
        return (
            self.fate is Fate.LATE_BINDING
            and self.stream_at > 0
            and self.bound_at - self.stream_at > wait
        )

    @property
    def call_ids(self) -> list[str]:
        return [f"call-{self.turn_id}-{i}" for i in range(len(self.arguments))]

    @property
    def provider(self) -> str:
        return "anthropic" if self.fate is Fate.CANCEL_BETWEEN_TERMINALS else "openai-chat"

    def expectations(self) -> dict[tuple[str, str, str], Expect]:
        if self.fate is Fate.CANCEL_AFTER_END:
            expect = Expect.AT_MOST_ONCE  # the worker may dispatch before the cancellation
        elif not self.fate.must_dispatch:
            expect = Expect.NEVER
        else:
            expect = Expect.ONCE if self.acked else Expect.AT_MOST_ONCE
        return {(self.tenant, self.turn_id, c): expect for c in self.call_ids}


@dataclass(frozen=True)
class Plan:
    seed: int
    turns: list[Turn]

    @classmethod
    def generate(cls, seed: int, count: int, after_end: float = 0.0) -> Plan:
        """``after_end``: the share of ``normal`` turns made ``cancel_after_end``."""
        rng = random.Random(seed)
        after = random.Random(f"after-end/{seed}")
        fates = list(WEIGHTS)
        weights = [WEIGHTS[f] for f in fates]
        turns = []
        for i in range(count):
            fate = rng.choices(fates, weights)[0]
            if fate is Fate.NORMAL and after_end and after.random() < after_end:
                fate = Fate.CANCEL_AFTER_END
            calls = 2 if fate is Fate.CANCEL_BETWEEN_TERMINALS else rng.randint(1, 3)
            if fate.confirming:
                args = [_booking(rng) for _ in range(calls)]
            else:
                args = [_arguments(rng, invalid=fate is Fate.SCHEMA_INVALID) for _ in range(calls)]
            turns.append(
                Turn(
                    tenant=rng.choice(TENANTS),
                    turn_id=f"s{seed}-t{i}",
                    fate=fate,
                    arguments=args,
                    cut=rng.randint(1, 8),
                    binding_delay=rng.uniform(0.3, 2.0),
                )
            )
        return cls(seed, turns)

    def expectations(self) -> dict[tuple[str, str, str], Expect]:
        out: dict[tuple[str, str, str], Expect] = {}
        for turn in self.turns:
            out.update(turn.expectations())
        return out

    def fates(self) -> dict[tuple[str, str, str], tuple[Fate, bool]]:
        """Each call's turn fate, and whether every write of the turn was acknowledged."""
        return {(t.tenant, t.turn_id, c): (t.fate, t.acked) for t in self.turns for c in t.call_ids}

    def arguments(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        return {
            (t.tenant, t.turn_id, c): a
            for t in self.turns
            for c, a in zip(t.call_ids, t.arguments, strict=True)
        }


def _arguments(rng: random.Random, *, invalid: bool) -> dict[str, Any]:
    city = f"{rng.choice(CITIES)} {rng.randint(1, 9999)}"
    args: dict[str, Any] = {"city": city, "units": rng.choice(["c", "f"])}
    if rng.random() < 0.5:
        args["country"] = "X" * rng.randint(1, 40)
    if invalid:
        args["units"] = "kelvin"  # not in the schema's enum
    return args


def _booking(rng: random.Random) -> dict[str, Any]:
    return {
        "date": f"2031-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "time": f"{rng.randint(0, 23):02d}:{rng.choice(['00', '15', '30', '45'])}",
        "party_size": rng.randint(1, 20),
    }


# ---------------------------------------------------------------------------- provider streams


def _pieces(text: str, rng: random.Random) -> list[str]:
    out, i = [], 0
    while i < len(text):
        n = rng.randint(4, 32)
        out.append(text[i : i + n])
        i += n
    return out


def chat_chunks(turn: Turn, rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Chat Completions chunks of the turn's parallel calls, and the finishing chunk."""
    rid = f"chatcmpl-{turn.turn_id}"
    chunks: list[dict[str, Any]] = []
    for index, (call_id, args) in enumerate(zip(turn.call_ids, turn.arguments, strict=True)):
        head = {"index": index, "id": call_id, "type": "function"}
        head["function"] = {"name": BOOKING_TOOL if turn.fate.confirming else TOOL, "arguments": ""}
        chunks.append(_chat(rid, [head]))
        for piece in _pieces(orjson.dumps(args).decode(), rng):
            chunks.append(_chat(rid, [{"index": index, "function": {"arguments": piece}}]))
    finish = {"id": rid, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    return chunks, finish


def _chat(rid: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    choice = {"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}
    return {"id": rid, "object": "chat.completion.chunk", "choices": [choice]}


def anthropic_blocks(turn: Turn, rng: random.Random) -> list[list[dict[str, Any]]]:
    """message_start, then per tool block its start, deltas and stop; then the message end."""
    start = {"type": "message_start", "message": {"id": f"msg_{turn.turn_id}", "content": []}}
    blocks: list[list[dict[str, Any]]] = [[start]]
    for index, (call_id, args) in enumerate(zip(turn.call_ids, turn.arguments, strict=True)):
        block = {"type": "tool_use", "id": call_id, "name": TOOL, "input": {}}
        events = [{"type": "content_block_start", "index": index, "content_block": block}]
        for piece in _pieces(orjson.dumps(args).decode(), rng):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
        blocks.append(events)
    end = [
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
    ]
    blocks.append(end)
    return blocks


# ---------------------------------------------------------------------------- the driver


@dataclass
class Driver:
    """Writes a plan at a steady pace; ``paused`` is cleared while the broker is down."""

    settings: Settings
    plan: Plan
    duration: float
    paused: asyncio.Event = field(default_factory=asyncio.Event)
    cancels: list[str] = field(default_factory=list)
    proposals: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    proposal_timeouts: list[tuple[str, str, str]] = field(default_factory=list)
    proposal_wait: float = 240.0  # seconds a gateway waits for a proposal (faults included)
    _publisher: Publisher | None = None
    _control: ControlWriter | None = None

    async def run(self) -> None:
        self.paused.set()
        watcher = asyncio.create_task(self._watch_proposals())
        try:
            async with (
                Publisher(self.settings) as publisher,
                ControlWriter(self.settings) as control,
            ):
                self._publisher, self._control = publisher, control
                start = time.monotonic()
                gap = self.duration / max(1, len(self.plan.turns))
                tasks = []
                for i, turn in enumerate(self.plan.turns):
                    await asyncio.sleep(max(0.0, start + i * gap - time.monotonic()))
                    await self.paused.wait()
                    tasks.append(asyncio.create_task(self._turn(turn)))
                await asyncio.gather(*tasks)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    def gateway(self) -> dict[str, int]:
        """What the load generator, built as a gateway, went through: turns with a write that
        raised, and how often each of its two producers replaced itself (the library's renewal
        after a fatal producer error: the driver has none of its own)."""
        started = {
            "publisher": self._publisher.producers.generation if self._publisher else 0,
            "control writer": self._control.producers.generation if self._control else 0,
        }
        return {
            "failed_turns": sum(1 for t in self.plan.turns if t.failed_writes),
            **{f"{name} renewals": max(0, n - 1) for name, n in started.items()},
        }

    async def _watch_proposals(self) -> None:
        """Follow ``proposals`` (read_committed) as a gateway does; survive broker restarts."""
        topic = self.settings.topics.output("proposals")
        while True:
            try:
                async for record in read_records(self.settings, topic, follow=True):
                    r = orjson.loads(record.value)
                    self.proposals[(r["tenant"], r["turn_id"], r["call_id"])] = r
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(1)

    async def _proposal(self, key: tuple[str, str, str]) -> dict[str, Any]:
        deadline = time.monotonic() + self.proposal_wait
        while key not in self.proposals:
            if time.monotonic() > deadline:
                self.proposal_timeouts.append(key)
                raise TimeoutError(f"no proposal for {key}")
            await asyncio.sleep(0.2)
        return self.proposals[key]

    async def _decide(self, proposal: dict[str, Any], *, confirm: bool) -> None:
        assert self._control is not None
        fields = {
            k: proposal[k] for k in ("tenant", "turn_id", "response_id", "item_id", "call_id")
        }
        kind: type[CallConfirmed] | type[CallDenied] = CallConfirmed if confirm else CallDenied
        event = kind(
            command_id=f"chaos-{'confirm' if confirm else 'deny'}-{proposal['call_id']}",
            issued_by="gateway",
            issued_at=time.time(),
            actor=ACTOR,
            args_digest=proposal["args_digest"],
            **fields,
        )
        await asyncio.wait_for(self._control.write(event), 60)

    async def _turn(self, turn: Turn) -> None:
        rng = random.Random(f"{self.plan.seed}/{turn.turn_id}")
        ctx = TurnContext(tenant=turn.tenant, turn_id=turn.turn_id, actor=ACTOR)
        try:
            await _STEPS[turn.fate](self, turn, ctx, rng)
            turn.acked = True
        except Exception:
            turn.failed_writes += 1
        turn.written_at = time.time()

    # -- writes ----------------------------------------------------------------------------

    async def _publish(self, events: list[FragmentEvent]) -> None:
        assert self._publisher is not None
        if events:
            await asyncio.wait_for(self._publisher.publish(events), 60)

    async def _bind(self, ctx: TurnContext) -> None:
        assert self._publisher is not None
        await asyncio.wait_for(self._publisher.start_turn(ctx), 60)

    async def _cancel(self, turn: Turn) -> None:
        assert self._control is not None
        event = TurnCancelled(
            command_id=f"chaos-cancel-{turn.turn_id}",
            issued_by="gateway",
            issued_at=time.time(),
            reason="user_stop",
            tenant=turn.tenant,
            turn_id=turn.turn_id,
        )
        await asyncio.wait_for(self._control.write(event), 60)
        self.cancels.append(event.command_id)


def _feed(adapter: StreamAdapter, chunks: list[dict[str, Any]]) -> list[FragmentEvent]:
    return [e for c in chunks for e in adapter.feed(c)]


async def _normal(d: Driver, turn: Turn, ctx: TurnContext, rng: random.Random) -> None:
    adapter = OpenAIChatAdapter(ctx, now=time.time)
    chunks, finish = chat_chunks(turn, rng)
    await d._bind(ctx)
    half = len(chunks) // 2
    await d._publish(_feed(adapter, chunks[:half]))
    await d._publish(_feed(adapter, [*chunks[half:], finish]) + adapter.close())


async def _cancel_after_end(d: Driver, turn: Turn, ctx: TurnContext, rng: random.Random) -> None:
    await _normal(d, turn, ctx, rng)
    await d._cancel(turn)


async def _late_binding(d: Driver, turn: Turn, ctx: TurnContext, rng: random.Random) -> None:
    adapter = OpenAIChatAdapter(ctx, now=time.time)
    chunks, finish = chat_chunks(turn, rng)
    turn.stream_at = time.time()
    await d._publish(_feed(adapter, [*chunks, finish]) + adapter.close())
    await asyncio.sleep(turn.binding_delay)
    await d._bind(ctx)
    turn.bound_at = time.time()


async def _cancel_before(d: Driver, turn: Turn, ctx: TurnContext, rng: random.Random) -> None:
    adapter = OpenAIChatAdapter(ctx, now=time.time)
    chunks, finish = chat_chunks(turn, rng)
    await d._bind(ctx)
    keep = max(1, len(chunks) - turn.cut)
    await d._publish(_feed(adapter, chunks[:keep]))
    await d._cancel(turn)  # acknowledged before any terminal is written
    await d._publish(_feed(adapter, [*chunks[keep:], finish]) + adapter.close())


async def _cancel_between(d: Driver, turn: Turn, ctx: TurnContext, rng: random.Random) -> None:
    adapter = AnthropicMessagesAdapter(ctx, now=time.time)
    start, block_a, block_b, end = anthropic_blocks(turn, rng)
    await d._bind(ctx)
    await d._publish(_feed(adapter, start + block_a))  # block A's terminal
    await d._cancel(turn)
    await d._publish(_feed(adapter, block_b + end) + adapter.close())  # B's, then the end


async def _truncated(d: Driver, turn: Turn, ctx: TurnContext, rng: random.Random) -> None:
    adapter = OpenAIChatAdapter(ctx, now=time.time)
    chunks, _ = chat_chunks(turn, rng)
    await d._bind(ctx)
    keep = max(1, len(chunks) - turn.cut)
    events = _feed(adapter, chunks[:keep])
    if turn.fate is Fate.TRUNCATED_CLOSED:
        events += adapter.close()  # the stream was cut: the adapter ends the response inert
    await d._publish(events)


async def _schema_invalid(d: Driver, turn: Turn, ctx: TurnContext, rng: random.Random) -> None:
    await _normal(d, turn, ctx, rng)


async def _confirming(d: Driver, turn: Turn, ctx: TurnContext, rng: random.Random) -> None:
    """A normal stream of a tool that needs confirmation; then, once every call's proposal was
    read, the gateway's decision for each (a cancellation first, for cancel_before_confirm)."""
    await _normal(d, turn, ctx, rng)
    proposals = [await d._proposal((turn.tenant, turn.turn_id, c)) for c in turn.call_ids]
    if turn.fate is Fate.CANCEL_BEFORE_CONFIRM:
        await d._cancel(turn)  # acknowledged before any confirmation is written
    for proposal in proposals:
        await d._decide(proposal, confirm=turn.fate is not Fate.DENIED)


_STEPS: dict[Fate, Callable[[Driver, Turn, TurnContext, random.Random], Any]] = {
    Fate.NORMAL: _normal,
    Fate.LATE_BINDING: _late_binding,
    Fate.CANCEL_BEFORE_TERMINAL: _cancel_before,
    Fate.CANCEL_BETWEEN_TERMINALS: _cancel_between,
    Fate.TRUNCATED_CLOSED: _truncated,
    Fate.TRUNCATED_OPEN: _truncated,
    Fate.SCHEMA_INVALID: _schema_invalid,
    Fate.CONFIRMED: _confirming,
    Fate.DENIED: _confirming,
    Fate.CANCEL_BEFORE_CONFIRM: _confirming,
    Fate.CANCEL_AFTER_END: _cancel_after_end,
}
