"""Reading provider JSON fail-closed: chunk text → object, object fields → typed values.

This module owns the small readers every adapter applies to a decoded provider payload:

* :func:`decode_object`, one payload's JSON text → a JSON object, or a ``bad_chunk``.
* :class:`Fields`, typed reads of one field (an object, a list, a bounded string, an integer, a
  non-negative index), each bound to the provider it reads for. A field of the wrong type or size
  raises :class:`~processor.core.errors.AdapterError` ``bad_chunk`` whose detail names the
  provider and the field, never the value: provider values may be argument text.
* :func:`shown`, the one way a provider-supplied code (a stop reason, an error type) enters a
  ``response.ended`` reason or an error message: a short code, or a placeholder.
* :data:`MAX_ID` and :data:`MAX_NAME`, the wire contract's bounds on ids and tool names
  (``Id`` and ``Name`` in :mod:`processor.core.events`), for readers that must refuse an
  oversized value before it is used as identity (a dictionary key, a comparison); a value that
  goes straight into a fragment event needs no check here, the event builders of
  :class:`~processor.adapters.base.StreamAdapter` refuse it.

Protocol meaning (which field is an id, which event ends a call) stays in the adapters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import orjson

from processor.core.errors import AdapterError

MAX_ID: Final = 256
"""The longest id the wire contract accepts (``processor.core.events.Id``)."""
MAX_NAME: Final = 128
"""The longest tool name the wire contract accepts (``processor.core.events.Name``)."""

_CODE: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_KIND_NAMES: Final[dict[type[Any], str]] = {
    str: "a string",
    int: "an integer",
    dict: "an object",
    list: "a list",
}

T = TypeVar("T")


def shown(value: object, placeholder: str = "?") -> str:
    """A provider code safe to put in a reason or message, else ``placeholder``."""
    return value if isinstance(value, str) and _CODE.fullmatch(value) else placeholder


def bad_chunk(where: str, detail: str) -> AdapterError:
    """The error of a payload that cannot be read; ``where`` is the provider or the framing."""
    return AdapterError("bad_chunk", f"{where}: {detail}")


def decode_object(text: str | bytes, where: str, what: str = "chunk") -> dict[str, Any]:
    """One payload's JSON text → the JSON object it must be; else ``bad_chunk`` at ``where``."""
    try:
        decoded = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise bad_chunk(where, f"{what} is not JSON ({exc.msg})") from None
    if not isinstance(decoded, dict):
        raise bad_chunk(where, f"{what} is not a JSON object")
    return decoded


@dataclass(frozen=True)
class Fields:
    """Typed field reads for one provider; ``of`` names the object in the error detail."""

    provider: str

    def bad(self, detail: str) -> AdapterError:
        """A ``bad_chunk`` naming this provider."""
        return bad_chunk(self.provider, detail)

    def json_text(self, value: object, what: str) -> str:
        """``value`` (decoded provider JSON) as JSON text; ``bad_chunk`` when it cannot be written.

        orjson reads 1,024 levels of nesting but writes 255, so a deep object a provider sent
        can be decoded and still not be encodable: that is bad input, not a crash.
        """
        try:
            return orjson.dumps(value).decode()
        except orjson.JSONEncodeError:
            raise self.bad(f"{what} cannot be encoded as JSON (nested too deep)") from None

    def opt(self, obj: dict[str, Any], key: str, kind: type[T], of: str = "") -> T | None:
        """``obj[key]`` when absent/None or of ``kind`` (a bool is not an integer), else bad."""
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.bad(f"field {key!r}{_of(of)} is not {_KIND_NAMES.get(kind, kind.__name__)}")
        return value

    def obj(self, obj: dict[str, Any], key: str, of: str = "") -> dict[str, Any]:
        """A required JSON object."""
        value = obj.get(key)
        if not isinstance(value, dict):
            raise self.bad(f"field {key!r}{_of(of)} missing or not an object")
        return value

    def text(self, obj: dict[str, Any], key: str, limit: int, of: str = "") -> str:
        """A required string of 1 to ``limit`` characters."""
        value = obj.get(key)
        if not isinstance(value, str) or not 0 < len(value) <= limit:
            raise self.bad(f"field {key!r}{_of(of)} missing, empty, too long or not a string")
        return value

    def opt_text(self, obj: dict[str, Any], key: str, limit: int, of: str = "") -> str | None:
        """An optional string; when present, 1 to ``limit`` characters."""
        value = self.opt(obj, key, str, of)
        if value is not None and not 0 < len(value) <= limit:
            raise self.bad(f"field {key!r}{_of(of)} empty or too long")
        return value

    def ident(self, obj: dict[str, Any], key: str, limit: int, of: str = "") -> str | None:
        """An optional id or name: absent, None and ``""`` are None; over ``limit`` is bad."""
        value = self.opt(obj, key, str, of)
        if not value:
            return None
        if len(value) > limit:
            raise self.bad(f"field {key!r}{_of(of)} too long")
        return value

    def index(self, obj: dict[str, Any], key: str, of: str = "") -> int:
        """A required non-negative integer (a position the provider numbers)."""
        value = obj.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.bad(f"field {key!r}{_of(of)} missing or not a non-negative integer")
        return value


def _of(what: str) -> str:
    return f" of {what}" if what else ""
