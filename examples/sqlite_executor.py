"""An executor with a real side effect, made idempotent by ``dispatch_id``: SQLite rows.

Run it next to a worker::

    WEATHER_DB=lookups.sqlite processor executor run \\
        --handlers examples.sqlite_executor:handlers --group weather --tools examples/tools.yaml

``get_weather`` records a forecast request in the ``lookups`` table, keyed by the call's
``dispatch_id`` (``call.idempotency_key``). The executor client already runs each dispatch at
most once per executor group; the key makes the side effect itself idempotent too, so a second
group, an operator's replay or a retry after an ``unknown`` outcome finds the row instead of
writing another. The insert and the read back happen in one SQLite transaction.

The handler returns the row's reference for the result record; it never logs the arguments.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor.executor.handlers import Call, Handlers

SCHEMA = """
CREATE TABLE IF NOT EXISTS lookups (
    dispatch_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    location TEXT NOT NULL,
    requested_by TEXT NOT NULL
)
"""


def record_lookup(db: Path, call: Call) -> tuple[int, bool]:
    """Insert the call's row unless its dispatch_id is there; return (rowid, newly written)."""
    location = str(call.arguments.get("location") or call.arguments.get("city") or "")
    with sqlite3.connect(db) as conn:  # one transaction: committed on leaving the block
        conn.execute(SCHEMA)
        cursor = conn.execute(
            "INSERT INTO lookups (dispatch_id, tenant, turn_id, location, requested_by) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(dispatch_id) DO NOTHING",
            (call.idempotency_key, call.key.tenant, call.key.turn_id, location, call.actor),
        )
        written = cursor.rowcount == 1
        (rowid,) = conn.execute(
            "SELECT rowid FROM lookups WHERE dispatch_id = ?", (call.idempotency_key,)
        ).fetchone()
    return int(rowid), written


def make_handlers(db: Path) -> Handlers:
    handlers = Handlers()

    @handlers.tool(
        "get_weather", version="2", requires_confirmation=False, timeout_seconds=10.0
    )
    async def get_weather(call: Call) -> Mapping[str, Any]:
        rowid, written = await asyncio.to_thread(record_lookup, db, call)
        return {"lookup_ref": f"LK-{rowid}", "repeated": not written}

    return handlers


handlers = make_handlers(Path(os.environ.get("WEATHER_DB", "weather-lookups.sqlite")))
