"""Generating ``schemas/*.schema.json`` from the wire-contract models, and detecting drift
(``processor schemas export|check``, :mod:`processor.cli.schemas`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, TypeAdapter

from processor.core import events
from processor.executor.records import ExecutionEntry, ExecutionResult

SCHEMA_SOURCES: dict[str, Any] = {
    "fragment-event": events.FragmentEvent,
    "control-event": events.ControlEvent,
    "call-key": events.CallKey,
    "dispatch": events.Dispatch,
    "proposal": events.Proposal,
    "status": events.Status,
    "ledger": events.Ledger,
    "audit": events.Audit,
    "deadletter": events.DeadLetter,
    "execution-result": ExecutionResult,
    "execution-entry": ExecutionEntry,
}


def schema_documents() -> dict[str, bytes]:
    """File name → canonical JSON Schema text, for every record of the wire contract."""
    documents = {}
    for name, source in SCHEMA_SOURCES.items():
        if isinstance(source, type) and issubclass(source, BaseModel):
            schema = source.model_json_schema(mode="serialization")
        else:
            schema = TypeAdapter(source).json_schema(mode="serialization")
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://toolcall-processor/schemas/v{events.WIRE_VERSION}/{name}.schema.json",
            "title": schema.pop("title", name),
            **schema,
        }
        text = orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        documents[f"{name}.schema.json"] = text
    return documents


def export_schemas(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_documents().items():
        path = folder / name
        path.write_bytes(text)
        written.append(path)
    return written


def check_schemas(folder: Path) -> list[str]:
    """Lines describing every drift between the models and the files (empty = in sync)."""
    problems = []
    expected = schema_documents()
    for name, text in expected.items():
        path = folder / name
        if not path.exists():
            problems.append(f"missing: {path}")
        elif path.read_bytes() != text:
            problems.append(f"drifted: {path} (run: processor schemas export)")
    for path in sorted(folder.glob("*.schema.json")):
        if path.name not in expected:
            problems.append(f"stale: {path} (no model produces it)")
    return problems
