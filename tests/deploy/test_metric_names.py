"""Every metric the dashboard, the alert rules and the Prometheus config name is one the code
exports (processor/observability/metrics.py), with the sample suffixes Prometheus sees:
``_total``/``_created`` on counters, ``_bucket``/``_count``/``_sum``/``_created`` on histograms.
And the dashboard covers what operators need to see."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from processor.observability import metrics
from tests.deploy.conftest import CHART, ROOT

DASHBOARD = CHART / "files" / "dashboards" / "toolcall-processor.json"
RULES = CHART / "files" / "prometheus-rules.yaml"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
_NAME = re.compile(r"\btoolcall_[a-z0-9_]+\b")
_SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
}


def exported_names() -> set[str]:
    """Sample names of every metric object defined in the metrics module."""
    names: set[str] = set()
    for obj in vars(metrics).values():
        if isinstance(obj, Counter | Gauge | Histogram):
            for family in obj.describe():
                names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
    return names


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["definition"])
    return exprs


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def referenced(exprs: list[str]) -> set[str]:
    return {name for expr in exprs for name in _NAME.findall(expr)}


def test_exported_names_follow_the_suffix_rules() -> None:
    names = exported_names()
    assert "toolcall_records_consumed_total" in names
    assert "toolcall_records_consumed" not in names  # counters are exposed with _total
    assert "toolcall_dispatch_latency_seconds_bucket" in names
    assert "toolcall_consumer_lag_records" in names


@pytest.mark.parametrize(
    ("source", "exprs"),
    [("dashboard", dashboard_exprs), ("alert rules", rule_exprs)],
)
def test_every_referenced_metric_is_exported(source: str, exprs: Any) -> None:
    found = referenced(exprs())
    assert found, f"the {source} reference no metric"
    assert sorted(found - exported_names()) == []


def test_prometheus_config_names_no_unknown_metric() -> None:
    assert sorted(referenced([PROMETHEUS.read_text()]) - exported_names()) == []


def test_a_renamed_metric_would_be_caught() -> None:
    assert referenced(["rate(toolcall_records_consumed[5m])"]) - exported_names()
    assert referenced(["toolcall_dispatch_latency_seconds"]) - exported_names()


def test_dashboard_covers_what_operators_watch() -> None:
    bases = {
        re.sub(r"_(total|bucket|count|sum|created)$", "", n) for n in referenced(dashboard_exprs())
    }
    needed = {
        "toolcall_records_consumed",  # throughput
        "toolcall_output_records",
        "toolcall_consumer_lag_records",  # lag
        "toolcall_terminal_outcomes",  # outcomes by reason
        "toolcall_dispatch_latency_seconds",
        "toolcall_transaction_duration_seconds",
        "toolcall_transaction_aborts",
        "toolcall_rebalances",
        "toolcall_restore_duration_seconds",  # restore time
        "toolcall_executor_outcomes",
        "toolcall_deadletters",
        "toolcall_control_commands",  # operator commands applied and rejected
        "toolcall_mcp_definition_changes",  # an MCP server's tools departing from their pins
        "toolcall_executor_seconds_since_progress",  # the executor's stall watchdog
    }
    assert sorted(needed - bases) == []
    doc = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}"


def test_alerts_cover_the_failure_modes() -> None:
    rules = {
        rule["alert"]: rule["expr"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
    }
    joined = " ".join(rules.values())
    assert "toolcall_consumer_lag_records" in joined
    assert "toolcall_deadletters_total" in joined
    assert "toolcall_transaction_aborts_total" in joined
    assert 'toolcall_control_commands_total{outcome="rejected"' in joined
    assert 'toolcall_executor_control_records_total{outcome="rejected"}' in joined
    assert 'toolcall_executor_outcomes_total{outcome="unknown"}' in joined
    for name, expr in rules.items():
        assert expr.count("(") == expr.count(")"), name
        assert expr.count("{") == expr.count("}"), name
