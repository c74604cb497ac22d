"""`processor tail` lines for people: one per record, never an argument value."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from processor.kafka.tail import TAIL_ROLES, record_line

KEY = {"tenant": "acme", "turn_id": "t1", "response_id": "r1", "item_id": "i", "call_id": "c1"}


def record(value: dict[str, Any]) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="x", partition=2, offset=7, timestamp=0, timestamp_type=0, key=b"acme/t1",
        value=orjson.dumps(value), checksum=None, serialized_key_size=7,
        serialized_value_size=1, headers=[],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({**KEY, "type": "dispatch", "tool": "get_weather", "tool_version": "2", "actor": "alice",
          "dispatch_id": "d1", "arguments": {"city": "SECRET"}}, "tool=get_weather@2"),
        ({**KEY, "type": "execution.result", "tool": "book_slot", "outcome": "refused",
          "reason": "turn_cancelled", "dispatch_id": "d1", "executor_group": "g",
          "output": {"x": "SECRET"}}, "refused reason=turn_cancelled"),
        ({**KEY, "type": "ledger", "tool": "t", "state": "failed", "terminal_reason": "malformed_json",
          "fragment_count": 3, "bytes": 10}, "reason=malformed_json"),
        ({**KEY, "type": "dispatch", "tool": "transfer", "namespace": "crm", "tool_version": "1",
          "actor": "alice", "dispatch_id": "d1", "arguments": {"to": "SECRET"}},
         "tool=crm.transfer@1"),
        ({**KEY, "type": "ledger", "tool": "transfer", "namespace": "crm", "state": "failed",
          "terminal_reason": "unknown_tool", "fragment_count": 3, "bytes": 10},
         "tool=crm.transfer failed"),
    ],
)  # fmt: skip
def test_lines_name_the_facts_but_never_argument_values(value: dict[str, Any], expected: str) -> None:
    line = record_line(record(value))
    assert "p2@7" in line and expected in line
    assert "SECRET" not in line


def test_results_can_be_tailed() -> None:
    assert "results" in TAIL_ROLES
