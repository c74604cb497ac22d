"""The ``processor`` command: the one package that parses arguments and prints.

- :mod:`processor.cli.parser` — the top-level parser (imports a command's module only when it runs)
  and ``processor --version``;
- :mod:`processor.cli.errors` — the error boundary: one line on stderr, a documented exit code
  (the codes and the expected failures themselves are :mod:`processor.exits`, a library module);
- :mod:`processor.cli.flags` — the Kafka connection flags and the settings built from them;
- one module per command group: :mod:`~processor.cli.worker`, :mod:`~processor.cli.executor`
  (``executor run`` and ``executor mcp``), :mod:`~processor.cli.adapt`,
  :mod:`~processor.cli.offline` (``replay``, ``states``), :mod:`~processor.cli.schema_export`,
  :mod:`~processor.cli.topics`, :mod:`~processor.cli.tail` (``tail``, ``audit``),
  :mod:`~processor.cli.ctl`, :mod:`~processor.cli.tools` (``tools import-mcp``),
  :mod:`~processor.cli.doctor`;
- the limits the commands set up: :mod:`~processor.cli.recursion` (the interpreter's recursion
  limit); a tool registry file is read by the library's :mod:`processor.registry_file`.

The libraries (``runtime``, ``executor``, ``ops``, ``mcp``, ``core``) import no argparse and print
nothing (an import-linter contract and ``tests/unit/test_layout.py`` check it). Importing this
package is cheap: :func:`main` imports the parser when it is called.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``processor`` command (the ``[project.scripts]`` entry point); its exit code."""
    from processor.cli.parser import main as run  # noqa: PLC0415  (the parser, on demand)

    return run(argv)
