"""The wire contract's building blocks: its version, field types, record base and identities.

Owns :data:`WIRE_VERSION`, the identifier patterns and the annotated field types every record
uses (``Ident``, ``Tenant``, ``Id``, ``Name``, ``Reason``, ``Time``; the rules are in
:mod:`processor.core.events`' docstring), the strict record base, the call identity
(:class:`CallKey`, :class:`CallRecord`, :func:`turn_key`, :func:`trusted_call_key`) and the
injective state keys and deterministic ids (:func:`encode_key`, :func:`decode_key`,
:func:`stable_id`). The records themselves are in :mod:`~processor.core.fragment_events`,
:mod:`~processor.core.control_events` and :mod:`~processor.core.output_records`; decoding and
encoding them is :mod:`processor.core.events`, the contract's one import point.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

WIRE_VERSION: Final = 1

IDENT_PATTERN: Final = r"^[!-~]{1,256}$"
"""A key identifier: 1 to 256 visible ASCII characters (``!`` to ``~``)."""
TENANT_PATTERN: Final = r"^[!-)+-.0-~]{1,256}$"
"""A tenant: an identifier without ``/`` (the turn key ``tenant/turn_id`` splits at its first
``/``) and without ``*`` (which names every tenant in tool switches and operator scopes)."""
_NO_CONTROL: Final = r"^[^\x00-\x1f\x7f-\x9f]*$"

Ident = Annotated[str, Field(min_length=1, max_length=256, pattern=IDENT_PATTERN)]
"""``turn_id``, ``response_id``, ``item_id``, ``call_id``, ``command_id``."""
Tenant = Annotated[str, Field(min_length=1, max_length=256, pattern=TENANT_PATTERN)]
Id = Annotated[str, Field(min_length=1, max_length=256, pattern=_NO_CONTROL)]
"""Other ids and names (actors, issuers, event ids, digests): no control characters."""
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=_NO_CONTROL)]
Reason = Annotated[str, Field(max_length=512, pattern=r"(?s)^.*$")]
"""Free text up to 512 characters; the pattern refuses a lone surrogate, which no UTF-8 JSON holds
(so a command built in-process can always be signed and encoded)."""
Time = Annotated[float, Field(allow_inf_nan=False)]
"""Epoch seconds: a finite JSON number (integers accepted; booleans, strings, NaN, ±inf not)."""


def _exactly(value: object) -> object:
    """A ``Literal`` integer must be an integer: ``True`` compares equal to 1 and is refused."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not an integer")
    return value


_STRICT: Final = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)
"""Strict types on the wire: no coercion from strings, booleans or floats."""
Lax = Field(strict=False)
"""Enums decode from their JSON value (a string); strict mode would want the Python member."""


class _Record(BaseModel):
    model_config = _STRICT

    v: Annotated[Literal[1], BeforeValidator(_exactly)] = 1


# --------------------------------------------------------------------------- call identity


class CallKey(BaseModel):
    """The identity of one tool call. Never key by ``call_id`` alone: it is not globally unique."""

    model_config = _STRICT

    tenant: Tenant
    turn_id: Ident
    response_id: Ident
    item_id: Ident
    call_id: Ident

    @property
    def turn_key(self) -> str:
        return turn_key(self.tenant, self.turn_id)

    @property
    def as_tuple(self) -> tuple[str, str, str, str, str]:
        return (self.tenant, self.turn_id, self.response_id, self.item_id, self.call_id)

    def encoded(self) -> str:
        """A stable, injective string form (used as a state key and in digests)."""
        return encode_key(self.as_tuple)


def turn_key(tenant: str, turn_id: str) -> str:
    """The Kafka key of every turn-scoped record: ``tenant/turn_id``."""
    return f"{tenant}/{turn_id}"


class CallRecord(_Record):
    tenant: Tenant
    turn_id: Ident
    response_id: Ident
    item_id: Ident
    call_id: Ident

    @property
    def key(self) -> CallKey:
        # the record's own fields were validated when it was made: no second validation
        return trusted_call_key(
            self.tenant, self.turn_id, self.response_id, self.item_id, self.call_id
        )


_CALL_KEY_FIELDS: Final = frozenset(CallKey.model_fields)


def trusted_call_key(
    tenant: str, turn_id: str, response_id: str, item_id: str, call_id: str
) -> CallKey:
    """A CallKey from already-validated ids, without validation.

    What ``CallKey.model_construct`` makes (equal, same hash, same fields set), at a third of
    its cost: the Assembler needs one per fragment event, so it is on the per-delta path.
    """
    key = CallKey.__new__(CallKey)
    put = object.__setattr__
    put(
        key,
        "__dict__",
        {
            "tenant": tenant,
            "turn_id": turn_id,
            "response_id": response_id,
            "item_id": item_id,
            "call_id": call_id,
        },
    )
    put(key, "__pydantic_fields_set__", set(_CALL_KEY_FIELDS))
    put(key, "__pydantic_extra__", None)
    put(key, "__pydantic_private__", None)
    return key


_ESCAPED: Final = "~"


def encode_key(parts: Sequence[str | int | None]) -> str:
    """An injective, never-raising string form of a tuple of ids (state keys, digests).

    Normally the orjson array of the parts (so ``["acme","t1"]``). A part holding a lone surrogate
    is not UTF-8 and cannot be written that way: then every string part is replaced by the hex of
    its ``surrogatepass`` UTF-8 bytes and the array is prefixed with ``~``. The two forms cannot
    meet (one starts with ``[``, the other with ``~``) and each is injective, so two different
    tuples never share a key, whatever their strings hold (a separator, quotes, U+001F, …).
    """
    try:
        return orjson.dumps(list(parts)).decode()
    except TypeError:
        escaped = [
            p.encode("utf-8", "surrogatepass").hex() if isinstance(p, str) else p for p in parts
        ]
        return _ESCAPED + orjson.dumps(escaped).decode()


def decode_key(text: str) -> list[Any]:
    """The parts :func:`encode_key` encoded (raises ValueError on text it did not make)."""
    if text.startswith(_ESCAPED):
        return [
            bytes.fromhex(p).decode("utf-8", "surrogatepass") if isinstance(p, str) else p
            for p in orjson.loads(text[len(_ESCAPED) :])
        ]
    parts = orjson.loads(text)
    if not isinstance(parts, list):
        raise ValueError("not an encoded key")
    return parts


def stable_id(*parts: str) -> str:
    """A deterministic id from its parts (the core has no randomness).

    Each part is length-prefixed, so no part's content can shift the boundary between parts
    (a part holding a separator such as U+001F never passes for two parts).
    """
    chunks: list[bytes] = []
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        chunks.append(len(data).to_bytes(8, "big"))
        chunks.append(data)
    return hashlib.sha256(b"".join(chunks)).hexdigest()[:32]  # one update: the same digest
