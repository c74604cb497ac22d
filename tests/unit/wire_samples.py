"""Wire samples for unit tests: one valid record (as a JSON object) of every input type the
worker reads, operator commands signed with a test keyring, and any JSON value (a hypothesis
strategy) to put in their fields."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import strategies as st

from processor.core.events import (
    ResponseQuarantined,
    ResponseStatus,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    encode,
)
from processor.ops.signing import Keyring, OperatorSigner, generate_keypair
from tests.unit.scenario import Call, turn_cancelled, turn_started

PRIV, PUB = generate_keypair()
KEYRING = Keyring.from_document(
    {"keys": [{"key_id": "k", "operator": "op", "public_key": PUB, "tenants": ["*"]}]}
)
OPS = OperatorSigner(PRIV, key_id="k", issued_by="op")
NOW = 100.0


def _operator(cls: Any, **target: Any) -> dict[str, Any]:
    command = cls(command_id="op-1", issued_by="op", issued_at=NOW, expires_at=NOW + 60, **target)
    return dict(orjson.loads(encode(OPS.sign(command))))


def _samples() -> list[dict[str, Any]]:
    call = Call(ts=NOW)
    events: list[Any] = [
        *call.stream('{"city": "Paris"}', 2),
        call.response_ended(ResponseStatus.COMPLETED),
        turn_started(),
        turn_cancelled(),
        call.confirm("sha256:x"),
        call.deny(),
    ]
    records = [dict(orjson.loads(encode(e))) for e in events]
    records += [
        _operator(ResponseQuarantined, tenant="acme", turn_id="turn-1", response_id="resp-1"),
        _operator(ToolDisabled, tool="getWeather", tenant="acme"),
        _operator(ToolEnabled, tool="get_weather"),
        _operator(TenantStopped, tenant="acme"),
        _operator(TenantResumed, tenant="acme"),
    ]
    return records


SAMPLES = _samples()
assert {r["type"] for r in SAMPLES} == {
    "call.started", "call.delta", "call.ended", "response.ended", "turn.started",
    "turn.cancelled", "call.confirmed", "call.denied", "response.quarantined", "tool.disabled",
    "tool.enabled", "tenant.stopped", "tenant.resumed",
}  # fmt: skip

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["nan", "inf", "-inf", "1", "call.delta", "acme", "a\x1fb", "\x00"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
"""Any JSON value (hypothesis' text excludes lone surrogates; RAW adds them as escapes)."""
