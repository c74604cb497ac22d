"""The per-delta shortcuts give exactly what the slow paths gave (state keys, call keys)."""

from __future__ import annotations

import pytest

from processor.core.assembly_state import _parse_text_key, _text_key
from processor.core.buffer import CallBuffer
from processor.core.events import CallKey, encode_key, trusted_call_key

IDS = [
    ("acme", "t1", "r1", "i1", "c1"),
    ('a"b', "t/1", "r\u001f", "é", "c,1]"),
    ("acme", "t\ud800", "r", "i", "c"),  # a lone surrogate: encode_key's escaped form
]


@pytest.mark.parametrize("ids", IDS)
def test_trusted_call_key_is_model_construct(ids: tuple[str, ...]) -> None:
    fast, slow = trusted_call_key(*ids), CallKey.model_construct(**dict(zip(CallKey.model_fields, ids, strict=True)))
    assert fast == slow and hash(fast) == hash(slow)
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.as_tuple == ids and fast.encoded() == slow.encoded()
    assert {slow: 1}[fast] == 1


@pytest.mark.parametrize("ids", IDS)
@pytest.mark.parametrize("position", [1, 7, 123456])
def test_text_key_matches_encode_key_and_parses_back(ids: tuple[str, ...], position: int) -> None:
    buf = CallBuffer(key=trusted_call_key(*ids))
    key = _text_key(buf, position)
    assert key == "text:" + encode_key((*ids, position))
    assert _parse_text_key(key) == (buf.key, position)
    assert buf.encoded_key == buf.key.encoded()
