"""The CLI's error boundary: every failure becomes one line on stderr and a documented exit code.

The exit codes and the expected failures behind them (:class:`~processor.exits.CliError` and its
subclasses, :func:`~processor.exits.classify`) are a library concern and live in
:mod:`processor.exits`; this module owns only what the command line does with them: run a
command, print one line, write the report of a bug, and return the code.

The line reads ``processor <command>: <cause> (<setting or file>): <next step>``. ``--debug``
or ``PROCESSOR_LOG_LEVEL=DEBUG`` also prints the traceback. Expected failures are raised as a
:class:`~processor.exits.CliError` (or one of the exceptions :func:`~processor.exits.classify`
knows) and never print a traceback.

Cheap to import: nothing here (nor in :mod:`processor.exits`) imports aiokafka or pydantic.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from processor.exits import ExitCode, Internal, classify


def debug_requested(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("PROCESSOR_LOG_LEVEL", "").upper() == "DEBUG"


def run(
    command: str,
    func: Callable[[], int],
    *,
    debug: bool,
    servers: Callable[[], str | None] = lambda: None,
) -> int:
    """Run ``func``; turn every exception into one line on stderr and its exit code."""
    try:
        return func()
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except SystemExit:
        raise
    except BaseException as exc:
        if debug:
            import traceback  # noqa: PLC0415  (only on failure: keeps start-up short)

            traceback.print_exc(file=sys.stderr)
        error = classify(exc, servers() or "the configured address")
        if error is None:
            report = _write_report(command, exc)
            error = Internal(
                f"internal error: {type(exc).__name__}: {_first_line(exc)}",
                where=f"full report in {report}" if report else None,
                hint="please report it (run again with --debug to see the traceback)",
            )
        from processor.observability.terminal import printable  # noqa: PLC0415

        print(f"{command}: {printable(error.line())}", file=sys.stderr)
        return error.code


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _write_report(command: str, exc: BaseException) -> str | None:
    import tempfile  # noqa: PLC0415
    import traceback  # noqa: PLC0415

    try:
        fd, path = tempfile.mkstemp(prefix="processor-error-", suffix=".txt")
        with os.fdopen(fd, "w") as report:
            report.write(f"{command}\n")
            traceback.print_exception(exc, file=report)
    except OSError:
        return None
    return path
