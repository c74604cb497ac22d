"""The exit-code taxonomy: expected failures, the code each exits with, and which is which.

A library concern: the worker and the reachability watch (:mod:`processor.runtime`) raise these
errors, and the CLI's error boundary (:mod:`processor.cli.errors`) prints them as one line and
exits with their code. Owns :class:`ExitCode`, :class:`CliError` and its subclasses,
:func:`broker_unreachable`, :func:`classify` (an exception → its expected failure, or None for a
bug) and the record of the Kafka client's error lines :func:`classify` reads. Prints nothing,
parses no arguments (that is :mod:`processor.cli`).

Exit codes (sysexits style, also in docs/operations.md, "When something goes wrong")::

    0    success
    1    the command ran and reports a failure (a bad chunk in ``adapt``, schemas drifted, a
         worker's fatal processing error)
    2    usage: bad flags or arguments
    66   no input: a file is missing or cannot be read (or written)
    69   unavailable: the Kafka broker cannot be reached (a worker or executor waits
         ``PROCESSOR_STARTUP_TIMEOUT_SECONDS`` first)
    70   internal error: a bug; one line, plus the file holding the full report
    77   not authorised: the broker refused the credentials or an ACL
    78   configuration: an invalid setting, tool registry, keyring, missing topics, a port in use
    130  interrupted (Ctrl-C)

Cheap to import (the CLI's start-up imports it): nothing here imports aiokafka or pydantic
(an import-linter contract says so); exceptions are recognised by class name and module where
importing their package would cost start-up time.
"""

from __future__ import annotations

import errno
from enum import IntEnum
from typing import Final


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    NO_INPUT = 66
    UNAVAILABLE = 69
    SOFTWARE = 70
    NO_PERMISSION = 77
    CONFIG = 78
    INTERRUPTED = 130


class CliError(Exception):
    """An expected failure: a cause, the setting or file involved, and the next step."""

    code: ExitCode = ExitCode.FAILURE

    def __init__(self, cause: str, *, where: str | None = None, hint: str | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.where = where
        self.hint = hint

    def line(self) -> str:
        text = self.cause
        if self.where:
            text += f" ({self.where})"
        if self.hint:
            text += f": {self.hint}"
        return text


class UsageError(CliError):
    code = ExitCode.USAGE


class NoInput(CliError):
    code = ExitCode.NO_INPUT


class Unavailable(CliError):
    code = ExitCode.UNAVAILABLE


class NotAuthorised(CliError):
    code = ExitCode.NO_PERMISSION


class ConfigInvalid(CliError):
    code = ExitCode.CONFIG


class Internal(CliError):
    code = ExitCode.SOFTWARE


KAFKA_HINT: Final = "is a broker running? `make kafka-start` starts one"
BOOTSTRAP_SETTING: Final = "PROCESSOR_BOOTSTRAP_SERVERS"


def broker_unreachable(servers: str) -> Unavailable:
    return Unavailable(f"cannot reach Kafka at {servers}", where=BOOTSTRAP_SETTING, hint=KAFKA_HINT)


_client_errors: list[str] = []  # aiokafka's last error lines (it logs causes it does not raise)
_AUTH_FAILED: Final = ("SaslAuthenticationFailed", "Authentication failed")


def record_client_errors(logger_name: str = "aiokafka") -> None:
    """Remember the Kafka client's error log lines instead of printing them: aiokafka reports a
    refused login only in its log, then raises a bare "Unable to bootstrap"."""
    import logging  # noqa: PLC0415

    class _Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            _client_errors[:] = [*_client_errors[-9:], record.getMessage()]

    client_log = logging.getLogger(logger_name)
    if not any(type(h).__name__ == "_Recorder" for h in client_log.handlers):
        client_log.addHandler(_Recorder(logging.ERROR))


def _login_refused(exc: BaseException) -> bool:
    lines = [*_client_errors, *(str(n) for n in getattr(exc, "__notes__", ()))]
    return any(marker in line for line in lines for marker in _AUTH_FAILED)


def _kafka_error(exc: BaseException, servers: str) -> CliError | None:
    """aiokafka's errors, recognised without importing aiokafka."""
    if not type(exc).__module__.startswith("aiokafka"):
        return None
    name = type(exc).__name__
    if name == "KafkaConnectionError" and _login_refused(exc):
        return NotAuthorised(
            f"Kafka at {servers} rejected the credentials",
            where="PROCESSOR_SASL_USERNAME, PROCESSOR_SASL_PASSWORD",
            hint="check the user, password and mechanism",
        )
    if name in ("KafkaConnectionError", "NodeNotReadyError", "RequestTimedOutError"):
        return broker_unreachable(servers)
    if name == "KafkaTimeoutError":
        return Unavailable(
            f"Kafka at {servers} did not answer in time", where=BOOTSTRAP_SETTING, hint=KAFKA_HINT
        )
    if "Authentication" in name or "Sasl" in name:
        return NotAuthorised(
            f"Kafka at {servers} rejected the credentials",
            where="PROCESSOR_SASL_USERNAME, PROCESSOR_SASL_PASSWORD",
            hint="check the user, password and mechanism",
        )
    if "AuthorizationFailed" in name:
        return NotAuthorised(
            f"Kafka at {servers} refused an operation: {name}",
            where="the principal's ACLs",
            hint="grant them (`processor topics create --acls-for ROLE=PRINCIPAL` prints them)",
        )
    if name == "UnknownTopicOrPartitionError":
        return ConfigInvalid(
            "a topic does not exist",
            where="PROCESSOR_TOPIC_PREFIX",
            hint="create the topics with `processor topics create`",
        )
    return None


_BY_CODE: Final[dict[int, type[CliError]]] = {
    ExitCode.USAGE: UsageError,
    ExitCode.NO_INPUT: NoInput,
    ExitCode.UNAVAILABLE: Unavailable,
    ExitCode.NO_PERMISSION: NotAuthorised,
    ExitCode.CONFIG: ConfigInvalid,
}

_UNREADABLE: Final = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
_PATH_HINT: Final = "check the path and its permissions"


def classify(exc: BaseException, servers: str = "the configured address") -> CliError | None:
    """The one-line error of an expected failure, or None for a bug."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return classify(exc.exceptions[0], servers)
    kafka = _kafka_error(exc, servers)
    if kafka is not None:
        return kafka
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        address = _bind_address(str(exc))
        return ConfigInvalid(
            f"the metrics port is already in use{f' ({address})' if address else ''}",
            where="PROCESSOR_METRICS_PORT / --metrics-port",
            hint="choose another port or stop the process holding it",
        )
    if isinstance(exc, _UNREADABLE):
        what = exc.filename or "a file"
        return NoInput(f"cannot read {what}: {exc.strerror or exc}", hint=_PATH_HINT)
    if isinstance(exc, OSError) and exc.filename:
        return NoInput(f"cannot use {exc.filename}: {exc.strerror or exc}", hint=_PATH_HINT)
    module = type(exc).__module__
    ours = {c.__name__ for c in type(exc).__mro__ if c.__module__.startswith("processor.")}
    if ours and isinstance(exc.__context__, _UNREADABLE):  # a file it names cannot be read
        where = "--tools / PROCESSOR_TOOLS_FILE" if "RegistryError" in ours else None
        return NoInput(str(exc), where=where, hint=_PATH_HINT)
    if ours & {"TopicLayoutError", "AclError"}:
        return ConfigInvalid(str(exc), hint="see `processor topics describe`")
    if "RegistryError" in ours:
        return ConfigInvalid(str(exc), where="--tools / PROCESSOR_TOOLS_FILE")
    if "AdapterError" in ours:
        return UsageError(str(exc))
    if "ProcessorError" in ours:  # its exit code is the error tree's (processor.core.errors)
        code = getattr(exc, "exit_code", ExitCode.CONFIG)
        if code is None:  # a failure no command expects to end on: internal, with a report
            return None
        return _BY_CODE.get(code, ConfigInvalid)(str(exc))
    if module == "yaml" or module.startswith("yaml."):
        return ConfigInvalid(f"not valid YAML: {str(exc).splitlines()[0]}")
    return None


def _bind_address(text: str) -> str:
    """``host:port`` from asyncio's "error while attempting to bind on address ('h', p)"."""
    start, end = text.find("("), text.find(")")
    if start < 0 or end < start:
        return ""
    host, _, port = text[start + 1 : end].partition(",")
    return f"{host.strip(chr(39))}:{port.strip()}" if port else ""
