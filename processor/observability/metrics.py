"""Every Prometheus metric of the processor, defined here and nowhere else.

Naming: one prefix (``toolcall_``; ``toolcall_executor_`` for the executor client), base units
as suffixes (``_seconds``, ``_bytes``), ``_total`` on counters (prometheus-client appends it to
the counter names given below, so they are written without it). Labels are bounded: a topic
*role* (``fragments``, ``control``, ``dispatch``, …), a partition number (bounded by the
partition count), a terminal reason, refusal code or dead-letter reason (closed vocabularies), a
handler's failure code (chosen by the handler's code), a tool name (bounded by the registry and
the handlers an executor registers), an abort cause (a small fixed set). Never call ids, turn
ids, tenants or argument values (invariant 8).

All objects live in the default registry, so one process exposes them on one endpoint
(:mod:`processor.observability.health`).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
_RESTORE_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_BARRIER_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# -- consumption ---------------------------------------------------------------------------

RECORDS_CONSUMED: Final = Counter(
    "toolcall_records_consumed",
    "Input records consumed and handed to an Assembler, by topic role.",
    ["topic"],
)
RECORDS_SKIPPED: Final = Counter(
    "toolcall_records_skipped",
    "Fetched records not processed (already processed, or fetched before a partition reset).",
    ["topic"],
)
FRAGMENTS_PAUSED: Final = Counter(
    "toolcall_fragments_paused",
    "Times a partition's fragments were paused until control caught up (back-pressure on a "
    "backlog: calls read ahead of control wait for it, open).",
    ["partition"],
)
CONSUMER_LAG: Final = Gauge(
    "toolcall_consumer_lag_records",
    "Last stable offset minus the next offset to process, per input partition.",
    ["topic", "partition"],
)

UNSIGNED_COMMANDS_ALLOWED: Final = Gauge(
    "toolcall_unsigned_commands_allowed",
    "1 when this process applies operator commands WITHOUT signature checks (started with "
    "--allow-unsigned-commands or --allow-unsigned-operators and no keyring: development only).",
)

GC_FROZEN_OBJECTS: Final = Gauge(
    "toolcall_gc_frozen_objects",
    "Objects the worker has taken out of the cyclic garbage collector's scans (its modules and "
    "long-lived state; processor.runtime.collector).",
)

# -- assembler state ----------------------------------------------------------------------

OPEN_BUFFERS: Final = Gauge(
    "toolcall_open_buffers",
    "Call buffers that are not yet terminal, per input partition.",
    ["partition"],
)
BUFFERED_BYTES: Final = Gauge(
    "toolcall_buffered_bytes",
    "Argument bytes held by open call buffers, per input partition.",
    ["partition"],
)
TERMINAL_OUTCOMES: Final = Counter(
    "toolcall_terminal_outcomes",
    "Calls that reached a terminal state, by state and terminal reason.",
    ["state", "reason"],
)
OUTPUT_RECORDS: Final = Counter(
    "toolcall_output_records",
    "Output records committed, by topic role.",
    ["topic"],
)
DEADLETTERS: Final = Counter(
    "toolcall_deadletters",
    "Input records sent to the dead-letter topic, by reason.",
    ["reason"],
)
CONTROL_COMMANDS: Final = Counter(
    "toolcall_control_commands",
    "Control events and operator commands the Assemblers judged (one audit record each), by "
    "command type, outcome (applied, rejected) and rejection reason (closed vocabulary, or none).",
    ["type", "outcome", "rejection"],
)
DISPATCH_LATENCY: Final = Histogram(
    "toolcall_dispatch_latency_seconds",
    "From the timestamp of the record that triggered a dispatch (the terminal event, or a "
    "confirmation) to the commit of the transaction holding the dispatch record.",
    buckets=_LATENCY_BUCKETS,
)

# -- transactions -------------------------------------------------------------------------

TRANSACTION_DURATION: Final = Histogram(
    "toolcall_transaction_duration_seconds",
    "Duration of one committed transaction (outputs, changelog, offsets, commit).",
    buckets=_LATENCY_BUCKETS,
)
TRANSACTIONS: Final = Counter(
    "toolcall_transactions",
    "Transactions committed.",
)
TRANSACTION_ABORTS: Final = Counter(
    "toolcall_transaction_aborts",
    "Transactions aborted or abandoned, by cause (timeout, fenced, kafka_error, error).",
    ["cause"],
)
PARTITION_RESETS: Final = Counter(
    "toolcall_partition_resets",
    "Partitions rebuilt (new producer, state restored, offsets re-read) after a failure.",
)

# -- group membership and state ------------------------------------------------------------

REBALANCES: Final = Counter(
    "toolcall_rebalances",
    "Rebalance callbacks, by event (assigned, revoked).",
    ["event"],
)
ASSIGNED_PARTITIONS: Final = Gauge(
    "toolcall_assigned_partitions",
    "Input partition numbers assigned to this worker.",
)
READY_PARTITIONS: Final = Gauge(
    "toolcall_ready_partitions",
    "Assigned input partitions whose state is restored and which are being processed.",
)
RESTORE_DURATION: Final = Histogram(
    "toolcall_restore_duration_seconds",
    "Time to restore one partition's state from its changelog partition.",
    buckets=_RESTORE_BUCKETS,
)
RESTORE_RECORDS: Final = Counter(
    "toolcall_restore_records",
    "Changelog records applied during restores.",
)
STATE_STORE_REBUILDS: Final = Counter(
    "toolcall_state_store_rebuilds",
    "Local state stores found damaged (a read or checksum error, an undecodable record, or "
    "records that do not match the store's tally) and rebuilt in full from the changelog.",
)
RESTORE_FAILURES: Final = Counter(
    "toolcall_restore_failures",
    "Partition preparations (fence, restore, seek) that failed or timed out and were retried.",
)
UNSTABLE_OFFSET_ANSWERS: Final = Counter(
    "toolcall_unstable_offset_answers",
    "OffsetFetch answers UNSTABLE_OFFSET_COMMIT (a transaction's offsets for the group still "
    "pending) while a worker's preparation or an executor's take reads its committed offsets "
    "as stable offsets (processor.kafka.stable_offsets); each is asked again.",
)

HANGING_TRANSACTIONS_ENDED: Final = Counter(
    "toolcall_hanging_transactions_ended",
    "Open transactions of a task's own producer id found on its output partitions after "
    "InitProducerId and ended (processor.kafka.hanging), by owner (worker, executor) and "
    "the marker written (abort; commit when the coordinator had committed it).",
    ["owner", "marker"],
)
HANGING_TRANSACTION_HELD: Final = Gauge(
    "toolcall_hanging_transaction_held",
    "1 while an output partition holds an open transaction of a task's own producer id that "
    "the task may not end (no ClusterAction, or no READ to describe it): the task waits. "
    "The error log line names the marker its coordinator's decision calls for. "
    'Topic "unknown": not describable.',
    ["owner", "topic", "partition"],
)

# -- publishing (adapters) -----------------------------------------------------------------

PUBLISHED_EVENTS: Final = Counter(
    "toolcall_published_events",
    "Fragment events published to the fragments topic by adapters.",
)
PRODUCER_RENEWALS: Final = Counter(
    "toolcall_producer_renewals",
    "Long-lived idempotent producers (publisher, control writer, MCP audit writer) closed after "
    "a fatal error and replaced by a new one, by role (adapter, ctl, mcp-audit) and the error's "
    "class name.",
    ["role", "reason"],
)
ADAPTER_UNKNOWN_EVENTS: Final = Counter(
    "toolcall_adapter_unknown_events",
    "Provider events of a type the adapter does not know, ignored (they named no call), by "
    "provider. Read from the adapter's own counter by the process that publishes its events.",
    ["provider"],
)

# -- executor client -----------------------------------------------------------------------

EXECUTOR_OUTCOMES: Final = Counter(
    "toolcall_executor_outcomes",
    "Dispatched calls by tool and outcome (succeeded, failed, refused, unknown) and reason code.",
    ["tool", "outcome", "reason"],
)
EXECUTOR_SKIPPED: Final = Counter(
    "toolcall_executor_skipped",
    "Dispatch records not run: duplicate (dispatch id already in the ledger), other_tool "
    "(another executor group's tool), undecodable.",
    ["why"],
)
EXECUTOR_CONTROL_RECORDS: Final = Counter(
    "toolcall_executor_control_records",
    "Control records the fence read, by what it did with them (applied, replayed, rejected, "
    "ignored, undecodable).",
    ["outcome"],
)
EXECUTOR_BARRIER_DURATION: Final = Histogram(
    "toolcall_executor_barrier_duration_seconds",
    "Time to read control up to the end offset before a call runs.",
    buckets=_BARRIER_BUCKETS,
)
EXECUTOR_HANDLER_DURATION: Final = Histogram(
    "toolcall_executor_handler_duration_seconds",
    "Handler run time by tool.",
    ["tool"],
    buckets=_LATENCY_BUCKETS,
)
MCP_DEFINITION_CHANGES: Final = Counter(
    "toolcall_mcp_definition_changes",
    "MCP tool definitions found differing from the registry's pins, by state: changed (calls "
    "fail tool_changed), new (not in the registry, never called), removed (calls fail "
    "tool_unavailable). Counted once per change, at start or on tools/list_changed.",
    ["state"],
)
EXECUTOR_TAKE_FAILURES: Final = Counter(
    "toolcall_executor_take_failures",
    "Dispatch partitions whose take (fence, ledger restore) failed on assignment and is retried.",
)
EXECUTOR_SECONDS_SINCE_PROGRESS: Final = Gauge(
    "toolcall_executor_seconds_since_progress",
    "Seconds since the executor's loop last made progress (a poll returned, a record was "
    "decided; 0 while a handler runs, under its own timeout). At "
    "PROCESSOR_EXECUTOR_STALL_TIMEOUT_SECONDS the executor exits 1 to be restarted.",
)
