"""The shared verdict shape: one table per provider, judged one way, shown in
docs/guarantees.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.adapters.providers import TABLES, readme_tables
from processor.adapters.verdicts import (
    Stop,
    StopTable,
    Verdict,
    alternative_response_id,
    is_chosen,
    normal,
    voiding,
)
from processor.core.events import ResponseStatus

ROOT = Path(__file__).parents[2]
TABLE = StopTable(
    provider="toy",
    read_from="stop",
    rules={"ok": normal("fine"), "cut": voiding(ResponseStatus.INCOMPLETE, "limit")},
)


def test_documented_stop_reason_tables_are_the_code_tables() -> None:
    doc = (ROOT / "docs" / "guarantees.md").read_text()
    assert readme_tables() in doc, (
        "docs/guarantees.md provider tables are stale: "
        "paste `python -m processor.adapters.providers`"
    )


def test_every_provider_has_a_table_whose_only_normal_status_is_completed() -> None:
    tables = [row.stops for row in TABLES]
    assert len(tables) == 5
    for table in tables:
        normal_reasons = [r for r, s in table.rules.items() if s.verdict is Verdict.NORMAL]
        assert normal_reasons, table.provider
        assert table.unknown.verdict is Verdict.VOIDING
        for reason, stop in table.rules.items():
            assert (stop.verdict is Verdict.NORMAL) == (stop.status is ResponseStatus.COMPLETED)
            assert table.judge(reason) == (stop.status, reason)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("ok", (ResponseStatus.COMPLETED, "ok")),
        ("cut", (ResponseStatus.INCOMPLETE, "cut")),
        ("brand_new", (ResponseStatus.FAILED, "brand_new")),
        (None, (ResponseStatus.FAILED, "unknown")),
        ("has spaces and s3cr3t text", (ResponseStatus.FAILED, "unknown")),
        (["ok"], (ResponseStatus.FAILED, "unknown")),
    ],
)
def test_judge_unknown_is_voiding_and_the_reason_is_always_a_code(
    reason: object, expected: tuple[ResponseStatus, str]
) -> None:
    assert TABLE.judge(reason) == expected


def test_a_normal_stop_is_exactly_a_completed_one() -> None:
    with pytest.raises(ValueError, match="completed"):
        Stop(Verdict.NORMAL, ResponseStatus.FAILED, "x")
    with pytest.raises(ValueError, match="completed"):
        Stop(Verdict.VOIDING, ResponseStatus.COMPLETED, "x")


def test_alternative_ids_and_choice() -> None:
    assert alternative_response_id("chatcmpl-1", 2) == "chatcmpl-1~alt2"
    assert is_chosen(0, 0) and not is_chosen(0, 1) and is_chosen(1, 1)
    assert not is_chosen(None, 0)
