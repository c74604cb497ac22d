"""A dead letter's ``detail`` is built from error kinds and field paths, never from a record's text
(issue 30, item 4).

A record's keys are payload as much as its values: ``{"api_key=sk-…": 1}`` is a key, and a key of
500 characters once overflowed ``detail``'s 512-character limit, so ``handle`` of the raw record
raised and ``processor replay`` stopped with exit 70. An unknown key (or an unknown ``type``) is named by its
length and a short digest only; the rest of ``detail`` is the record type, declared field names
and pydantic's error kinds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from processor.core.assembler import Assembler
from processor.core.events import DeadLetter, encode
from processor.core.outputs import RecordSource
from tests.unit.replay_run import ROOT, TOOLS, scenario
from tests.unit.scenario import registry
from tests.unit.wire_samples import JSON, SAMPLES

NOW = 100.0
SHOWN = 5  # no run of this many characters of a record's unknown key may reach ``detail``
_STAND_IN = re.compile(r"#[0-9a-f]{8} \d+ chars")


def _dead_letter(record: dict[str, Any] | bytes) -> DeadLetter:
    payload = record if isinstance(record, bytes) else orjson.dumps(record)
    outputs = Assembler(registry()).handle(payload, NOW, source=RecordSource("fragments", 0, 7))
    for output in outputs:
        encode(output)  # every output is a valid record that encodes
    [dead] = [o for o in outputs if isinstance(o, DeadLetter)]
    return dead


def _leaked(text: str, detail: str, template: str) -> list[str]:
    """Runs of ``SHOWN`` characters of ``text`` found in ``detail`` that the same record with a
    neutral text in its place does not produce (the record type, field names, error kinds)."""
    detail, template = _STAND_IN.sub("#", detail), _STAND_IN.sub("#", template)
    runs = {text[i : i + SHOWN] for i in range(len(text) - SHOWN + 1)}
    return sorted(r for r in runs if r in detail and r not in template)


KEYS = st.text(min_size=1, max_size=2000) | st.text(
    st.characters(codec="utf-8"), min_size=400, max_size=5000
)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.sampled_from(SAMPLES), st.lists(KEYS, min_size=1, max_size=3), JSON | KEYS)
@example(
    SAMPLES[0], ["x" * 500], 1
)  # the ~500-character name that crashed handle_record (now handle)
@example(SAMPLES[0], ["api_key=sk-live-0123456789abcdef"], "v")
@example(SAMPLES[0], ["\x1b[2J\u202eevil"], None)
def test_unknown_keys_of_any_length_and_content_never_crash_nor_reach_detail(
    sample: dict[str, Any], keys: list[str], value: object
) -> None:
    keys = [k for k in keys if k not in sample]
    record = {**sample, **dict.fromkeys(keys, value)}
    dead = _dead_letter(record)
    assert dead.reason == "invalid_record"
    assert len(dead.detail) <= 512
    neutral = _dead_letter({**sample, **{"\x00" * (i + 1): value for i in range(len(keys))}})
    for key in keys:
        assert not _leaked(key, dead.detail, neutral.detail), dead.detail


@PROPERTY
@given(st.sampled_from(SAMPLES), KEYS)
@example(SAMPLES[0], "token=sk-live-0123456789abcdef")
def test_an_unknown_type_is_named_by_digest_never_quoted(sample: dict[str, Any], kind: str) -> None:
    dead = _dead_letter({**sample, "type": kind})
    neutral = _dead_letter({**sample, "type": "\x00"})
    if dead.reason == "unknown_type":
        assert not _leaked(kind, dead.detail, neutral.detail), dead.detail


def test_the_detail_still_says_where_and_what() -> None:
    dead = _dead_letter({**SAMPLES[0], "api_key=sk-live-0123456789": 1, "seq": "3"})
    assert "api_key" not in dead.detail and "sk-live" not in dead.detail
    assert "call.started.seq: literal_error" in dead.detail
    assert re.search(r"call\.started\.<name #[0-9a-f]{8} 26 chars>: extra_forbidden", dead.detail)


def test_replay_reviews_the_whole_file_past_a_record_with_a_long_key() -> None:
    """Before: the 500-character key made `processor replay` exit 70 at that line."""
    poisoned = orjson.dumps({**SAMPLES[0], "k" * 500 + "=secret": 1})
    lines = [poisoned, *scenario()]
    result = subprocess.run(
        [sys.executable, "-m", "processor.cli", "replay", "--tools", str(TOOLS), "-"],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    out = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert out[0]["kind"] == "deadletter" and "secret" not in out[0]["detail"]
    assert [o["kind"] for o in out].count("dispatch") == 1  # the rest was reviewed
