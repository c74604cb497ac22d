"""The wire contract: schema drift, decoding that never crashes, the state table, the CLI surface."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.cli.schema_export import check_schemas, schema_documents
from processor.core.errors import InvalidTransition, RecordRejected
from processor.core.events import decode_input
from processor.core.states import ABSORBING, TRANSITIONS, CallState, Trigger, mermaid, next_state

ROOT = Path(__file__).parents[2]


def test_schemas_folder_matches_the_models() -> None:
    assert check_schemas(ROOT / "schemas") == []


def test_drift_is_detected(tmp_path: Path) -> None:
    for name, text in schema_documents().items():
        (tmp_path / name).write_bytes(text)
    assert check_schemas(tmp_path) == []
    victim = tmp_path / "dispatch.schema.json"
    victim.write_bytes(victim.read_bytes().replace(b'"dispatch_id"', b'"dispatchId"'))
    assert [p.split(":")[0] for p in check_schemas(tmp_path)] == ["drifted"]


def test_contract_field_names_are_in_the_schemas() -> None:
    docs = b"".join(schema_documents().values())
    for name in ("v", "type", "event_id", "command_id", "tenant", "turn_id", "response_id",
                 "item_id", "call_id", "seq", "tool", "delta", "arguments", "actor", "reason",
                 "dispatch_id", "args_digest"):  # fmt: skip
        assert b'"' + name.encode() + b'"' in docs, name


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_decoding_any_bytes_never_crashes(payload: bytes) -> None:
    try:
        decode_input(payload)
    except RecordRejected as exc:
        assert exc.reason in {"undecodable", "unknown_version", "unknown_type", "invalid_record"}


@given(
    st.dictionaries(
        st.sampled_from(["v", "type", "seq", "tenant", "delta", "x"]),
        st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5) | st.just("call.delta"),
    )
)
def test_decoding_any_object_never_crashes(obj: dict[str, object]) -> None:
    with contextlib.suppress(RecordRejected):
        decode_input(orjson.dumps(obj))


def test_absorbing_states_have_no_way_out() -> None:
    for state in ABSORBING:
        assert TRANSITIONS[state] == {}
        for trigger in Trigger:
            with pytest.raises(InvalidTransition):
                next_state(state, trigger)


def test_dispatch_is_reachable_only_from_validated() -> None:
    sources = [s for s, edges in TRANSITIONS.items() if CallState.DISPATCHED in edges.values()]
    assert sources == [CallState.VALIDATED]


def test_the_documented_diagram_is_drawn_from_the_table() -> None:
    doc = (ROOT / "docs" / "guarantees.md").read_text()
    assert mermaid() in doc, "docs/guarantees.md state diagram is stale: paste `processor states`"


def test_cli_schemas_check_passes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "processor.cli", "schemas", "check"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
