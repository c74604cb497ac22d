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
    ├── InvalidTransition       a (state, trigger) pair absent from the transition table (a bug)
    ├── RegistryError           a tool file that cannot be loaded (names file, tool and reason)
    │   └── OfferError          a tool that cannot be offered in a provider's shape as declared
    ├── ConfigurationError      settings or topology that cannot run (e.g. co-partitioning)
    └── AdapterError            a provider chunk the adapter cannot read (→ inert response.ended)

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

    def __init__(self, reason: str | None = None, detail: str = "") -> None:
        if reason is not None:
            self.reason = reason
        self.detail = detail
        super().__init__(f"{self.reason}: {detail}" if detail else self.reason)


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
