"""Fuzz targets: hostile input for the JSON scanner, every adapter, the eventstream decoder, the
record decoder and the tool-schema validation.

Each target is a function ``(rng) -> None`` that builds one case from its own seeded
``random.Random``, runs it, and raises :class:`Escape` when the code under test misbehaves. The
runner (:func:`run`) gives case ``i`` of a run with seed ``s`` the rng ``Random(f"{s}:{name}:{i}")``,
so every finding is reproduced by ``python -m tests.fuzz --target NAME --seed S --case I``.

Targets and what counts as an escape:

``jsonscan``     a random or mutated JSON text, fed to :class:`JsonSyntaxScanner` in a random
                 chunking, must be accepted exactly when the strict reference accepts it
                 (orjson, plus the I-JSON rules the scanner enforces: no duplicate member names,
                 integers within +-(2**53-1), finite numbers, no lone surrogates and no
                 noncharacters, raw or escaped, in strings and names, depth); the
                 scanner may raise only MalformedJson or LimitExceeded.
``adapters``     a real recording (tests/adapters/data) with random mutations (dropped, doubled,
                 swapped, truncated or garbage events, leaves replaced, keys deleted, bytes
                 flipped in the body), through its adapter and the real Assembler: the adapter
                 raises nothing but AdapterError, the Assembler raises nothing, every dispatch
                 is of a call whose response the stream ended normally before it, and no call
                 (call key) nor ``dispatch_id`` is dispatched twice.
``garbage``      random bytes or random JSON values to every adapter: AdapterError only, and no
                 dispatch at all.
``records``      wire records (each text recording's adapter output, after its turn.started)
                 with hostile changes (flipped or random bytes, any JSON value in a field, keys
                 deleted, wrong type or version, duplicated and reordered records, the stream
                 replayed from a point on as a reconnecting gateway does) through
                 ``processor replay``'s loop: nothing raises, every record the decoder rejects
                 gives exactly one dead letter with that reason, a dispatch comes only after
                 its response completed, and at most one dispatch per call and ``dispatch_id``.
``schemas``      random tool schemas and arguments through the registry's validation, against
                 jsonschema's own validator (:mod:`tests.fuzz.schemas` says what escapes).
``toolsfile``    hostile tools files through the loader: a RegistryError or a registry, nothing
                 else (:mod:`tests.fuzz.toolsfile`).
``eventstream``  the recorded Bedrock body with corrupted lengths, CRCs, bytes, truncations and
                 random chunkings: only AdapterError; without a recomputed CRC, every message
                 decoded is one of the original messages; an intact body decodes identically in
                 any chunking.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import random
import signal
import struct
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from processor.adapters.anthropic import AnthropicMessagesAdapter
from processor.adapters.base import StreamAdapter, TurnContext
from processor.adapters.bedrock import BedrockConverseAdapter
from processor.adapters.eventstream import EventStreamDecoder
from processor.adapters.gemini import GeminiAdapter
from processor.adapters.openai_chat import OpenAIChatAdapter
from processor.adapters.openai_responses import OpenAIResponsesAdapter
from processor.adapters.sse import iter_provider_events
from processor.cli.offline import replay
from processor.core.assembler import Assembler
from processor.core.errors import AdapterError, LimitExceeded, MalformedJson, RecordRejected
from processor.core.events import (
    CONTROL_TYPES,
    FRAGMENT_TYPES,
    CallStarted,
    DeadLetter,
    Dispatch,
    FragmentEvent,
    ResponseEnded,
    ResponseStatus,
    TurnStarted,
    decode_input,
    encode,
)
from processor.core.jsonscan import JsonSyntaxScanner
from processor.core.registry import Registry
from tests.fuzz import schemas, toolsfile

DATA = Path(__file__).resolve().parents[1] / "adapters" / "data"
CTX = TurnContext(tenant="t1", turn_id="turn-1", actor="user-1", session="s1")
MAX_SAFE = 2**53 - 1


STATS: Counter[str] = Counter()
"""Outcome counts of every case run in this process (to show the oracles see both sides)."""


class Escape(AssertionError):
    """The code under test did something a hostile input must never make it do."""


# =============================================================================== jsonscan

_INTS = ["0", "-0", "7", str(MAX_SAFE), str(-MAX_SAFE), str(MAX_SAFE + 1), str(-MAX_SAFE - 1),
         "18446744073709551616", "1" * 30]  # fmt: skip
_FLOATS = ["0.5", "-0.0", "1e2", "1E+2", "1e-2", "1.5e308", "1e309", "-1e400", "1e-400",
           "123456789012345678901234567890.5"]  # fmt: skip
_BAD_NUMBERS = ["01", "1.", ".5", "+1", "1e", "-", "1e+", "0x1F", "NaN", "Infinity", "-Infinity"]
_STRINGS = ['"a"', '""', '"\\n\\t\\"\\\\\\/"', '"\\u0041"', '"\\ud83d\\ude00"', '"é€😀"',
            '"\\ud800"', '"\\udc00x"', '"\\ud800\\u0041"', '"\\x"', '"\\u12"', '"\x01"',
            '"\ud800"', '"a\nb"', '"\\uDFFF"', '"\\uFFFE"', '"x\ufdd0"', '"\\udbff\\udfff"',
            '"\U0001ffff"', '"\\uFDCF\ufdf0\\ufffd"']  # fmt: skip
_LITERALS = ["true", "false", "null", "tru", "nul", "True", "None"]
_WS = ["", "", "", " ", "\n", "\t", "\r\n", "\x0b", "\xa0"]
_NAMES = ['"a"', '"b"', '"\\u0061"', '"a"', '"\\ud800"', '""', '"é"', '"\\uFDEF"', '"\U0010fffe"']


def _ws(rng: random.Random) -> str:
    return rng.choice(_WS) if rng.random() < 0.3 else ""


def _value(rng: random.Random, depth: int, max_depth: int) -> str:
    roll = rng.random()
    if depth < max_depth + 2 and roll < 0.35:
        if rng.random() < 0.5:
            items = [_value(rng, depth + 1, max_depth) for _ in range(rng.randint(0, 3))]
            return "[" + ",".join(_ws(rng) + i + _ws(rng) for i in items) + "]"
        return _object(rng, depth + 1, max_depth)
    pool = rng.choice([_INTS, _FLOATS, _STRINGS, _LITERALS, _BAD_NUMBERS if roll > 0.9 else _INTS])
    return rng.choice(pool)


def _object(rng: random.Random, depth: int, max_depth: int) -> str:
    members = [
        f"{rng.choice(_NAMES)}{_ws(rng)}:{_ws(rng)}{_value(rng, depth, max_depth)}"
        for _ in range(rng.randint(0, 3))
    ]
    return "{" + _ws(rng) + ",".join(members) + _ws(rng) + "}"


def _deep(rng: random.Random, max_depth: int) -> str:
    depth = max_depth + rng.randint(-2, 2)
    inner = rng.choice(["1", '"x"', "{}", "[]"])
    return '{"a":' + "[" * (depth - 1) + inner + "]" * (depth - 1) + "}"


_MUTATION_ALPHABET = '{}[]:,"\\u0123456789abcdefeE+-. \n\ttrfnl\x00\x1f\ud800é\uffff\U0003fffe'


def mutate_text(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 3)):
        i = rng.randint(0, len(text))
        op = rng.randrange(5)
        if op == 0 and text:
            text = text[:i] + text[i + 1 :]
        elif op == 1:
            text = text[:i] + rng.choice(_MUTATION_ALPHABET) + text[i:]
        elif op == 2 and text:
            j = rng.randint(0, len(text))
            text = text[:i] + text[min(i, j) : max(i, j)] + text[i:]
        elif op == 3:
            text = text[:i]
        else:
            text = text + rng.choice(["", " ", "}", "]", ",", "{}", "x"])
    return text


def random_chunks(rng: random.Random, text: str) -> list[str]:
    if not text:
        return [text]
    cuts = sorted(rng.sample(range(1, len(text) + 1), rng.randint(0, min(len(text), 12))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def reference_accepts(text: str, max_depth: int) -> bool:
    """orjson's strict parse plus the I-JSON rules (RFC 7493) and the depth limit."""
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return False  # a raw lone surrogate cannot even be encoded as UTF-8
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(value, dict):
        return False

    def no_duplicates(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate member name")
        return dict(items)

    try:  # orjson keeps the last duplicate; the stdlib parser's hook sees them all
        exact = json.loads(text, object_pairs_hook=no_duplicates, parse_float=_Number)
    except (ValueError, RecursionError):
        return False
    return _ijson_ok(exact, 0, max_depth)


class _Number(str):
    """A number with a fraction or exponent, kept as its text (checked for overflow)."""


def _ijson_ok(value: Any, depth: int, max_depth: int) -> bool:
    if isinstance(value, _Number):
        return math.isfinite(float(value))
    if isinstance(value, str):  # no lone surrogate, no noncharacter (RFC 7493 §2.1)
        return not any(
            0xD800 <= ord(c) <= 0xDFFF or 0xFDD0 <= ord(c) <= 0xFDEF or ord(c) % 0x10000 >= 0xFFFE
            for c in value
        )
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_SAFE
    if depth + 1 > max_depth:
        return False
    if isinstance(value, list):
        return all(_ijson_ok(v, depth + 1, max_depth) for v in value)
    return all(
        _ijson_ok(k, depth + 1, max_depth) and _ijson_ok(v, depth + 1, max_depth)
        for k, v in value.items()
    )


def jsonscan_case(rng: random.Random) -> None:
    max_depth = rng.choice([4, 8, 64])
    kind = rng.random()
    text = _deep(rng, max_depth) if kind < 0.1 else _object(rng, 0, max_depth)
    if rng.random() < 0.5:
        text = mutate_text(rng, text)
    expected = reference_accepts(text, max_depth)
    scanner = JsonSyntaxScanner(max_depth=max_depth)
    try:
        for chunk in random_chunks(rng, text):
            scanner.feed(chunk)
        scanner.finish()
        got = True
    except (MalformedJson, LimitExceeded):
        got = False
    except Exception as exc:
        raise Escape(f"scanner raised {type(exc).__name__} on {text!r}") from exc
    STATS[f"jsonscan.{'accepted' if got else 'rejected'}"] += 1
    if got != expected:
        raise Escape(f"scanner {'accepts' if got else 'rejects'} {text!r}, the reference does not")


# =============================================================================== adapters

AdapterFactory = Callable[[], StreamAdapter]
_BY_FOLDER: dict[str, AdapterFactory] = {
    "anthropic": lambda: AnthropicMessagesAdapter(CTX),
    "openai-chat": lambda: OpenAIChatAdapter(CTX),
    "openai-compat-chat": lambda: OpenAIChatAdapter(CTX),
    "groq": lambda: OpenAIChatAdapter(CTX),
    "openai-responses": lambda: OpenAIResponsesAdapter(CTX),
    "gemini": lambda: GeminiAdapter(CTX),
    "bedrock-converse": lambda: BedrockConverseAdapter(CTX),
}


@dataclass(frozen=True)
class Recording:
    name: str
    factory: AdapterFactory
    body: bytes
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_eventstream(self) -> bool:
        return self.name.endswith(".eventstream")


def recordings() -> list[Recording]:
    out: list[Recording] = []
    for folder, factory in sorted(_BY_FOLDER.items()):
        for path in sorted((DATA / folder).iterdir()):
            if path.name.endswith(".decoded.jsonl"):
                continue
            body = path.read_bytes()
            events = [] if path.suffix == ".eventstream" else list(iter_provider_events(body))
            out.append(Recording(f"{folder}/{path.name}", factory, body, events))
    return out


@functools.cache
def _recordings() -> list[Recording]:
    return recordings()


def random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.3:
        return {rng.choice(["type", "id", "index", "delta", "x", ""]): random_json(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}  # fmt: skip
    if depth < 3 and roll < 0.45:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice([None, True, False, 0, -1, 2**63, 1.5, "", "x", "{", "call_0", "\x00",
                       "tool_use", "function_call", "stop", "end_turn", "[DONE]"])  # fmt: skip


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [path] + [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [path] + [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _set(root: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    node = root
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return root


def mutate_events(rng: random.Random, events: list[Any]) -> list[Any]:
    events = [orjson.loads(orjson.dumps(e)) for e in events]  # deep copies
    for _ in range(rng.randint(1, 4)):
        if not events:
            events.append(random_json(rng))
            continue
        i = rng.randrange(len(events))
        op = rng.randrange(8)
        if op == 0:
            del events[i]
        elif op == 1:
            events.insert(i, events[i])
        elif op == 2 and i + 1 < len(events):
            events[i], events[i + 1] = events[i + 1], events[i]
        elif op == 3:
            events = events[:i]
        elif op == 4:
            path = rng.choice(_leaves(events[i]))
            events[i] = _set(events[i], path, random_json(rng))
        elif op == 5:
            dicts = [p for p in _leaves(events[i]) if isinstance(_get(events[i], p), dict)]
            target = _get(events[i], rng.choice(dicts)) if dicts else None
            if target:
                del target[rng.choice(list(target))]
        elif op == 6:
            events.insert(i, rng.choice([random_json(rng), "not json", b"\xff\xfe", "{}", "[]"]))
        elif isinstance(events[i], dict):  # a mutated JSON text, fed as text
            events[i] = mutate_text(rng, orjson.dumps(events[i]).decode())
    return events


def _get(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        root = root[step]
    return root


def flip_bytes(rng: random.Random, body: bytes) -> bytes:
    data = bytearray(body)
    for _ in range(rng.randint(1, 8)):
        if not data:
            break
        i = rng.randrange(len(data))
        data[i] = rng.randrange(256)
    if rng.random() < 0.3:
        data = data[: rng.randrange(len(data) + 1)]
    return bytes(data)


def _feed(adapter: StreamAdapter, items: list[Any], *, raw: bool) -> list[FragmentEvent]:
    """Feed items (stop at the first AdapterError, as a caller must), then close."""
    out: list[FragmentEvent] = []
    try:
        for item in items:
            if raw:
                out.extend(adapter.feed_bytes(item))  # type: ignore[attr-defined]
            else:
                out.extend(adapter.feed(item))
    except AdapterError:
        STATS["adapters.adapter_error"] += 1
    except Exception as exc:
        raise Escape(f"{adapter.provider} adapter raised {type(exc).__name__}: {exc}") from exc
    try:
        out.extend(adapter.close())
    except Exception as exc:
        raise Escape(f"{adapter.provider} close() raised {type(exc).__name__}: {exc}") from exc
    return out


def _events_from_body(body: bytes) -> list[Any]:
    """Provider events of a (possibly corrupted) text body; a framing error ends the list."""
    out: list[Any] = []
    try:
        for event in iter_provider_events(body):
            out.append(event)
    except AdapterError:
        pass
    except Exception as exc:
        raise Escape(f"provider framing raised {type(exc).__name__}: {exc}") from exc
    return out


class AtMostOnce:
    """At most one dispatch per call (its call key) and per ``dispatch_id``, over a whole case:
    replays, doubled and reordered records never dispatch a call a second time."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, ...], str] = {}
        self.ids: set[str] = set()

    def check(self, dispatch: Dispatch) -> None:
        key = (dispatch.tenant, dispatch.turn_id, dispatch.response_id, dispatch.item_id,
               dispatch.call_id)  # fmt: skip
        if key in self.calls:
            raise Escape(
                f"call {dispatch.call_id} dispatched twice (dispatch_ids {self.calls[key]}, "
                f"{dispatch.dispatch_id})"
            )
        if dispatch.dispatch_id in self.ids:
            raise Escape(f"dispatch_id {dispatch.dispatch_id} of two calls ({dispatch.call_id})")
        self.calls[key] = dispatch.dispatch_id
        self.ids.add(dispatch.dispatch_id)


def assemble(events: list[FragmentEvent]) -> list[Dispatch]:
    """The real Assembler over the events; check every dispatch's response ended normally."""
    tools = sorted({e.tool for e in events if isinstance(e, CallStarted)})
    registry = Registry.from_document(
        {"tools": [{"name": name, "parameters": {"type": "object"}} for name in tools]}
    )
    assembler = Assembler(registry)
    bind = TurnStarted(
        command_id="bind", issued_by="gateway", issued_at=0.0,
        tenant=CTX.tenant, turn_id=CTX.turn_id, actor=CTX.actor,
    )  # fmt: skip
    dispatched: list[Dispatch] = []
    completed: set[str] = set()
    once = AtMostOnce()
    try:
        assembler.handle(bind, 0.0)
        for event in events:
            if isinstance(event, ResponseEnded) and event.status is ResponseStatus.COMPLETED:
                completed.add(event.response_id)
            for output in assembler.handle(event, 0.0):
                if isinstance(output, Dispatch):
                    if output.response_id not in completed:
                        raise Escape(f"dispatch before its response completed: {output.call_id}")
                    once.check(output)
                    dispatched.append(output)
                    STATS["adapters.dispatched"] += 1
    except Escape:
        raise
    except Exception as exc:
        raise Escape(f"Assembler raised {type(exc).__name__}: {exc}") from exc
    return dispatched


def adapters_case(rng: random.Random) -> None:
    rec = rng.choice(_recordings())
    if rec.is_eventstream:
        body = flip_bytes(rng, rec.body)
        assemble(_feed(rec.factory(), random_chunks_bytes(rng, body), raw=True))
        return
    if rng.random() < 0.3:
        items = _events_from_body(flip_bytes(rng, rec.body))
    else:
        items = mutate_events(rng, rec.events)
    assemble(_feed(rec.factory(), items, raw=False))


def random_chunks_bytes(rng: random.Random, body: bytes) -> list[bytes]:
    if not body:
        return [body]
    cuts = sorted(rng.sample(range(1, len(body) + 1), rng.randint(0, min(len(body), 12))))
    bounds = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def garbage_case(rng: random.Random) -> None:
    folder = rng.choice(sorted(_BY_FOLDER))
    adapter = _BY_FOLDER[folder]()
    roll = rng.random()
    if folder == "bedrock-converse" and roll < 0.5:
        body = rng.randbytes(rng.randint(0, 400))
        fragments = _feed(adapter, random_chunks_bytes(rng, body), raw=True)
    elif roll < 0.4:
        body = rng.randbytes(rng.randint(0, 400))
        if rng.random() < 0.5:
            body = b"data: " + body + b"\n\n"
        fragments = _feed(adapter, _events_from_body(body), raw=False)
    else:
        fragments = _feed(adapter, [random_json(rng) for _ in range(rng.randint(1, 12))], raw=False)
    if dispatched := assemble(fragments):
        raise Escape(f"garbage dispatched {len(dispatched)} call(s) through {folder}")


# =============================================================================== eventstream

_PRELUDE = struct.Struct(">III")


def _frames(body: bytes) -> list[bytes]:
    frames, i = [], 0
    while i < len(body):
        (total,) = struct.unpack_from(">I", body, i)
        frames.append(body[i : i + total])
        i += total
    return frames


def _reframe(frame: bytes, *, total: int | None = None, headers: int | None = None) -> bytes:
    """A frame with new prelude lengths and a valid prelude CRC (reaching the length checks)."""
    t0, h0, _ = _PRELUDE.unpack_from(frame)
    prelude = struct.pack(">II", t0 if total is None else total, h0 if headers is None else headers)
    return prelude + struct.pack(">I", zlib.crc32(prelude)) + frame[12:]


def _with_message_crc(frame: bytes) -> bytes:
    return frame[:-4] + struct.pack(">I", zlib.crc32(frame[:-4]))


def decode_all(chunks: list[bytes]) -> list[tuple[dict[str, Any], bytes]]:
    decoder = EventStreamDecoder()
    out: list[tuple[dict[str, Any], bytes]] = []
    for chunk in chunks:
        out += [(dict(m.headers), m.payload) for m in decoder.feed(chunk)]
    decoder.close()
    return out


def eventstream_case(rng: random.Random) -> None:
    [rec] = [r for r in _recordings() if r.is_eventstream]
    frames = _frames(rec.body)
    original = decode_all([rec.body])
    op = rng.randrange(6)
    crc_fixed = False
    if op == 0:  # intact body, random chunking: identical messages
        got = decode_all(random_chunks_bytes(rng, rec.body))
        if got != original:
            raise Escape("an intact body decoded differently in another chunking")
        STATS["eventstream.decoded"] += 1
        return
    i = rng.randrange(len(frames))
    frame = frames[i]
    if op == 1:
        frame = flip_bytes(rng, frame)
    elif op == 2:  # lie about the lengths, with a valid prelude CRC
        t0, h0, _ = _PRELUDE.unpack_from(frame)
        choice = [0, 1, 15, 16, t0 - 1, t0 + 1, 2**31, 2**32 - 1, 25 * 1024 * 1024]
        frame = _reframe(
            frame, total=rng.choice(choice), headers=rng.choice([h0, 0, t0, 2**32 - 1])
        )
        crc_fixed = True
    elif op == 3:  # corrupt headers or payload, then fix the message CRC
        frame = _with_message_crc(flip_bytes(rng, frame[:-4]) + frame[-4:])
        crc_fixed = True
    elif op == 4:
        frame = frame[: rng.randrange(len(frame))]
    else:
        frame = frame + rng.randbytes(rng.randint(1, 40))
    body = b"".join([*frames[:i], frame, *frames[i + 1 :]])
    try:
        got = decode_all(random_chunks_bytes(rng, body))
    except AdapterError:
        STATS["eventstream.refused"] += 1
        return
    except Exception as exc:
        raise Escape(f"eventstream decoder raised {type(exc).__name__}: {exc}") from exc
    STATS["eventstream.decoded"] += 1
    if not crc_fixed and any(m not in original for m in got):
        raise Escape("a corrupted frame decoded to a message that was never sent")


# =============================================================================== runner

# =============================================================================== records

_CONTROL_TYPES = sorted(CONTROL_TYPES)
_RECORD_KEYS = ("v", "type", "tenant", "turn_id", "response_id", "item_id", "call_id", "ts",
                "seq", "text", "tool", "status", "command_id", "issued_at", "actor", "reason")  # fmt: skip


@functools.cache
def _record_streams() -> list[list[bytes]]:
    """Each text recording's adapter output as wire records, after the turn's binding."""
    bind = TurnStarted(
        command_id="bind", issued_by="gateway", issued_at=1.0,
        tenant=CTX.tenant, turn_id=CTX.turn_id, actor=CTX.actor,
    )  # fmt: skip
    streams = []
    for rec in _recordings():
        if rec.is_eventstream:
            continue
        fragments = _feed(rec.factory(), rec.events, raw=False)
        streams.append(
            [encode(bind), *(encode(e.model_copy(update={"ts": 2.0})) for e in fragments)]
        )
    return streams


def mutate_record(rng: random.Random, line: bytes) -> bytes:
    """One hostile change to a wire record: bytes, a field's value or type, a key, the version."""
    roll = rng.random()
    if roll < 0.2:
        return flip_bytes(rng, line)
    if roll < 0.3:
        return rng.randbytes(rng.randint(0, 60))
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return flip_bytes(rng, line)  # already broken by an earlier change
    if not isinstance(record, dict):
        return orjson.dumps(random_json(rng))
    if roll < 0.6:
        record[rng.choice(_RECORD_KEYS)] = random_json(rng)
    elif roll < 0.7 and record:
        record.pop(rng.choice(list(record)))
    elif roll < 0.8:
        record["type"] = rng.choice([*_CONTROL_TYPES, *sorted(FRAGMENT_TYPES), "x", ""])
    elif roll < 0.9:
        record["v"] = rng.choice([0, 2, -1, "1", 1.0, None, True, 2**70])
    else:
        return orjson.dumps(random_json(rng))
    return json.dumps(record).encode()  # stdlib: also integers beyond 64 bits


def records_case(rng: random.Random) -> None:
    """Mutated record streams through ``processor replay``'s loop: a rejected record becomes one
    dead letter with a reason; nothing raises; a dispatch only after its response completed."""
    lines = list(rng.choice(_record_streams()))
    if rng.random() < 0.3:  # a gateway's reconnect replays the stream from some point on
        lines += lines[rng.randrange(len(lines)) :]
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(lines))
        roll = rng.random()
        if roll < 0.6:
            lines[i] = mutate_record(rng, lines[i])
        elif roll < 0.8:
            lines.insert(i, lines[rng.randrange(len(lines))])  # duplicated
        else:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]  # reordered
    registry = Registry.from_document(
        {"tools": [{"name": n, "parameters": {"type": "object"}} for n in _TOOLS_OF_RECORDINGS]}
    )
    assembler = Assembler(registry)
    completed: set[str] = set()
    once = AtMostOnce()
    for number, line in enumerate(lines, start=1):
        expected_reason: str | None = None
        if not line.strip():
            continue  # a blank line of a JSON-lines file: replay skips it
        try:
            event = decode_input(line.strip())  # replay's clock follows the records: no future
            if isinstance(event, ResponseEnded) and event.status is ResponseStatus.COMPLETED:
                completed.add(event.response_id)
        except RecordRejected as exc:
            expected_reason = exc.reason
        except Exception as exc:
            raise Escape(f"decode_input raised {type(exc).__name__}: {exc}") from exc
        try:
            outputs = list(replay([line], assembler, source="fuzz"))
            for output in outputs:
                encode(output)
        except Exception as exc:
            raise Escape(f"replay raised {type(exc).__name__} on line {number}: {exc}") from exc
        letters = [o for o in outputs if isinstance(o, DeadLetter)]
        if expected_reason is not None:
            STATS["records.dead_lettered"] += 1
            if [d.reason for d in letters] != [expected_reason] or len(outputs) != 1:
                raise Escape(f"line {number} rejected {expected_reason!r}, outputs {outputs!r}")
        elif letters and len(outputs) != 1:  # e.g. stale_event: a dead letter and nothing else
            raise Escape(f"line {number}: a dead letter among other outputs {outputs!r}")
        for output in outputs:
            if isinstance(output, Dispatch):
                STATS["records.dispatched"] += 1
                if output.response_id not in completed:
                    raise Escape(f"dispatch before its response completed: {output.call_id}")
                once.check(output)


_TOOLS_OF_RECORDINGS = (
    "get_weather", "get_temperature", "get_stock_price", "calculator", "make_file",
    "GetWeatherArgs", "getWeather", "weather",
)  # fmt: skip


def schemas_case(rng: random.Random) -> None:
    try:
        schemas.schemas_case(rng, STATS)
    except schemas.SchemaEscape as exc:
        raise Escape(str(exc)) from None


def toolsfile_case(rng: random.Random) -> None:
    try:
        toolsfile.toolsfile_case(rng, STATS)
    except toolsfile.ToolsfileEscape as exc:
        raise Escape(str(exc)) from None


TARGETS: dict[str, Callable[[random.Random], None]] = {
    "jsonscan": jsonscan_case,
    "adapters": adapters_case,
    "garbage": garbage_case,
    "eventstream": eventstream_case,
    "records": records_case,
    "schemas": schemas_case,
    "toolsfile": toolsfile_case,
}


@dataclass
class Report:
    target: str
    seed: int
    cases: int = 0
    escapes: list[tuple[int, str]] = field(default_factory=list)
    seconds: float = 0.0


def case_rng(seed: int, target: str, case: int) -> random.Random:
    return random.Random(f"{seed}:{target}:{case}")


CASE_SECONDS = 60.0
"""A case that runs longer is an escape: no input may hang what it attacks (a tools file of
nested YAML aliases loaded for minutes). Long, since this machine is shared and noisy."""


class CaseTimeout(KeyboardInterrupt):
    """Raised by the alarm of a case past its time. A KeyboardInterrupt, so the product's guards
    (which catch everything but what belongs to the process) let it through as they let ^C."""


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout


def run(
    target: str,
    seed: int,
    *,
    cases: int | None = None,
    seconds: float | None = None,
    first_case: int = 0,
    case_seconds: float = CASE_SECONDS,
) -> Report:
    """Run ``cases`` cases, or as many as fit in ``seconds``; collect escapes (never stop)."""
    report = Report(target, seed)
    fn = TARGETS[target]
    start = time.monotonic()
    i = first_case
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        while True:
            if cases is not None and report.cases >= cases:
                break
            if seconds is not None and time.monotonic() - start >= seconds:
                break
            signal.setitimer(signal.ITIMER_REAL, case_seconds)
            try:
                fn(case_rng(seed, target, i))
            except Escape as exc:
                report.escapes.append((i, str(exc)[:300]))
            except CaseTimeout:
                report.escapes.append((i, f"the case ran past {case_seconds:.0f} s"))
            except Exception as exc:  # the harness itself, or code it did not wrap: report, go on
                report.escapes.append((i, f"unexpected {type(exc).__name__}: {exc}"[:300]))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            report.cases += 1
            i += 1
    finally:
        signal.signal(signal.SIGALRM, previous)
    report.seconds = time.monotonic() - start
    return report
