"""Untrusted text on a person's terminal: the one place that escapes it.

Records carry text that nobody here chose: tool names from a model, ``issued_by`` from a gateway,
free-text reasons, dead letters' details. Printed raw, an ESC starts a terminal control sequence
(colours, cursor moves, a changed window title), U+202E (RIGHT-TO-LEFT OVERRIDE) and the other
format characters (Unicode category Cf) reverse or hide the rest of the line, and U+2028/U+2029
break it. Every line ``processor tail``, ``processor audit`` and ``processor replay`` print, the
CLI's one-line errors and the JSON log lines pass through here:

* :func:`printable` for a human line: every character Python does not call printable (controls,
  format characters, line and paragraph separators, spaces other than U+0020, surrogates,
  private-use and unassigned code points) becomes a visible escape (``\\x1b``, ``\\u202e``,
  ``\\U000e0001``);
* :func:`printable_json` for JSON text: the same characters become JSON ``\\u`` escapes, so the
  text still parses to exactly the same value.

Identifiers are not narrowed instead: actors, issuers and tool names may legitimately hold format
characters (an emoji's zero-width joiner, a soft hyphen), free text always may, and escaping at
the one place where text meets a terminal covers all of it.
"""

from __future__ import annotations

from typing import Final

_JSON_SAFE_CONTROLS: Final = frozenset("\t\n\r")  # orjson writes these as \t \n \r already


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every non-printable character shown as a Python-style escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def printable_json(text: str) -> str:
    """JSON ``text`` with every non-printable character written as a ``\\u`` escape.

    Outside its strings JSON holds only printable ASCII and whitespace, so only string contents
    change, and ``\\u`` escapes decode to the same characters: the value is unchanged."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or c in _JSON_SAFE_CONTROLS else _json_escape(c) for c in text
    )
