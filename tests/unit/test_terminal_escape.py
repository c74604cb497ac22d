"""Untrusted text never reaches a terminal raw (issue 30, item 5).

Identifiers exclude C0/C1 controls but not Unicode format characters (U+202E and the rest of
category Cf) nor U+2028/U+2029, and free text (reasons, a dead letter's detail) may hold anything.
``processor tail``, ``processor audit``, ``processor replay`` (text and JSON), the CLI's error
line and the JSON log lines escape it in one place, ``processor.observability.terminal``.
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from typing import Any

import orjson
from aiokafka.structs import ConsumerRecord
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.cli.offline import output_line, text_line
from processor.core.events import Audit, AuditOutcome, encode
from processor.core.outputs import RecordSource, dead_letter
from processor.kafka.tail import record_json, record_line
from processor.observability.logging import JsonFormatter, fields
from processor.observability.terminal import printable, printable_json
from processor.ops.audit import AuditEntry
from tests.unit.replay_run import ROOT, TOOLS
from tests.unit.scenario import Call, turn_started

RLO, LS, ESC = "\u202e", "\u2028", "\x1b"
KEY = {"tenant": "acme", "turn_id": "t1", "response_id": "r1", "item_id": "i", "call_id": "c1"}


def _clean(text: str) -> bool:
    return all(c.isprintable() for c in text)


def _record(value: dict[str, Any] | bytes) -> ConsumerRecord[bytes, bytes]:
    data = value if isinstance(value, bytes) else orjson.dumps(value)
    return ConsumerRecord(
        topic="x", partition=2, offset=7, timestamp=0, timestamp_type=0, key=b"acme/t1",
        value=data, checksum=None, serialized_key_size=7, serialized_value_size=1, headers=[],
    )  # fmt: skip


AUDIT = Audit(
    audit_id="a1",
    command_id="cmd-1",
    command_type="tenant.stopped",
    issued_by=f"op{RLO}lanigiro",
    tenant="acme",
    reason=f"because{LS}{ESC}[2J",
    outcome=AuditOutcome.APPLIED,
    ts=100.0,
)
DEAD = dead_letter(b"{}", RecordSource(f"file{ESC}]0;pwned\x07", 0, 3), "invalid_record",
                   f"{ESC}[31mred{RLO}", 100.0)  # fmt: skip
HOSTILE = [
    {**KEY, "type": "dispatch", "tool": f"get{RLO}rehtaew", "tool_version": "1",
     "actor": f"al{LS}ice", "dispatch_id": "d1", "arguments": {"city": "x"}},
    {**KEY, "type": "ledger", "tool": f"t{RLO}", "state": "failed", "terminal_reason": f"r{ESC}",
     "fragment_count": 1, "bytes": 1},
    orjson.loads(encode(AUDIT)),
    orjson.loads(encode(DEAD)),
    {**KEY, "type": "execution.result", "tool": f"\u2066t{RLO}", "outcome": "refused",
     "reason": f"{ESC}c", "dispatch_id": "d", "executor_group": f"g{chr(0x9B)}"},
]  # fmt: skip


def test_tail_lines_escape_format_characters_separators_and_controls() -> None:
    for value in HOSTILE:
        line = record_line(_record(value))
        assert _clean(line), repr(line)
    dispatch = record_line(_record(HOSTILE[0]))
    assert "tool=get\\u202erehtaew@1" in dispatch and "actor=al\\u2028ice" in dispatch


def test_tail_json_is_escaped_and_reads_back_to_the_same_value() -> None:
    for value in HOSTILE:
        text = record_json(_record(value)).decode()
        assert _clean(text), repr(text)
        assert orjson.loads(text)["value"] == value


def test_audit_lines_and_json_are_escaped() -> None:
    entry = AuditEntry(AUDIT, 1, set())
    assert _clean(entry.line()) and "by=op\\u202elanigiro" in entry.line()
    shown = printable_json(orjson.dumps(entry.as_json()).decode())
    assert orjson.loads(shown)["issued_by"] == AUDIT.issued_by


def test_replay_text_and_json_lines_are_escaped() -> None:
    for record in (AUDIT, DEAD):
        assert _clean(text_line(record).decode().rstrip("\n"))
        line = output_line(record).decode()
        assert _clean(line.rstrip("\n"))
        assert orjson.loads(line)["ts"] == 100.0
    assert "\\x1b[31mred\\u202e" in text_line(DEAD).decode()


def test_processor_replay_prints_a_models_bidi_tool_name_escaped() -> None:
    call = Call()
    events = [turn_started(), call.start(tool=f"get{RLO}rehtaew"), call.delta(1, "{}"), call.end(2)]
    lines = [encode(e) for e in events]  # an unknown tool, named by the model
    result = subprocess.run(
        [sys.executable, "-m", "processor.cli", "replay", "--tools", str(TOOLS),
         "--format", "text", "-"],
        input=b"\n".join(lines) + b"\n", capture_output=True, cwd=ROOT, check=True,
    )  # fmt: skip
    out = result.stdout.decode()
    assert "get\\u202erehtaew" in out and RLO not in out


def test_log_lines_are_escaped_json() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("test.terminal")
    log.addHandler(handler)
    try:
        log.warning("x", extra=fields(tool=f"t{RLO}", issuer=f"i{LS}", detail=f"{ESC}[2J"))
    finally:
        log.removeHandler(handler)
    line = stream.getvalue().rstrip("\n")
    assert _clean(line)
    assert orjson.loads(line)["tool"] == f"t{RLO}"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_printable_escapes_everything_a_terminal_could_act_on(text: str) -> None:
    shown = printable(text)
    assert _clean(shown)
    if text.isprintable():
        assert shown == text
    as_json = printable_json(orjson.dumps({"k": text, text: [text]}).decode())
    assert _clean(as_json)
    assert orjson.loads(as_json) == {"k": text, text: [text]}
