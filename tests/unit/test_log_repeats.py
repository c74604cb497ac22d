"""A broker outage must not flood the log: repeated aiokafka lines pass once per window."""

from __future__ import annotations

import io
import logging

import orjson

from processor.observability.logging import JsonFormatter, RepeatedLines


def _record(name: str, msg: str, created: float, level: int = logging.ERROR) -> logging.LogRecord:
    record = logging.LogRecord(name, level, __file__, 1, msg, None, None)
    record.created = created
    return record


def test_a_repeated_line_passes_once_per_window_and_counts_what_was_held() -> None:
    lines = RepeatedLines("aiokafka", window=10.0)
    passed = [
        t
        for t in [0.0, 0.1, 0.2, 5.0, 9.9, 10.0, 10.1, 25.0]
        if lines.filter(_record("aiokafka", "Unable connect to node 1", t))
    ]
    assert passed == [0.0, 10.0, 25.0]
    again = _record("aiokafka", "Unable connect to node 1", 40.0)
    lines.filter(_record("aiokafka", "Unable connect to node 1", 30.0))
    assert lines.filter(again)
    assert again.fields == {"repeated": 1}  # type: ignore[attr-defined]


def test_distinct_lines_loggers_and_levels_are_counted_apart() -> None:
    lines = RepeatedLines("aiokafka", window=10.0)
    assert lines.filter(_record("aiokafka", "a", 0.0))
    assert lines.filter(_record("aiokafka", "b", 0.0))
    assert lines.filter(_record("aiokafka.consumer.fetcher", "a", 0.0))
    assert lines.filter(_record("aiokafka", "a", 0.0, logging.WARNING))
    assert not lines.filter(_record("aiokafka", "a", 1.0))


def test_other_loggers_are_never_held() -> None:
    lines = RepeatedLines("aiokafka", window=10.0)
    for name in ("processor.worker", "aiokafkax", "root"):
        assert all(lines.filter(_record(name, "same", 0.0)) for _ in range(5))


def test_memory_is_bounded_and_the_oldest_line_is_forgotten() -> None:
    lines = RepeatedLines("aiokafka", window=10.0, max_lines=3)
    for i in range(10):
        assert lines.filter(_record("aiokafka", f"line {i}", 0.0))
    assert lines.remembered == 3
    assert lines.filter(_record("aiokafka", "line 0", 1.0))  # forgotten, so it passes again
    assert not lines.filter(_record("aiokafka", "line 9", 1.0))


def test_the_count_reaches_the_json_line_next_to_existing_fields() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RepeatedLines("aiokafka", window=10.0))
    for t in (0.0, 1.0, 2.0, 11.0):
        record = _record("aiokafka", "Unable connect", t)
        record.fields = {"node": 1}
        handler.handle(record)
    rows = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["ts"], r.get("repeated")) for r in rows] == [(0.0, None), (11.0, 2)]
    assert rows[1]["node"] == 1
