"""A smoke run of bench/bench_gating_delay.py on the recordings (figures are not asserted)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_gating_delay.py"


def test_gating_never_dispatches_earlier_than_call_end_and_covers_every_provider() -> None:
    spec = importlib.util.spec_from_file_location("bench_gating_delay", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main()
    assert {r["provider"] for r in result["rows"]} == {
        "anthropic",
        "bedrock",
        "gemini",
        "openai-chat",
        "openai-responses",
    }
    assert all(r["events_held"] >= 0 and r["bytes_held"] >= 0 for r in result["rows"])
    assert "| anthropic |" in module.markdown(result)
