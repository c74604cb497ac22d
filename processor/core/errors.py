"""The one error tree of toolcall-processor.

::

    ProcessorError
    ├── RecordRejected          an input record that cannot be used (→ a dead letter with a reason)
    ├── AssemblyError           a call that cannot be completed (→ the call fails, inert)
    │   ├── MalformedJson       its bytes can never become the JSON the contract allows
    │   ├── UnknownTool         no declaration and no explicit alias for the name
    │   ├── SchemaInvalid       arguments break the tool's JSON Schema
    │   ├── BusinessInvalid     a named business validator refused the arguments
    │   ├── LimitExceeded       bytes, deltas, depth or reordering window over a limit
    │   └── ProtocolViolation   the stream broke its own protocol
    │       ├── SequenceGap         the terminal came with positions missing
    │       ├── DuplicateConflict   one position arrived twice with different text
    │       └── ArgumentsMismatch   the provider's final arguments differ from the deltas
    ├── InvalidTransition       a (state, trigger) pair absent from a transition table (a bug)
    ├── RegistryError           a tool file that cannot be loaded (names file, tool and reason)
    │   ├── OfferError          a tool that cannot be offered in a provider's shape as declared
    │   ├── PatternError        a schema pattern RE2 cannot run in linear time (core.toolschema)
    │   └── SelfContaining      a value that contains itself: a YAML alias loop (core.registry)
    ├── ConfigurationError      settings or topology that cannot run                      [78]
    │   ├── CopartitioningError     a member given partition p of one input only (runtime)
    │   ├── TopicLayoutError        topics missing or not co-partitioned (runtime.topics)
    │   └── AclError                a principal mapping or an ACL the broker refused (runtime)
    ├── AdapterError            a provider chunk the adapter cannot read (→ inert response.ended)
    │   └── PartialArgsError        Vertex's streamed partialArgs that cannot be followed
    ├── KafkaStepError          a Kafka step that did not complete: retried, or the partition
    │   │                       handed over (runtime; never an exit on its own)          [70]
    │   ├── TransactionFailed       a batch's transaction did not commit, or is in doubt
    │   ├── Fenced                  an executor's partition producer fenced: another owns it
    │   │   └── EndsUnrecorded          a claimed call's end unwritten for rounds: retaken
    │   ├── TransactionHeld         a task's own open transactions it may not end
    │   ├── HangingError            a DescribeProducers/WriteTxnMarkers request failed
    │   ├── StableOffsetsError      committed offsets not read as stable (KIP-447) in time
    │   └── BarrierTimeout          control or the ledger not read to its end in time
    ├── StateStoreError         a partition's local state that cannot be used as it is   [70]
    │   ├── StoreCorrupt            unreadable or damaged: destroyed and rebuilt
    │   ├── StoreLocked             held by another process: retried
    │   └── RestoreGap              a tail restore that cannot start there: restored in full
    ├── ExecutionError          what an executor's handler or loop reports               [70]
    └── McpError                talking to an MCP server (processor.mcp)                 [70]
        ├── NotSent                 no live session: the request was never written
        ├── ServerRefused           a JSON-RPC error that means the call did not run
        ├── AnswerLost              it may have reached the server; its answer is lost
        └── MessageTooLarge         a message over the bound while being read

The members under ``ExecutionError`` live in :mod:`processor.executor` (they are drawn in
:mod:`processor.executor.handlers`' docstring). Members outside this module are raised with
their message first (``StoreCorrupt("why")``, :class:`Described`): their ``reason`` is their
class's, and they read as their message. ``[n]``: the exit code a command exits with when
such an error ends it (``exit_code``; :func:`processor.exits.classify` reads it); 70 is "an
internal error, with a report", as for any failure nobody expected to reach a command; every
other error of the tree is 78 (configuration) unless the command says otherwise.

Every error carries a machine ``reason`` (a stable snake_case code, used in ledger and metrics)
and a human ``detail`` that never contains argument values.
"""

from __future__ import annotations

PROCESS_EXCEPTIONS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit, GeneratorExit)
"""What belongs to the process, never to a record. Where a record's handling is caught (a
validator, the core under the worker), everything else is caught, ``BaseException`` included:
a Rust extension's panic surfaces as pyo3's ``PanicException``, which derives from
``BaseException`` (rpds, under jsonschema's references, panics when the recursion limit
strikes inside one of its key comparisons)."""


class ProcessorError(Exception):
    """Base of every error this package raises on purpose."""

    reason: str = "error"
    exit_code: int | None = 78
    """The exit code of a command this error ends (None: an internal error, 70, with a report)."""

    def __init__(self, reason: str | None = None, detail: str = "") -> None:
        if reason is not None:
            self.reason = reason
        self.detail = detail
        super().__init__(f"{self.reason}: {detail}" if detail else self.reason)


class Described(ProcessorError):
    """A member raised with its message first, as a plain exception is
    (``StoreCorrupt("unreadable")``): its ``reason`` is its class's, and ``str()`` is the
    message alone (what logs and command lines showed before it joined the tree)."""

    def __init__(self, detail: object = "", *args: object) -> None:
        super().__init__(None, str(detail))
        self.args = (detail, *args)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RecordRejected(ProcessorError):
    reason = "invalid_record"


class AssemblyError(ProcessorError):
    reason = "assembly_error"


class MalformedJson(AssemblyError):
    reason = "malformed_json"


class UnknownTool(AssemblyError):
    reason = "unknown_tool"


class SchemaInvalid(AssemblyError):
    reason = "schema_invalid"


class BusinessInvalid(AssemblyError):
    reason = "business_invalid"


class LimitExceeded(AssemblyError):
    reason = "size_limit"


class ProtocolViolation(AssemblyError):
    reason = "protocol_violation"


class SequenceGap(ProtocolViolation):
    reason = "sequence_gap"


class DuplicateConflict(ProtocolViolation):
    reason = "duplicate_conflict"


class ArgumentsMismatch(ProtocolViolation):
    reason = "arguments_mismatch"


class InvalidTransition(ProcessorError):
    reason = "invalid_transition"


class RegistryError(ProcessorError):
    reason = "registry_error"


class OfferError(RegistryError):
    """A registry entry that cannot be offered to a provider's model without changing what it
    declares (``processor.adapters.offer``): a schema keyword the provider's schema dialect
    lacks, a name it refuses, strict mode asked of a schema that does not allow it."""

    reason = "not_offerable"


class ConfigurationError(ProcessorError):
    reason = "configuration_error"


class AdapterError(ProcessorError):
    reason = "adapter_error"


class KafkaStepError(Described):
    """A Kafka step that did not complete (a transaction, a fence, a marker request): the
    runtime retries it or hands the partition over; no command ends on one as expected."""

    reason = "kafka_step_failed"
    exit_code = None


class StateStoreError(Described):
    """A partition's local state store that cannot be used as it is: rebuilt or retried."""

    reason = "state_store"
    exit_code = None


class ExecutionError(Described):
    """What an executor's handler or its loop reports (:mod:`processor.executor.handlers`)."""

    reason = "execution"
    exit_code = None


class McpError(Described):
    """A request to an MCP server that did not go as asked (:mod:`processor.mcp`)."""

    reason = "mcp"
    exit_code = None
