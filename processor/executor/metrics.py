"""Prometheus metrics of the executor client (labels never carry argument values or ids)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

OUTCOMES: Final = Counter(
    "toolcall_executor_outcomes_total",
    "Dispatched calls by tool and outcome (succeeded, failed, refused, unknown) and reason code.",
    ["tool", "outcome", "reason"],
)
SKIPPED: Final = Counter(
    "toolcall_executor_skipped_total",
    "Dispatch records not run: duplicate (dispatch id already in the ledger), other_tool "
    "(another executor group's tool), undecodable.",
    ["why"],
)
CONTROL_RECORDS: Final = Counter(
    "toolcall_executor_control_records_total",
    "Control records the fence read, by what it did with them.",
    ["outcome"],
)
BARRIER_SECONDS: Final = Histogram(
    "toolcall_executor_barrier_seconds",
    "Time to read control up to the end offset before a call runs.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
HANDLER_SECONDS: Final = Histogram(
    "toolcall_executor_handler_seconds",
    "Handler run time by tool.",
    ["tool"],
)
