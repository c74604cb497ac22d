"""Every Prometheus object lives in ``processor.observability.metrics``, named by one convention."""

from __future__ import annotations

import ast
from pathlib import Path

from prometheus_client import Counter, Gauge, Histogram

import processor
from processor.observability import metrics

PACKAGE = Path(processor.__file__).parent
METRIC_TYPES = {"Counter", "Gauge", "Histogram", "Summary", "Info", "Enum"}


def test_no_metric_is_defined_outside_the_metrics_module() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "observability" / "metrics.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "prometheus_client":
                names = {alias.name for alias in node.names}
                if names & METRIC_TYPES:
                    offenders.append(f"{path.relative_to(PACKAGE)}: {sorted(names)}")
    assert offenders == []


def test_metric_names_follow_the_convention() -> None:
    objects = [v for v in vars(metrics).values() if isinstance(v, Counter | Gauge | Histogram)]
    assert len(objects) >= 25
    for metric in objects:
        name = metric._name
        assert name.startswith("toolcall_"), name
        if isinstance(metric, Histogram):
            assert name.endswith("_seconds"), name
        assert "call_id" not in metric._labelnames and "turn_id" not in metric._labelnames
    executor = {m._name for m in objects if m._name.startswith("toolcall_executor_")}
    assert executor == {
        "toolcall_executor_outcomes",
        "toolcall_executor_skipped",
        "toolcall_executor_control_records",
        "toolcall_executor_barrier_duration_seconds",
        "toolcall_executor_handler_duration_seconds",
        "toolcall_executor_take_failures",
        "toolcall_executor_seconds_since_progress",
    }


def test_counter_names_are_written_without_total() -> None:
    """prometheus-client appends ``_total`` to counters; the module writes every name bare."""
    tree = ast.parse((PACKAGE / "observability" / "metrics.py").read_text(encoding="utf-8"))
    names = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Counter"
        and isinstance(node.args[0], ast.Constant)
    ]
    assert names and not [n for n in names if n.endswith("_total")]
