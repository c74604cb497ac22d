"""Incremental JSON *syntax* scanner for streamed tool-call arguments.

This module owns one thing: deciding, delta by delta, whether the argument text of a call can
still become the JSON the wire contract allows, and failing the moment it cannot. It never builds
the value (the terminal event permits exactly one strict parse, elsewhere) and never sees bytes:
the Assembler feeds it the ``str`` deltas as they arrive.

The accepted language is RFC 8259 JSON with the I-JSON (RFC 7493) restrictions, so that every
conforming parser reads an accepted document the same way:

* top level: an object (when ``require_object``), then only whitespace (space, tab, LF, CR);
* strings (values and member names): no raw U+0000-U+001F, only the RFC escapes, ``\\uXXXX``
  with four hex digits, no lone surrogates and no noncharacters (RFC 7493 §2.1: U+FDD0-U+FDEF
  and every code point ending in FFFE or FFFF), neither as escapes (a surrogate-pair escape of
  an astral noncharacter included) nor as raw code points in the ``str``;
* numbers: the RFC grammar; integers (no fraction, no exponent) beyond +-(2**53-1) and numbers
  that overflow an IEEE double are refused when the number token ends;
* literals ``true``, ``false``, ``null`` only;
* no duplicate member names within one object, compared after decoding escapes;
* nesting deeper than ``max_depth`` raises :class:`LimitExceeded` (``depth_limit``).

Cost: the scanner keeps all of its state between feeds (like h11's ``_receivebuffer``), so a
delta costs O(len(delta)) and the earlier text is never looked at again. Precompiled regexes
consume in one C-level step each: runs of string content (ordinary characters, valid escapes,
whole surrogate-pair escapes), whitespace and digit runs, and tokens that lie whole inside a
delta (an escape-free member name with its colon, a string value, a number, a literal). The
per-character Python state machine only handles what those fast paths stop at: structural
characters, tokens split across deltas, member names with escapes, and errors. Every regex is
possessive or a single character class, so no input makes them backtrack.

Errors name the position (a character offset into the call's argument text) and the kind of
problem, never the text itself: argument values must not reach logs. A scanner that has
failed stays failed and raises the same error on every later call.

:meth:`JsonSyntaxScanner.snapshot` returns JSON-serialisable state for the state changelog.
It carries member names of open objects and a pending number's digits, i.e. argument
content: it is state, like the buffer's bytes, and must never be logged.

Why one module: it is one state machine on the per-delta hot path. The modes, number
substates, character tables and fast-path regexes are module constants the loop reads as fast
globals, and the methods read and write the same two dozen fields of the scanner; moving the
tables or a family of methods elsewhere would put attribute lookups on the hot path
(``bench/ab_jsonscan.py`` measures it) and spread one grammar over several files. Only the
snapshot readers at the end (``_int``, ``_bool``, ``_str``) are incidental, and small.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Final, NoReturn

from processor.core.errors import LimitExceeded, MalformedJson

__all__ = ["JsonSyntaxScanner"]

# --- scanner modes ---------------------------------------------------------------------------
_START: Final = 0  # before the top-level value (require_object: only whitespace or "{")
_VALUE: Final = 1  # expecting a value (after ":" or "," in an array, or at top level)
_ARRAY_FIRST: Final = 2  # after "[": a value or "]"
_OBJ_FIRST: Final = 3  # after "{": a member name or "}"
_KEY: Final = 4  # after "," in an object: a member name
_COLON: Final = 5  # after a member name: ":"
_AFTER: Final = 6  # after a value inside a container: "," or the closing bracket
_DONE: Final = 7  # the top-level value is complete: only whitespace may follow
_STRING: Final = 8  # inside a string (a member name when ``_in_key``)
_ESCAPE: Final = 9  # after a backslash inside a string
_UHEX: Final = 10  # inside the four hex digits of a \u escape
_SURR_BS: Final = 11  # after a high-surrogate escape: expecting "\" of the low one
_SURR_U: Final = 12  # after that "\": expecting "u"
_NUMBER: Final = 13  # inside a number token (substate in ``_num_state``)
_LITERAL: Final = 14  # inside true / false / null

_MODE_NAMES: Final = (
    "start",
    "value",
    "array_first",
    "object_first",
    "key",
    "colon",
    "after_value",
    "done",
    "string",
    "escape",
    "unicode_escape",
    "surrogate_backslash",
    "surrogate_u",
    "number",
    "literal",
)

# --- number substates ------------------------------------------------------------------------
_N_START: Final = 0  # nothing yet
_N_MINUS: Final = 1  # "-"
_N_ZERO: Final = 2  # a leading "0" (end allowed)
_N_INT: Final = 3  # integer digits after 1-9 (end allowed)
_N_DOT: Final = 4  # "."
_N_FRAC: Final = 5  # fraction digits (end allowed)
_N_EXP: Final = 6  # "e" / "E"
_N_EXP_SIGN: Final = 7  # exponent sign
_N_EXP_DIGITS: Final = 8  # exponent digits (end allowed)
_N_ENDABLE: Final = frozenset((_N_ZERO, _N_INT, _N_FRAC, _N_EXP_DIGITS))
_N_DIGIT_RUN: Final = frozenset((_N_INT, _N_FRAC, _N_EXP_DIGITS))

_MAX_SAFE_INT: Final = 2**53 - 1

# --- noncharacters (RFC 7493 §2.1 forbids them in strings, as it forbids surrogates) ---------
# The BMP ones (U+FDD0-U+FDEF, U+FFFE, U+FFFF) stop the runs of string content below, as
# surrogates do. So does every character from U+1FFFE up (the 32 astral noncharacters lie
# there, with the CJK extensions B and later and the rare planes; emoji lie below): one range
# the run's class checks after its BMP bitmap, cheaper than listing the 32; a second class takes
# the runs of such characters that are not noncharacters (planes 2-16 less their last two code
# points), and the slow path one at a time what is left, refusing the noncharacters.
_HIGH_ASTRAL: Final = 0x1FFFE
_ORDINARY: Final = r'[^"\\\x00-\x1f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff\U0001fffe-\U0010ffff]'
_HIGH_ORDINARY: Final = (
    "[" + "".join(f"\\U{p << 16:08x}-\\U{p << 16 | 0xFFFD:08x}" for p in range(2, 17)) + "]"
)


def is_noncharacter(cp: int) -> bool:
    """U+FDD0-U+FDEF, or a code point whose low 16 bits are FFFE or FFFF."""
    return 0xFDD0 <= cp <= 0xFDEF or cp & 0xFFFE == 0xFFFE


# --- fast paths (one C-level step each) ------------------------------------------------------
_STRING_SPECIAL: Final = re.compile(  # ends a plain run
    '["\\\\\x00-\x1f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff\U0001fffe-\U0010ffff]'
)
_WS_RUN: Final = re.compile("[ \t\n\r]+")
_DIGIT_RUN: Final = re.compile("[0-9]+")
# A whole number token; group 2 (the exponent) is ``lastindex`` when present.
_NUMBER_TOKEN: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
# A run of string content: ordinary characters, simple escapes, \u escapes of characters (not
# of a surrogate or a noncharacter) and whole surrogate-pair escapes, except those of an astral
# noncharacter (a high surrogate ending in 3F/7F/BF/FF, a low one DFFE or DFFF) (possessive: no
# backtracking). Used for string values, whose content needs no decoding; a character it stops
# at goes through the slow path.
_STRING_BODY_RE: Final = (
    rf'(?:{_ORDINARY}++|\\["\\/bfnrt]'
    r"|\\u(?![dD][89a-fA-F]|[fF][dD][dDeE]|[fF]{3}[eEfF])[0-9a-fA-F]{4}"
    r"|\\u[dD][89abAB](?![37bfBF][fF]\\u[dD][fF]{2}[eEfF])[0-9a-fA-F]{2}"
    r"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    rf"|{_HIGH_ORDINARY}++)*+"
)
_STRING_BODY: Final = re.compile(_STRING_BODY_RE)
# A whole string value and the whitespace after it.
_PLAIN_STRING: Final = re.compile('"' + _STRING_BODY_RE + '"[ \t\n\r]*')
# A whole escape-free member name, the colon and the whitespace around them.
_PLAIN_MEMBER: Final = re.compile(
    '[ \t\n\r]*"([^"\\\\\x00-\x1f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff\U0001fffe-\U0010ffff]*)"'
    "[ \t\n\r]*:[ \t\n\r]*"
)

_WS: Final = frozenset(" \t\n\r")
_DIGITS: Final = frozenset("0123456789")
_NUMBER_CHARS: Final = frozenset("0123456789.eE+-")
_SIMPLE_ESCAPES: Final = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_HEX: Final = {c: int(c, 16) for c in "0123456789abcdefABCDEF"}
_LITERALS: Final = {"t": "true", "f": "false", "n": "null"}

_SNAPSHOT_VERSION: Final = 1


def _char_kind(c: str) -> str:
    """Describe a character without revealing it (structural ASCII only is named)."""
    if c in "{}[]:,":
        return f"'{c}'"
    if c == '"':
        return "'\"'"
    if c in _WS:
        return "whitespace"
    if c in _DIGITS:
        return "a digit"
    cp = ord(c)
    if cp < 0x20:
        return f"control character U+{cp:04X}"
    if 0xD800 <= cp <= 0xDFFF:
        return "a surrogate code point"
    if is_noncharacter(cp):
        return "a noncharacter"
    return "an unexpected character"


class JsonSyntaxScanner:
    """Checks streamed JSON text for syntax, O(len(text)) per :meth:`feed`."""

    __slots__ = (
        "_consumed",
        "_failure",
        "_hex_count",
        "_hex_val",
        "_in_key",
        "_key_parts",
        "_lit",
        "_lit_pos",
        "_max_depth",
        "_mode",
        "_num_parts",
        "_num_start",
        "_num_state",
        "_pending_high",
        "_require_object",
        "_stack",
    )

    def __init__(self, *, max_depth: int = 64, require_object: bool = True) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        self._max_depth = max_depth
        self._require_object = require_object
        self._mode: int = _START if require_object else _VALUE
        self._consumed = 0
        # One entry per open container: the decoded member names of an object, None for an array.
        self._stack: list[set[str] | None] = []
        self._in_key = False
        self._key_parts: list[str] = []
        self._hex_count = 0
        self._hex_val = 0
        self._pending_high = 0
        self._num_state = _N_START
        self._num_parts: list[str] = []
        self._num_start = 0
        self._lit = ""
        self._lit_pos = 0
        # (kind, reason, detail) of the first error; kind is "malformed" or "limit".
        self._failure: tuple[str, str, str] | None = None

    # --- public surface ----------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """A whole top-level value has been read (only whitespace after it)."""
        return self._mode == _DONE and self._failure is None

    @property
    def consumed(self) -> int:
        """Characters consumed so far (on failure: those before the offending one)."""
        return self._consumed

    @property
    def depth(self) -> int:
        """Containers currently open."""
        return len(self._stack)

    def feed(self, text: str) -> None:
        """Scan the next delta; raise as soon as no valid continuation can exist."""
        if self._failure is not None:
            self._reraise()
        if self._mode == _STRING and not self._in_key:
            # fast path: a delta wholly inside a string value (what the loop below does for
            # it: one run of string content to the end, nothing else changes)
            m = _STRING_BODY.match(text)
            if m is not None and m.end() == len(text):
                self._consumed += len(text)
                return
        n = len(text)
        i = 0
        mode = self._mode
        stack = self._stack
        in_key = self._in_key
        key_parts = self._key_parts
        base = self._consumed
        string_body = _STRING_BODY.match
        plain_string = _PLAIN_STRING.match
        plain_member = _PLAIN_MEMBER.match
        ws_run = _WS_RUN.match
        ws = _WS

        while i < n:
            if mode == _STRING:
                if in_key:
                    i = self._key_run(text, i)
                else:
                    m = string_body(text, i)
                    i = m.end() if m is not None else i
                if i >= n:
                    break
                c = text[i]
                i += 1
                if c == '"':
                    if in_key:
                        top = stack[-1]
                        assert top is not None
                        key = "".join(key_parts)
                        key_parts.clear()
                        if key in top:
                            self._fail(base + i - 1, "duplicate member name in object")
                        top.add(key)
                        in_key = False
                        mode = _COLON
                    else:
                        mode = _AFTER if stack else _DONE
                elif c == "\\":
                    mode = _ESCAPE
                elif ord(c) >= _HIGH_ASTRAL and not is_noncharacter(ord(c)):
                    if in_key:
                        key_parts.append(c)
                else:
                    self._fail(base + i - 1, f"{_char_kind(c)} inside a string")
                continue

            c = text[i]
            if mode < _STRING and c in ws:  # between tokens only
                m = ws_run(text, i)
                i = m.end() if m is not None else i + 1
                continue

            if mode == _AFTER:
                i += 1
                if c == ",":
                    top = stack[-1]
                    if top is None:
                        mode = _VALUE
                    else:
                        # fast path: the next member name and its colon, whole in this delta
                        m = plain_member(text, i)
                        if m is None:
                            mode = _KEY
                        else:
                            key = m.group(1)
                            if key in top:
                                self._fail(base + m.end(1), "duplicate member name in object")
                            top.add(key)
                            i = m.end()
                            mode = _VALUE
                elif (c == "}" and stack[-1] is not None) or (c == "]" and stack[-1] is None):
                    stack.pop()
                    mode = _AFTER if stack else _DONE
                else:
                    expected = "']'" if stack[-1] is None else "'}'"
                    self._fail(base + i - 1, f"expected ',' or {expected}, found {_char_kind(c)}")

            elif mode in (_VALUE, _ARRAY_FIRST):
                if c == '"':
                    m = plain_string(text, i)
                    if m is None:
                        i += 1
                        mode = _STRING
                    else:  # fast path: the whole string is in this delta
                        i = m.end()
                        mode = _AFTER if stack else _DONE
                elif c == "{":
                    i += 1
                    if len(stack) >= self._max_depth:
                        self._fail_depth(base + i - 1)
                    stack.append(set())
                    mode = _OBJ_FIRST
                elif c == "[":
                    i += 1
                    if len(stack) >= self._max_depth:
                        self._fail_depth(base + i - 1)
                    stack.append(None)
                    mode = _ARRAY_FIRST
                elif c == "-" or c in _DIGITS:
                    m = _NUMBER_TOKEN.match(text, i)
                    j = m.end() if m is not None else i
                    if j > i and j < n and text[j] not in _NUMBER_CHARS:
                        # fast path: the whole token is in this delta and a delimiter ends it;
                        # up to 15 characters without exponent are always a safe, finite number
                        if j - i > 15 or (m is not None and m.lastindex == 2):
                            self._check_number(text[i:j], base + i)
                        i = j
                        mode = _AFTER if stack else _DONE
                    else:
                        self._num_state = _N_START
                        self._num_parts = []
                        self._num_start = base + i
                        mode = _NUMBER
                elif c in _LITERALS:
                    lit = _LITERALS[c]
                    if text.startswith(lit, i):  # fast path: the whole literal
                        i += len(lit)
                        mode = _AFTER if stack else _DONE
                    else:
                        self._lit = lit
                        self._lit_pos = 0
                        mode = _LITERAL
                elif c == "]" and mode == _ARRAY_FIRST:
                    i += 1
                    stack.pop()
                    mode = _AFTER if stack else _DONE
                else:
                    self._fail(base + i, f"expected a value, found {_char_kind(c)}")

            elif mode == _COLON:
                i += 1
                if c != ":":
                    self._fail(base + i - 1, f"expected ':', found {_char_kind(c)}")
                mode = _VALUE

            elif mode in (_KEY, _OBJ_FIRST):
                if c == '"':
                    m = plain_member(text, i)
                    if m is None:
                        i += 1
                        in_key = True
                        mode = _STRING
                    else:  # fast path: the whole name and its colon are in this delta
                        top = stack[-1]
                        assert top is not None
                        key = m.group(1)
                        if key in top:
                            self._fail(base + m.end(1), "duplicate member name in object")
                        top.add(key)
                        i = m.end()
                        mode = _VALUE
                elif c == "}" and mode == _OBJ_FIRST:
                    i += 1
                    stack.pop()
                    mode = _AFTER if stack else _DONE
                else:
                    self._fail(base + i, f"expected a member name, found {_char_kind(c)}")

            elif mode == _NUMBER:
                i, ended = self._number(text, i, base)
                if ended:
                    mode = _AFTER if stack else _DONE

            elif mode == _ESCAPE:
                i += 1
                if c == "u":
                    self._hex_count = 0
                    self._hex_val = 0
                    mode = _UHEX
                else:
                    decoded = _SIMPLE_ESCAPES.get(c)
                    if decoded is None:
                        self._fail(base + i - 1, "invalid escape sequence in string")
                    if in_key:
                        key_parts.append(decoded)
                    mode = _STRING

            elif mode == _UHEX:
                i, mode = self._uhex(text, i, base, in_key)

            elif mode == _SURR_BS:
                i += 1
                if c != "\\":
                    self._fail(base + i - 1, "high surrogate escape not followed by a low one")
                mode = _SURR_U

            elif mode == _SURR_U:
                i += 1
                if c != "u":
                    self._fail(base + i - 1, "high surrogate escape not followed by a low one")
                self._hex_count = 0
                self._hex_val = 0
                mode = _UHEX

            elif mode == _LITERAL:
                lit = self._lit
                pos = self._lit_pos
                k = min(len(lit) - pos, n - i)
                if text[i : i + k] != lit[pos : pos + k]:
                    bad = next(x for x in range(k) if text[i + x] != lit[pos + x])
                    self._fail(base + i + bad, "invalid literal (only true, false, null)")
                i += k
                pos += k
                if pos == len(lit):
                    self._lit = ""
                    self._lit_pos = 0
                    mode = _AFTER if stack else _DONE
                else:
                    self._lit_pos = pos

            elif mode == _DONE:
                self._fail(base + i, "data after the top-level value")

            elif mode == _START:
                if c != "{":
                    self._fail(base + i, "the top-level value must be an object")
                mode = _VALUE

            else:  # pragma: no cover - every mode is handled above
                raise AssertionError(f"unknown scanner mode {mode}")

        self._mode = mode
        self._in_key = in_key
        self._consumed = base + n

    def finish(self) -> None:
        """Declare the end of input; raise unless exactly one complete value was read."""
        if self._failure is not None:
            self._reraise()
        if self._mode == _NUMBER:
            if self._num_state not in _N_ENDABLE:
                self._fail(self._consumed, "unexpected end of input inside a number")
            self._end_number()
            self._mode = _AFTER if self._stack else _DONE
        if self._mode == _DONE:
            return
        if self._mode in (_START, _VALUE) and not self._stack:
            self._fail(self._consumed, "empty document")
        where = _MODE_NAMES[self._mode]
        self._fail(
            self._consumed,
            f"unexpected end of input (state {where}, {len(self._stack)} open containers)",
        )

    def snapshot(self) -> dict[str, object]:
        """JSON-serialisable state; :meth:`from_snapshot` continues exactly from here."""
        failure = list(self._failure) if self._failure is not None else None
        return {
            "v": _SNAPSHOT_VERSION,
            "max_depth": self._max_depth,
            "require_object": self._require_object,
            "mode": self._mode,
            "consumed": self._consumed,
            "stack": [None if s is None else sorted(s) for s in self._stack],
            "in_key": self._in_key,
            "key": "".join(self._key_parts),
            "hex_count": self._hex_count,
            "hex_val": self._hex_val,
            "pending_high": self._pending_high,
            "num_state": self._num_state,
            "num": "".join(self._num_parts),
            "num_start": self._num_start,
            "lit": self._lit,
            "lit_pos": self._lit_pos,
            "failure": failure,
        }

    @classmethod
    def from_snapshot(cls, data: Mapping[str, object]) -> JsonSyntaxScanner:
        """Rebuild a scanner from :meth:`snapshot` output (raises ValueError if it is corrupt)."""
        if _int(data, "v") != _SNAPSHOT_VERSION:
            raise ValueError("unsupported scanner snapshot version")
        self = cls(max_depth=_int(data, "max_depth"), require_object=_bool(data, "require_object"))
        mode = _int(data, "mode")
        if not 0 <= mode < len(_MODE_NAMES):
            raise ValueError("scanner snapshot: unknown mode")
        self._mode = mode
        self._consumed = _int(data, "consumed")
        raw_stack = data.get("stack")
        if not isinstance(raw_stack, list):
            raise ValueError("scanner snapshot: 'stack' must be a list")
        stack: list[set[str] | None] = []
        for entry in raw_stack:
            if entry is None:
                stack.append(None)
            elif isinstance(entry, list) and all(isinstance(k, str) for k in entry):
                stack.append({str(k) for k in entry})
            else:
                raise ValueError("scanner snapshot: bad 'stack' entry")
        self._stack = stack
        self._in_key = _bool(data, "in_key")
        key = _str(data, "key")
        self._key_parts = [key] if key else []
        self._hex_count = _int(data, "hex_count")
        self._hex_val = _int(data, "hex_val")
        self._pending_high = _int(data, "pending_high")
        self._num_state = _int(data, "num_state")
        num = _str(data, "num")
        self._num_parts = [num] if num else []
        self._num_start = _int(data, "num_start")
        self._lit = _str(data, "lit")
        self._lit_pos = _int(data, "lit_pos")
        failure = data.get("failure")
        if failure is None:
            self._failure = None
        elif (
            isinstance(failure, list)
            and len(failure) == 3
            and all(isinstance(x, str) for x in failure)
        ):
            self._failure = (str(failure[0]), str(failure[1]), str(failure[2]))
        else:
            raise ValueError("scanner snapshot: bad 'failure'")
        return self

    # --- slow paths --------------------------------------------------------------------------

    def _key_run(self, text: str, i: int) -> int:
        """Consume ordinary member-name characters, keeping them for the duplicate check."""
        m = _STRING_SPECIAL.search(text, i)
        j = m.start() if m is not None else len(text)
        if j > i:
            self._key_parts.append(text[i:j])
        return j

    def _number(self, text: str, i: int, base: int) -> tuple[int, bool]:
        """Continue a number token across deltas; returns (new index, token ended)."""
        n = len(text)
        ns = self._num_state
        start = i
        while i < n:
            c = text[i]
            if c in _DIGITS:
                if ns in _N_DIGIT_RUN:
                    m = _DIGIT_RUN.match(text, i)
                    i = m.end() if m is not None else i + 1
                    continue
                if ns in (_N_START, _N_MINUS):
                    ns = _N_ZERO if c == "0" else _N_INT
                elif ns == _N_DOT:
                    ns = _N_FRAC
                elif ns in (_N_EXP, _N_EXP_SIGN):
                    ns = _N_EXP_DIGITS
                else:  # _N_ZERO
                    self._fail(base + i, "leading zero in number")
            elif c == "-" and ns == _N_START:
                ns = _N_MINUS
            elif c == "." and ns in (_N_ZERO, _N_INT):
                ns = _N_DOT
            elif c in "eE" and ns in (_N_ZERO, _N_INT, _N_FRAC):
                ns = _N_EXP
            elif c in "+-" and ns == _N_EXP:
                ns = _N_EXP_SIGN
            elif ns in _N_ENDABLE and c not in _NUMBER_CHARS:
                break  # a delimiter (or an error the caller reports) ends the token
            else:
                self._fail(base + i, f"invalid number syntax ({_char_kind(c)} not allowed here)")
            i += 1
        if i > start:
            self._num_parts.append(text[start:i])
        if i < n:
            self._end_number()
            return i, True
        self._num_state = ns
        return i, False

    def _uhex(self, text: str, i: int, base: int, in_key: bool) -> tuple[int, int]:
        """Continue a ``\\uXXXX`` escape; returns (new index, new mode)."""
        n = len(text)
        count = self._hex_count
        val = self._hex_val
        high = self._pending_high
        while i < n and count < 4:
            d = _HEX.get(text[i])
            if d is None:
                self._fail(base + i, "invalid hex digit in \\u escape")
            val = val * 16 + d
            count += 1
            if high:
                if (count == 1 and val != 0xD) or (count == 2 and not 0xDC <= val <= 0xDF):
                    self._fail(base + i, "high surrogate escape not followed by a low one")
            elif count == 2 and 0xDC <= val <= 0xDF:
                self._fail(base + i, "lone low surrogate escape")
            i += 1
        if count < 4:
            self._hex_count = count
            self._hex_val = val
            return i, _UHEX
        self._hex_count = 0
        self._hex_val = 0
        if high:
            self._pending_high = 0
            cp = 0x10000 + ((high - 0xD800) << 10) + (val - 0xDC00)
            if is_noncharacter(cp):
                self._fail(base + i - 1, "noncharacter escape (a surrogate pair) in string")
            if in_key:
                self._key_parts.append(chr(cp))
            return i, _STRING
        if 0xD800 <= val <= 0xDBFF:
            self._pending_high = val
            return i, _SURR_BS
        if is_noncharacter(val):
            self._fail(base + i - 1, "noncharacter escape in string")
        if in_key:
            self._key_parts.append(chr(val))
        return i, _STRING

    def _end_number(self) -> None:
        """The pending number token has ended: check it and clear the number state."""
        self._check_number("".join(self._num_parts), self._num_start)
        self._num_parts = []
        self._num_state = _N_START
        self._num_start = 0

    def _check_number(self, token: str, pos: int) -> None:
        """I-JSON number rules, applied once the token has ended."""
        if "." in token or "e" in token or "E" in token:
            if math.isinf(float(token)):
                self._fail(pos, "number overflows a double")
            return
        digits = len(token) - 1 if token[0] == "-" else len(token)
        if digits > 16 or abs(int(token)) > _MAX_SAFE_INT:
            self._fail(pos, "integer beyond +-(2**53-1)")

    # --- failure -----------------------------------------------------------------------------

    def _fail(self, pos: int, what: str) -> NoReturn:
        self._record(pos, "malformed", MalformedJson.reason, f"{what} at char {pos}")
        self._reraise()

    def _fail_depth(self, pos: int) -> NoReturn:
        detail = f"nesting deeper than {self._max_depth} at char {pos}"
        self._record(pos, "limit", "depth_limit", detail)
        self._reraise()

    def _record(self, pos: int, kind: str, reason: str, detail: str) -> None:
        self._failure = (kind, reason, detail)
        self._consumed = pos

    def _reraise(self) -> NoReturn:
        assert self._failure is not None
        kind, reason, detail = self._failure
        if kind == "limit":
            raise LimitExceeded(reason=reason, detail=detail)
        raise MalformedJson(reason=reason, detail=detail)


def _int(data: Mapping[str, object], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"scanner snapshot: {name!r} must be an int")
    return value


def _bool(data: Mapping[str, object], name: str) -> bool:
    value = data.get(name)
    if not isinstance(value, bool):
        raise ValueError(f"scanner snapshot: {name!r} must be a bool")
    return value


def _str(data: Mapping[str, object], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise ValueError(f"scanner snapshot: {name!r} must be a str")
    return value
