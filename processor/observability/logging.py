"""Structured JSON logs, one object per line on stderr, that never carry argument values.

Use the stdlib logger and put structured fields in ``extra={"fields": {...}}``::

    log.info("partition restored", extra={"fields": {"partition": 3, "records": 120}})

The formatter writes ``ts``, ``level``, ``logger``, ``msg``, the fields and, for exceptions, the
exception type and a traceback. Fields whose names suggest payload content (``arguments``,
``delta``, ``payload``, ``value``, ``text``, …) are replaced by ``"[redacted]"`` whatever their
value, so a careless call site cannot leak argument text (invariant 8). Messages themselves are
the caller's responsibility: never format a record's content into them.

A client without its broker logs the same line many times a second (aiokafka retries each
connection every 100 ms: ~130 lines a second from one executor). :class:`RepeatedLines` lets
each distinct aiokafka line through once per window and counts the rest into the next one
that passes (``"repeated": n``), so an outage reads as a few lines a minute, with counts.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Final

import orjson

from processor.observability.terminal import printable_json

REDACTED: Final = "[redacted]"
_PAYLOAD_FIELDS: Final = frozenset(
    {"arguments", "args", "delta", "deltas", "payload", "value", "text", "body", "chunk"}
)


def redact(fields: dict[str, Any]) -> dict[str, Any]:
    """Replace payload-like fields by a marker (by name, whatever the value)."""
    return {k: (REDACTED if k.lower() in _PAYLOAD_FIELDS else v) for k, v in fields.items()}


class JsonFormatter(logging.Formatter):
    """Formats a log record as one JSON object."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(redact(fields))
        if record.exc_info and record.exc_info[0] is not None:
            data["exc_type"] = record.exc_info[0].__name__
            data["traceback"] = self.formatException(record.exc_info)
        return printable_json(orjson.dumps(data, default=str).decode())


class RepeatedLines(logging.Filter):
    """Passes a line of a ``prefix`` logger at most once per ``window`` seconds of its own
    record times (no clock); the next one that passes carries ``repeated``, the number held
    back. Remembers at most ``max_lines`` distinct lines (the oldest are forgotten)."""

    def __init__(self, prefix: str, window: float = 10.0, max_lines: int = 256) -> None:
        super().__init__()
        self.prefix = prefix
        self.window = window
        self.max_lines = max_lines
        self._seen: dict[tuple[str, int, str], list[float]] = {}  # line: [last passed, held]

    @property
    def remembered(self) -> int:
        """How many distinct lines it remembers now (at most ``max_lines``)."""
        return len(self._seen)

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if name != self.prefix and not name.startswith(self.prefix + "."):
            return True
        line = (record.name, record.levelno, record.getMessage())
        seen = self._seen.get(line)
        if seen is not None and record.created - seen[0] < self.window:
            seen[1] += 1
            return False
        if seen is not None and seen[1]:
            held = getattr(record, "fields", None)
            record.fields = {**(held if isinstance(held, dict) else {}), "repeated": int(seen[1])}
        self._seen.pop(line, None)
        self._seen[line] = [record.created, 0]
        while len(self._seen) > self.max_lines:
            del self._seen[next(iter(self._seen))]
        return True


def configure_logging(level: str | int = "INFO") -> None:
    """Send every log record of the process to stderr as JSON lines (idempotent)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_toolcall_json", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._toolcall_json = True  # type: ignore[attr-defined]
    handler.addFilter(RepeatedLines("aiokafka"))
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
    # aiokafka logs every rebalance step at INFO and transient errors at ERROR; keep WARNING+
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    logging.Formatter.converter = time.gmtime


def fields(**values: Any) -> dict[str, Any]:
    """``extra=fields(partition=3)``: shorthand for structured fields."""
    return {"fields": values}
