"""MCP servers as executors and registries (the optional ``[mcp]`` extra).

- :mod:`processor.mcp.connection` — one session with one MCP server (stdio or Streamable
  HTTP), kept open and reopened, that lists tools and sends ``tools/call``;
- :mod:`processor.mcp.transport` — the byte-level transports under that session: answers
  bounded while read, the server's stderr and stray stdout counted and never logged, what
  provably never left;
- :mod:`processor.mcp.tools` — the executor's side: the handlers (one ``tools/call`` per
  dispatched call) and the pinned definitions;
- :mod:`processor.mcp.results` — what an answer means: the output, ``tool_error``, or
  ``unknown`` (unreadable, too large, not matching the pinned output schema);
- :mod:`processor.mcp.audit` — the audit record of a definition that departs from its pin;
- :mod:`processor.mcp.settings` — how to reach the server (``PROCESSOR_MCP_*``, headers);

Its commands, ``processor executor mcp`` and ``processor tools import-mcp``, are
:mod:`processor.cli.executor`'s and :mod:`processor.cli.tools`'.

The definition digests and the registry's ``mcp`` block are pure and live in
:mod:`processor.core.mcp_pins`. The ``mcp`` SDK is imported only inside these modules'
functions, so the base install and ``processor --help`` never need it.
"""
