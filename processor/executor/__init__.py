"""The executor client: what executors embed to run dispatched calls safely.

- :mod:`processor.executor.client` — :class:`ExecutorClient`: consumes ``dispatch`` in a consumer
  group, fences every call against ``control`` just before it runs, runs it at most once per
  executor group, and reports results;
- :mod:`processor.executor.handlers` — :class:`Handlers`, :class:`Call`, :class:`ExecutionFailed`,
  :class:`OutcomeUnknown`;
- :mod:`processor.executor.fence` — the pure execution-time fence;
- :mod:`processor.executor.barrier` — reading ``control`` up to "now" (and Kafka's murmur2);
- :mod:`processor.executor.ledger` — the durable at-most-once ledger (claim before run);
- :mod:`processor.executor.records` — :class:`ExecutionResult` and the ledger entries;

The commands (``processor executor run|mcp``, ``python -m processor.executor``) are
:mod:`processor.cli.executor`'s: this package parses no arguments and prints nothing.
"""
