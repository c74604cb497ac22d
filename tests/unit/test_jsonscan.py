"""Tests for the incremental JSON syntax scanner (processor.core.jsonscan)."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.core.errors import LimitExceeded, MalformedJson
from processor.core.jsonscan import JsonSyntaxScanner
from processor.core.registry import Registry
from processor.core.states import TerminalReason
from processor.core.validation import Rejected, validate_call

MAX_SAFE = 2**53 - 1


# --- helpers -----------------------------------------------------------------------------------


def chunks_at(text: str, cuts: Iterable[int]) -> list[str]:
    points = sorted({c for c in cuts if 0 < c < len(text)})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def run(chunks: Sequence[str], **kwargs: Any) -> JsonSyntaxScanner:
    """Feed every chunk and finish; exceptions propagate."""
    scanner = JsonSyntaxScanner(**kwargs)
    for chunk in chunks:
        scanner.feed(chunk)
    scanner.finish()
    return scanner


def outcome(chunks: Sequence[str], **kwargs: Any) -> tuple[str, str, str] | None:
    """None when accepted, else (where it failed, error class, detail)."""
    scanner = JsonSyntaxScanner(**kwargs)
    try:
        for chunk in chunks:
            scanner.feed(chunk)
    except (MalformedJson, LimitExceeded) as exc:
        return ("feed", type(exc).__name__, exc.detail)
    try:
        scanner.finish()
    except (MalformedJson, LimitExceeded) as exc:
        return ("finish", type(exc).__name__, exc.detail)
    assert scanner.complete
    assert scanner.consumed == sum(len(c) for c in chunks)
    return None


def chunkings(text: str, seed: int, n_random: int = 8) -> list[list[str]]:
    """Whole, one character at a time, and a few seeded random splits."""
    rng = random.Random(seed)
    result = [[text], list(text)]
    for _ in range(n_random):
        k = rng.randint(1, max(1, len(text)))
        result.append(chunks_at(text, rng.sample(range(len(text) + 1), min(k, len(text) + 1))))
    return result


def reference_accepts(text: str, *, max_depth: int = 64, require_object: bool = True) -> bool:
    """json.loads plus the I-JSON rules, applied by walking the raw text and the result."""
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate member name")
        return dict(items)

    def no_constant(name: str) -> Any:
        raise ValueError(f"non-finite constant {name}")

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=no_constant)
    except (ValueError, RecursionError):
        return False
    if require_object and not isinstance(value, dict):
        return False
    return _ijson_ok(value, 0, max_depth)


def noncharacter(cp: int) -> bool:
    """RFC 7493 §2.1's noncharacters, written out from Unicode's definition (chapter 23.7)."""
    return cp in range(0xFDD0, 0xFDF0) or cp % 0x10000 in (0xFFFE, 0xFFFF)


def _ijson_ok(value: Any, depth: int, max_depth: int) -> bool:
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF or noncharacter(ord(c)) for c in value)
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_SAFE
    if isinstance(value, float):
        return math.isfinite(value)
    if depth + 1 > max_depth:
        return False
    if isinstance(value, list):
        return all(_ijson_ok(v, depth + 1, max_depth) for v in value)
    assert isinstance(value, dict)
    return all(
        _ijson_ok(k, depth + 1, max_depth) and _ijson_ok(v, depth + 1, max_depth)
        for k, v in value.items()
    )


def nest(depth: int) -> str:
    """An object whose value nests arrays so that the total depth is ``depth``."""
    return '{"a":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


# --- table-driven cases ------------------------------------------------------------------------

ACCEPT = [
    # structure and whitespace
    "{}",
    " {} ",
    "\t\n\r {}\r\n\t ",
    '{"a":1}',
    '{"a":[]}',
    '{"a":[1,2,3]}',
    '{"a":{"b":{"c":null}}}',
    '{ "a" : [ 1 , 2 ] , "b" : { } , "c" : [ ] }',
    '{"a":[[],[[]],{}]}',
    nest(64),
    # strings
    '{"a":""}',
    '{"a":"plain text"}',
    r'{"a":"\"\\\/\b\f\n\r\t"}',
    r'{"a":"\u0041\u00e9\uFFFD\ufdcf\uFDF0"}',
    r'{"a":"\ud83d\ude00"}',
    r'{"a":"\uD83D\uDE00 \uDBFE\uDFFF \uD800\uDC00"}',
    r'{"a":"\u0000\u001f"}',
    '{"a":"😀é\u2028\x7f\U0010fffd"}',
    '{"a":"\ufffd\ufdcf\ufdf0\U0001fffd\U00020000"}',  # beside the noncharacters
    r'{"a":"\uDBFF\uDFFD \uD83F\uDFFD \uD83E\uDFFF"}',  # U+10FFFD, U+1FFFD, U+1FBFF
    '{"\ufdcf\U0010fffd":"\\\\uFFFE"}',  # an escaped backslash, then the text "uFFFE"
    '{"k\\u00e9\U00020000\U0002a6d6":"\U0002a6d6x\\n\U000e0001\U0001f600"}',  # planes 2, 14
    '{"a":"\\u00e9é"}',
    # numbers
    '{"a":0}',
    '{"a":-0}',
    '{"a":[1,-1,10,123456789]}',
    '{"a":[0.5,-0.5,0.0,-0.0,10.25]}',
    '{"a":[1e5,1E5,1e+5,1e-5,1E-05,0e0,-0.0e-0]}',
    '{"a":9007199254740991}',
    '{"a":-9007199254740991}',
    '{"a":9007199254740993.0}',
    '{"a":12345678901234567890e-5}',
    '{"a":1e308}',
    '{"a":1.7976931348623157e308}',
    '{"a":-1.7976931348623157e308}',
    '{"a":1.0e-400}',
    '{"a":5e-324}',
    '{"a":1,"b":2.5,"c":-3e2}',
    # literals
    '{"a":true,"b":false,"c":null}',
    '{"a":[true,false,null]}',
    # member names
    '{"a":1,"b":2}',
    '{"a":{"a":1}}',
    '{"a":1,"A":2}',
    '{"a":[{"a":1},{"a":2}]}',
    '{"a\\u0000":1,"a":2}',
    '{"ab":1,"a":2}',
    '{"":1,"a":{"":2}}',
    '{"\\ud83d\\ude00":1,"\\ud83d\\ude01":2}',
]

# (text, fails during feed rather than at finish)
REJECT: list[tuple[str, bool]] = [
    # incomplete: only finish() can tell
    ("", False),
    ("   ", False),
    ("{", False),
    ('{"a":1', False),
    ('{"a":"x', False),
    ('{"a":1,', False),
    ('{"a":', False),
    ('{"a"', False),
    ('{"a', False),
    ('{"a":"\\u12', False),
    ('{"a":"\\ud83d', False),
    ('{"a":"\\ud83d\\', False),
    ('{"a":"\\', False),
    ('{"a":tr', False),
    ('{"a":[1', False),
    # top level
    ("[]", True),
    ("1", True),
    ('"a"', True),
    ("true", True),
    ("null", True),
    # trailing data
    ("{}x", True),
    ("{}{}", True),
    ("{} 1", True),
    ("{}\x0b", True),
    ("{}\u00a0", True),
    ("\ufeff{}", True),
    ("{}\x00", True),
    ("\x0c{}", True),
    # strings
    ('{"a":"\x00"}', True),
    ('{"a":"\x1f"}', True),
    ('{"a":"\n"}', True),
    ('{"a":"\t"}', True),
    ('{"\x01":1}', True),
    ('{"a":"\\x41"}', True),
    ('{"a":"\\U0041"}', True),
    ('{"a":"\\a"}', True),
    ('{"a":"\\0"}', True),
    ('{"a":"\\\'"}', True),
    ('{"a":"\\u12G4"}', True),
    ('{"a":"\\u 123"}', True),
    ('{"a":"\\u123"}', True),
    ('{"a":"\\ud800"}', True),
    ('{"a":"\\ud800x"}', True),
    ('{"a":"\\ud800\\u0041"}', True),
    ('{"a":"\\ud800\\ud800"}', True),
    ('{"a":"\\ud800\\n"}', True),
    ('{"a":"\\ud83d\\ude0"}', True),
    ('{"a":"\\udc00"}', True),
    ('{"a":"\\udfff"}', True),
    ('{"a":"\\uDC00\\uD800"}', True),
    ('{"\\ud800":1}', True),
    ('{"a":"\ud800"}', True),
    ('{"a":"\udc00"}', True),
    ('{"a":"\ud83d\ude00"}', True),
    ('{"\udfff":1}', True),
    ('{"a":1}\ud800', True),
    # noncharacters (RFC 7493 §2.1): U+FDD0-U+FDEF, U+nFFFE, U+nFFFF; raw or escaped
    ('{"a":"\ufdd0"}', True),
    ('{"a":"x\ufdef"}', True),
    ('{"a":"\ufffe"}', True),
    ('{"a":"\uffff"}', True),
    ('{"a":"\U0001fffe"}', True),
    ('{"a":"\U0010ffff"}', True),
    ('{"\ufdd0":1}', True),
    ('{"k\U0002ffff":1}', True),
    ('{"a":"\\uFDD0"}', True),
    ('{"a":"\\ufdef"}', True),
    ('{"a":"\\uFFFE"}', True),
    ('{"a":"\\uffff"}', True),
    ('{"a":"\\uD83F\\uDFFE"}', True),
    ('{"a":"\\udbff\\udfff"}', True),
    ('{"a":"\\uD87F\\uDFFF"}', True),
    ('{"\\uFFFF":1}', True),
    ('{"a":1,"b\\u00e9\\uFDD0":2}', True),
    ('{"\\uDBBF\\uDFFE":1}', True),
    # numbers
    ('{"a":01}', True),
    ('{"a":-01}', True),
    ('{"a":00}', True),
    ('{"a":+1}', True),
    ('{"a":.5}', True),
    ('{"a":1.}', True),
    ('{"a":1.e5}', True),
    ('{"a":1e}', True),
    ('{"a":1e+}', True),
    ('{"a":-}', True),
    ('{"a":--1}', True),
    ('{"a":1ee5}', True),
    ('{"a":1e5.0}', True),
    ('{"a":1.2.3}', True),
    ('{"a":1-2}', True),
    ('{"a":0x10}', True),
    ('{"a":1_000}', True),
    ('{"a":NaN}', True),
    ('{"a":Infinity}', True),
    ('{"a":-Infinity}', True),
    ('{"a":9007199254740992}', True),
    ('{"a":-9007199254740992}', True),
    ('{"a":12345678901234567890}', True),
    ('{"a":[1,9007199254740992]}', True),
    ('{"a":1e400}', True),
    ('{"a":-1e400}', True),
    ('{"a":1.8e308}', True),
    ('{"a":1' + "0" * 400 + ".0}", True),
    ('{"a":' + "1" * 5000 + "}", True),
    ('{"a":1 2}', True),
    # literals
    ('{"a":True}', True),
    ('{"a":nul}', True),
    ('{"a":nulll}', True),
    ('{"a":falsy}', True),
    ('{"a":undefined}', True),
    ('{"a":t rue}', True),
    # structure
    ('{"a":1,}', True),
    ("{,}", True),
    ('{"a"}', True),
    ('{"a":}', True),
    ('{"a" 1}', True),
    ('{"a"::1}', True),
    ("{a:1}", True),
    ("{'a':1}", True),
    ('{"a":[1,]}', True),
    ('{"a":[,1]}', True),
    ('{"a":[1 2]}', True),
    ('{"a":[1}', True),
    ('{"a":{]}', True),
    ('{"a":1]', True),
    ("{1:1}", True),
    ('{"a":1 "b":2}', True),
    ('{"a":1}}', True),
    ("{}]", True),
    # duplicate member names (compared after decoding)
    ('{"a":1,"a":2}', True),
    ('{"a":1,"\\u0061":2}', True),
    ('{"😀":1,"\\ud83d\\ude00":2}', True),
    ('{"\\uD83D\\uDE00":1,"\\ud83d\\ude00":2}', True),
    ('{"a":{"b":1,"b":2}}', True),
    ('{"a":[{"x":1,"x":1}]}', True),
    ('{"\\n":1,"\\u000a":2}', True),
    ('{"\\/":1,"/":2}', True),
    ('{"":1,"":2}', True),
    ('{"a":1,"b":{"a":2},"a":3}', True),
]


@pytest.mark.parametrize("text", ACCEPT, ids=range(len(ACCEPT)))
def test_accepts(text: str) -> None:
    assert reference_accepts(text), "the table disagrees with the reference"
    for chunks in chunkings(text, seed=len(text)):
        assert outcome(chunks) is None, chunks
    assert run([text]).complete


@pytest.mark.parametrize(("text", "in_feed"), REJECT, ids=range(len(REJECT)))
def test_rejects(text: str, in_feed: bool) -> None:
    assert not reference_accepts(text), "the table disagrees with the reference"
    results = {outcome(chunks) for chunks in chunkings(text, seed=len(text))}
    assert len(results) == 1, f"error depends on chunking: {results}"
    (result,) = results
    assert result is not None
    where, kind, detail = result
    assert kind == "MalformedJson"
    assert where == ("feed" if in_feed else "finish")
    assert " at char " in detail


def test_depth_limit() -> None:
    run([nest(64)])
    with pytest.raises(LimitExceeded) as info:
        run([nest(65)])
    assert info.value.reason == "depth_limit"
    for chunks in chunkings(nest(65), seed=1):
        assert outcome(chunks) is not None
        assert outcome(chunks)[:2] == ("feed", "LimitExceeded")  # type: ignore[index]
    run(['{"a":[{}]}'], max_depth=3)
    with pytest.raises(LimitExceeded):
        run(['{"a":[{"b":[]}]}'], max_depth=3)
    with pytest.raises(LimitExceeded):
        run(["[[]]"], max_depth=1, require_object=False)


@pytest.mark.parametrize(
    "text",
    ["1", "-0", "1.5e3", "  12  ", "true", "null", '"x"', '"\\ud83d\\ude00"', "[1,{}]", "{}"],
)
def test_scalar_top_level_when_object_not_required(text: str) -> None:
    assert reference_accepts(text, require_object=False)
    for chunks in chunkings(text, seed=3):
        assert outcome(chunks, require_object=False) is None
    with pytest.raises(MalformedJson) if text.strip()[0] != "{" else nullcontext():
        run([text])


@pytest.mark.parametrize("text", ["", " ", "1 2", "01", "tru", "[", '"', "9007199254740992", "-"])
def test_scalar_top_level_rejects(text: str) -> None:
    assert not reference_accepts(text, require_object=False)
    for chunks in chunkings(text, seed=4):
        assert outcome(chunks, require_object=False) is not None


def test_complete_and_consumed() -> None:
    s = JsonSyntaxScanner()
    s.feed('{"a": [1, 2')
    assert not s.complete
    assert s.consumed == 11
    s.feed("]}")
    assert s.complete
    s.feed("  \n")
    assert s.complete
    assert s.consumed == 16
    s.finish()
    assert s.complete

    t = JsonSyntaxScanner(require_object=False)
    t.feed("12")
    assert not t.complete  # "12" might continue as "123"
    t.finish()
    assert t.complete


def test_failure_is_sticky() -> None:
    s = JsonSyntaxScanner()
    s.feed('{"a":')
    with pytest.raises(MalformedJson) as first:
        s.feed("x")
    assert s.consumed == 5
    assert not s.complete
    with pytest.raises(MalformedJson) as again:
        s.feed("1}")
    assert again.value.detail == first.value.detail
    with pytest.raises(MalformedJson):
        s.finish()


def test_error_detail_never_contains_the_text() -> None:
    secret = "Zqxj"
    cases = [
        f'{{"{secret}":1,"{secret}":2}}',
        f'{{"a":{secret}}}',
        f'{{"a":"{secret}\\{secret}"}}',
        f'{{"a":"{secret}\x01"}}',
        f'{{"a":1}}{secret}',
        f"{secret}",
        f'{{"a":"\\u{secret}"}}',
        f'{{"a":1{secret}}}',
    ]
    for text in cases:
        result = outcome(list(text))
        assert result is not None
        assert secret[:2] not in result[2], result[2]


# --- early failure -----------------------------------------------------------------------------

# (text, index of the first character after which no valid continuation exists)
EARLY = [
    ('{"a": tru e}', 9),
    ('{"a": [1, 2,]}', 12),
    ('{"a": 01}', 7),
    ('{"a": "x\\q"}', 9),
    ('{"a": "\\ud83d\\u0041"}', 15),
    ('{"a": "\\ud83d\\ud83d"}', 16),
    ('{"a": "\\udc00"}', 10),
    ('{"a":1,"a":2}', 9),
    ('{"a":1}}', 7),
    ("[1]", 0),
    ('{"a": 1.}', 8),
    ('{"a":-x}', 6),
    ('{"a":"\x01"}', 6),
    ('{"a" 1}', 5),
    ("{,}", 1),
    ('{"a":9007199254740993, "b": "a long value that is never needed"}', 21),
    ('{"a":1e400 , "b": "still not needed"}', 10),
    ('{"a":{"b":[1,2,{"c":nulL}]}, "more": "text"}', 23),
]


@pytest.mark.parametrize(("text", "bad"), EARLY, ids=range(len(EARLY)))
def test_fails_at_first_impossible_character(text: str, bad: int) -> None:
    assert not reference_accepts(text)
    s = JsonSyntaxScanner()
    for i, c in enumerate(text):
        if i < bad:
            s.feed(c)  # every prefix up to here can still become a valid document
        else:
            with pytest.raises(MalformedJson):
                s.feed(c)
            break
    # fed at once, the whole text also fails during feed(), never only at finish()
    with pytest.raises(MalformedJson):
        JsonSyntaxScanner().feed(text)


# --- snapshots ---------------------------------------------------------------------------------

SNAPSHOT_DOC = (
    '{"name": "caf\\u00e9 \\ud83d\\ude00 😀", "n": [0, -12.5e-3, 9007199254740991, 1E+2],'
    ' "flags": {"t": true, "f": false, "z": null}, "\\u0061b": [[], {}, ""], "ab2": "\\"\\\\"}'
)


def _restore(s: JsonSyntaxScanner) -> JsonSyntaxScanner:
    data = orjson.loads(orjson.dumps(s.snapshot()))
    return JsonSyntaxScanner.from_snapshot(data)


def test_snapshot_round_trip_at_every_position() -> None:
    straight = run([SNAPSHOT_DOC])
    for i in range(len(SNAPSHOT_DOC) + 1):
        s = JsonSyntaxScanner()
        s.feed(SNAPSHOT_DOC[:i])
        r = _restore(s)
        assert r.snapshot() == s.snapshot()
        assert r.consumed == i
        r.feed(SNAPSHOT_DOC[i:])
        r.finish()
        assert r.complete
        assert r.snapshot() == straight.snapshot()


def test_snapshot_round_trip_char_by_char_restoring_each_time() -> None:
    s = JsonSyntaxScanner()
    for c in SNAPSHOT_DOC:
        s = _restore(s)
        s.feed(c)
    s = _restore(s)
    s.finish()
    assert s.complete


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"b":{"c":2},"a":3}',
        '{"x":"\\ud83d\\u0041"}',
        '{"x":12345678901234567}',
        '{"x":1e400}',
        '{"x":[' * 2 + "]",
    ],
)
def test_snapshot_reproduces_failure(text: str) -> None:
    expected = outcome([text])
    for i in range(len(text) + 1):
        current = JsonSyntaxScanner()
        try:
            current.feed(text[:i])
            current = _restore(current)
            current.feed(text[i:])
            current.finish()
        except (MalformedJson, LimitExceeded) as exc:
            assert exc.detail == expected[2]  # type: ignore[index]
            # a failed scanner restored from its snapshot stays failed
            with pytest.raises(type(exc)) as again:
                _restore(current).feed("")
            assert again.value.detail == exc.detail
        else:
            pytest.fail("accepted an invalid document")


@pytest.mark.parametrize(
    "patch",
    [{"v": 99}, {"mode": 99}, {"stack": "x"}, {"stack": [1]}, {"failure": [1]}, {"max_depth": 0}],
)
def test_from_snapshot_rejects_corrupt_data(patch: dict[str, object]) -> None:
    data = JsonSyntaxScanner().snapshot() | patch
    with pytest.raises(ValueError):
        JsonSyntaxScanner.from_snapshot(data)


# --- properties --------------------------------------------------------------------------------

_tricky_text = st.text(
    alphabet=st.sampled_from(
        list('a"\\/\b\x00\x1f\x7f é\u2028\ufffd\ufdcf\ufdf0😀\U0010fffd\U0001fbff{}[]:,')
    ),
    max_size=12,
)
NONCHARACTERS = [chr(cp) for cp in range(0x110000) if noncharacter(cp)]
_text_chars = st.characters(exclude_categories=("Cs",), exclude_characters=NONCHARACTERS)
_keys = st.one_of(st.text(_text_chars, max_size=8), _tricky_text)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-MAX_SAFE, MAX_SAFE),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(_text_chars, max_size=20),
    _tricky_text,
)
json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(_keys, children, max_size=5),
    ),
    max_leaves=25,
)
json_objects = st.dictionaries(_keys, json_values, max_size=6)


def serialise(value: Any, style: int) -> str:
    if style == 0:
        return orjson.dumps(value).decode()
    if style == 1:
        return json.dumps(value, ensure_ascii=True)
    if style == 2:
        return json.dumps(value, ensure_ascii=False, indent=2)
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_objects, style=st.integers(0, 3), data=st.data())
def test_any_chunking_of_valid_json_is_accepted(value: Any, style: int, data: Any) -> None:
    text = serialise(value, style)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=max(1, len(text))))
    chunks = chunks_at(text, cuts)
    scanner = run(chunks)
    assert scanner.complete
    assert "".join(chunks) == text
    assert orjson.loads(text) == value


_MUTATION_PIECES = [
    *'{}[]:,"\\ \t\n0189-+.eEtfnulrsaAdDcC\x00\x1f\x7f\x0b\ufeff',
    "\ud800",
    "\udc00",
    "😀",
    "true",
    "null",
    "false",
    "\\u",
    "\\ud83d",
    "\\ude00",
    "\\udc00",
    "\\u0061",
    "\ufdd0",
    "\uffff",
    "\U0001fffe",
    "\\uFDEF",
    "\\ufffe",
    "\\uD83F\\uDFFF",
    "\\udbff\\udffe",
    "1e400",
    "9007199254740993",
    "-9007199254740991",
    '"a":1,',
    '"a"',
    "01",
    "1.",
    ".5",
    "NaN",
    "Infinity",
    "[[",
    "]]",
]


@st.composite
def near_valid_text(draw: st.DrawFn) -> str:
    text = serialise(draw(json_objects), draw(st.integers(0, 3)))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        pos = draw(st.integers(0, len(text)))
        piece = draw(st.sampled_from(_MUTATION_PIECES))
        if op == "insert":
            text = text[:pos] + piece + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 3)) :]
        else:
            text = text[:pos] + piece + text[pos + 1 :]
    return text


_piece_soup = st.lists(st.sampled_from(_MUTATION_PIECES), max_size=30).map("".join)
random_text = st.one_of(
    near_valid_text(),
    _piece_soup,
    _piece_soup.map(lambda body: "{" + body),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=random_text, data=st.data())
def test_agrees_with_reference(text: str, data: Any) -> None:
    expected = reference_accepts(text)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=8))
    results = {outcome(chunks) for chunks in ([text], list(text), chunks_at(text, cuts))}
    assert len(results) == 1, f"result depends on chunking: {results}"
    (result,) = results
    assert (result is None) == expected, result


@settings(max_examples=300, deadline=None)
@given(text=random_text)
def test_agrees_with_reference_for_any_top_level(text: str) -> None:
    text = text.lstrip("{") if text.startswith("{") else text
    expected = reference_accepts(text, require_object=False)
    assert (outcome([text], require_object=False) is None) == expected
    assert (outcome(list(text), require_object=False) is None) == expected


# --- noncharacters (issue 29, item 4) ------------------------------------------------------------

_nonchars = st.sampled_from(NONCHARACTERS)


@st.composite
def poisoned(draw: st.DrawFn) -> tuple[str, str]:
    """(a document holding one noncharacter in a string value or a member name, at any depth,
    raw or escaped in any case, the same document with U+FFFD in its place)."""
    obj = draw(json_objects)
    nc = draw(_nonchars)
    carrier = draw(st.text(_text_chars, max_size=4)) + nc + draw(st.text(_text_chars, max_size=4))
    where = draw(st.integers(0, 4))
    inner: Any = [
        {carrier: 1},
        {"k": carrier},
        {"k": [1, carrier, None]},
        {"k": {carrier: [True]}},
        {"k": [{"x": {"y": carrier}}]},
    ][where]
    items = [(k, v) for k, v in obj.items() if k not in inner]
    at = draw(st.integers(0, len(items)))
    items[at:at] = list(inner.items())
    value = dict(items)
    text = serialise(value, draw(st.integers(0, 3)))
    if draw(st.booleans()):  # escapes in upper case: \uFFFE, \uDBFF\uDFFF
        text = re.sub(r"\\u[0-9a-f]{4}", lambda m: "\\u" + m.group()[2:].upper(), text)
    clean = serialise({k.replace(nc, "\ufffd"): v for k, v in items}, 0)
    return text, clean.replace(nc, "\ufffd")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=poisoned(), data=st.data())
def test_a_noncharacter_anywhere_in_a_string_or_key_is_refused_under_any_chunking(
    doc: tuple[str, str], data: Any
) -> None:
    text, clean = doc
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    verdicts = {outcome(c) for c in ([text], list(text), chunks_at(text, cuts))}
    assert len(verdicts) == 1, f"the verdict depends on chunking: {verdicts}"
    (verdict,) = verdicts
    assert verdict is not None and verdict[1] == "MalformedJson" and "noncharacter" in verdict[2]
    assert not reference_accepts(text)
    rejected = validate_call(text.encode(), DECLARATION, _no_context)  # the strict parse
    assert isinstance(rejected, Rejected)
    assert rejected.reason is TerminalReason.MALFORMED_JSON
    assert rejected.parse_result == "noncharacter_in_string"
    assert outcome([clean]) is None


DECLARATION = Registry.from_document(
    {"tools": [{"name": "t", "parameters": {"type": "object"}}]}
).tools[0]


def _no_context() -> Any:
    raise AssertionError("no business validators")


@pytest.mark.parametrize(
    "text",
    [
        '{"a":"\ufdd0"}',
        '{"\U0010ffff":1}',
        '{"a":"\U0003fffe"}',  # F0 BF BF BE: the candidate BF BF, then BF BE
        '{"a":"\\uFDEF"}',
        '{"a":"\\uffff"}',
        '{"a":"\\ud83f\\udffe"}',
        '{"a":"\\\\\\uFFFE"}',  # an escaped backslash, then the escape
        '{"a":"x","\\uDBFF\\uDFFF":2}',
        '{"a":[1,{"b":"\\uDBBF\\uDFFF"}]}',
    ],
)
def test_the_strict_parse_refuses_a_noncharacter(text: str) -> None:
    rejected = validate_call(text.encode(), DECLARATION, _no_context)
    expected = Rejected(TerminalReason.MALFORMED_JSON, "noncharacter_in_string", "not_run")
    assert rejected == expected
    assert orjson.loads(text)  # orjson alone reads it


@pytest.mark.parametrize(
    "text",
    [
        '{"a":"\\\\uFFFE"}',  # an escaped backslash, then the text "uFFFE"
        '{"a":"\\\\\\\\uFDD0 \\ufdcf \\uFDF0 \\uFFFD \\uDBFF\\uDFFD \\uD83E\\uDFFF"}',
        '{"\ufdcf\ufdf0\ufffd\U0010fffd":"\U0001fbff"}',
        '{"a":"\u0ffe\u0fff\U0003fffd\U000bfbfe"}',  # E0 BF BE, F0 BF BF BD: not one
    ],
)
def test_the_strict_parse_accepts_what_is_beside_the_noncharacters(text: str) -> None:
    assert outcome([text]) is None
    assert not isinstance(validate_call(text.encode(), DECLARATION, _no_context), Rejected)
