"""Vertex AI's streamed ``partialArgs`` → JSON argument text, in document order.

Vertex streams a call's arguments as ``{jsonPath, stringValue|numberValue|boolValue|nullValue,
willContinue}`` items, not as JSON text. :class:`PartialArgsWriter` writes them as JSON text as
they arrive (see its docstring), so the Assembler's deltas concatenate to the argument object;
:func:`parse_json_path` reads a ``jsonPath``. Owns only that translation: which parts of a
chunk are partial arguments, and what a failure does to the response (it becomes inert), is
:mod:`processor.adapters.gemini`. Raises :class:`PartialArgsError` on an item that cannot be
written in document order.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from processor.core.errors import AdapterError

Segment = str | int
"""One step of a ``jsonPath``: an object key or an array index."""


MAX_PATH_DEPTH: Final = 64

_PATH_STEP: Final = re.compile(
    r"\.([^.\[\]]+)"  # .key
    r"|\[(\d{1,9})\]"  # [index]
    r"|\['((?:[^'\\]|\\.)*)'\]"  # ['quoted key']
    r'|\["((?:[^"\\]|\\.)*)"\]'  # ["quoted key"]
)
_UNESCAPE: Final = re.compile(r"\\(.)")
_PARTIAL_ARG_KEYS: Final = frozenset(
    {"jsonPath", "willContinue", "stringValue", "numberValue", "boolValue", "nullValue"}
)


class PartialArgsError(AdapterError):
    """Streamed partial arguments that cannot be written as JSON text in document order."""

    reason = "partial_args"


# --------------------------------------------------------------------------- json paths


def parse_json_path(path: str) -> tuple[Segment, ...]:
    """``$.a.b[0]['c.d']`` → ``("a", "b", 0, "c.d")``. The first step must be a key."""
    if not path.startswith("$"):
        raise PartialArgsError("bad_json_path", "jsonPath does not start at $")
    segments: list[Segment] = []
    pos = 1
    while pos < len(path):
        step = _PATH_STEP.match(path, pos)
        if step is None:
            raise PartialArgsError("bad_json_path", "jsonPath has an unreadable step")
        key, index, single, double = step.groups()
        if index is not None:
            segments.append(int(index))
        else:
            raw = key if key is not None else (single if single is not None else double)
            segments.append(raw if key is not None else _UNESCAPE.sub(r"\1", raw))
        pos = step.end()
    if not segments or len(segments) > MAX_PATH_DEPTH:
        raise PartialArgsError("bad_json_path", "jsonPath is empty or too deep")
    return tuple(segments)


def _escape(text: str) -> str:
    """JSON string content without the quotes (a split string escapes piece by piece)."""
    try:
        return orjson.dumps(text)[1:-1].decode()
    except orjson.JSONEncodeError:  # a lone surrogate: \\uXXXX escapes rejoin across pieces
        return json.dumps(text)[1:-1]


def _item_value(item: dict[str, Any]) -> tuple[bool, str] | None:
    """``(is_string, text)``: raw text for a string, JSON text otherwise; None when valueless."""
    kinds = [k for k in ("stringValue", "numberValue", "boolValue") if item.get(k) is not None]
    if "nullValue" in item:
        kinds.append("nullValue")
    if not kinds:
        return None
    if len(kinds) > 1:
        raise PartialArgsError("bad_partial_args", "partial argument has several values")
    value = item.get(kinds[0])
    if kinds[0] == "stringValue" and isinstance(value, str):
        return True, value
    if kinds[0] == "numberValue" and _is_number(value):
        return False, str(value) if isinstance(value, int) else orjson.dumps(value).decode()
    if kinds[0] == "boolValue" and isinstance(value, bool):
        return False, "true" if value else "false"
    if kinds[0] == "nullValue":
        return False, "null"
    raise PartialArgsError("bad_partial_args", f"partial argument {kinds[0]} has the wrong type")


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


# --------------------------------------------------------------------------- the writer


@dataclass
class _Container:
    """An open object or array of the argument text, and what has been written into it."""

    segment: Segment | None
    is_array: bool
    count: int = 0
    keys: set[str] = field(default_factory=set)


class PartialArgsWriter:
    """Streams Vertex ``partialArgs`` items as JSON text, in document order.

    The writer keeps the chain of containers that are open in the text written so far (root
    object first) and, when a string value announced ``willContinue``, the path of that open
    string. For each item it:

    1. continues the open string when the item is at the same path (escaped content; the closing
       quote when ``willContinue`` is absent), and refuses any other item while a string is open;
    2. otherwise keeps the longest prefix of the open chain that the item's path shares, closes
       the containers below it (``}`` / ``]``), opens the containers the path adds (``{`` for a
       key step, ``[`` for an index step), writes ``,`` and ``"key":`` as needed, then the value.

    The text therefore only ever grows forward. A path that goes back (a key already written, an
    array index other than the next one) or changes a container's kind raises
    :class:`PartialArgsError`: such a stream cannot be written without holding the whole object.
    ``finish()`` closes every open container, or gives ``{}`` when nothing was written.
    """

    def __init__(self) -> None:
        self._stack: list[_Container] = []
        self._open_string: tuple[Segment, ...] | None = None
        self._finished = False

    def feed(self, items: object) -> str:
        """The JSON text that a ``partialArgs`` list adds."""
        if self._finished:
            raise PartialArgsError("partial_args_order", "partial arguments after the terminal")
        if not isinstance(items, list):
            raise PartialArgsError("bad_partial_args", "partialArgs is not a list")
        return "".join(self._item(item) for item in items)

    def finish(self) -> str:
        """The closing text at the call's terminal."""
        if self._open_string is not None:
            raise PartialArgsError("partial_args_cut", "call ended inside a continued string")
        self._finished = True
        if not self._stack:
            return "{}"
        closing = "".join("]" if c.is_array else "}" for c in reversed(self._stack))
        self._stack.clear()
        return closing

    def _item(self, item: object) -> str:
        if not isinstance(item, dict) or not isinstance(item.get("jsonPath"), str):
            raise PartialArgsError("bad_partial_args", "partial argument without a jsonPath")
        if not _PARTIAL_ARG_KEYS.issuperset(item):
            raise PartialArgsError("bad_partial_args", "partial argument with an unknown field")
        path = parse_json_path(item["jsonPath"])
        value = _item_value(item)
        more = item.get("willContinue") is True
        if self._open_string is not None:
            return self._continue_string(path, value, more)
        if value is None:
            return ""
        is_string, text = value
        prefix = self._navigate(path)
        if not is_string:
            return prefix + text
        if more:
            self._open_string = path
            return prefix + '"' + _escape(text)
        return prefix + '"' + _escape(text) + '"'

    def _continue_string(
        self, path: tuple[Segment, ...], value: tuple[bool, str] | None, more: bool
    ) -> str:
        if path != self._open_string or (value is not None and not value[0]):
            raise PartialArgsError("partial_args_order", "a continued string was interrupted")
        text = _escape(value[1]) if value is not None else ""
        if more:
            return text
        self._open_string = None
        return text + '"'

    def _navigate(self, path: tuple[Segment, ...]) -> str:
        out: list[str] = []
        if not self._stack:
            self._stack.append(_Container(None, is_array=False))
            out.append("{")
        keep = 1
        while (
            keep < len(self._stack)
            and keep < len(path)
            and self._stack[keep].segment == path[keep - 1]
        ):
            keep += 1
        while len(self._stack) > keep:
            out.append("]" if self._stack.pop().is_array else "}")
        for depth in range(keep - 1, len(path) - 1):
            out.append(self._child(path[depth]))
            is_array = isinstance(path[depth + 1], int)
            self._stack.append(_Container(path[depth], is_array=is_array))
            out.append("[" if is_array else "{")
        out.append(self._child(path[-1]))
        return "".join(out)

    def _child(self, segment: Segment) -> str:
        parent = self._stack[-1]
        comma = "," if parent.count else ""
        if parent.is_array != isinstance(segment, int):
            raise PartialArgsError("partial_args_order", "jsonPath changes a container's kind")
        if isinstance(segment, int):
            if segment != parent.count:
                raise PartialArgsError("partial_args_order", "array index is not the next one")
            parent.count += 1
            return comma
        if segment in parent.keys:
            raise PartialArgsError("partial_args_order", "jsonPath returns to a written key")
        parent.keys.add(segment)
        parent.count += 1
        return comma + _escape_key(segment)


def _escape_key(key: str) -> str:
    return '"' + _escape(key) + '":'
