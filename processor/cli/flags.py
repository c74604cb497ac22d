"""The Kafka connection flags every Kafka-facing command shares, and settings built from them.

Cheap to import (argparse only): :mod:`processor.settings` (pydantic-settings) is imported when a
command builds its settings, not when the parser is built, so ``processor --help`` and the
offline commands stay fast. An invalid setting becomes a one-line
:class:`~processor.exits.ConfigInvalid` naming the setting and its environment variable.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any, Final

from processor.cli.errors import debug_requested
from processor.exits import ConfigInvalid, record_client_errors

if TYPE_CHECKING:
    from pydantic import ValidationError

    from processor.settings import Settings

# flag dest → settings field
COMMON_FLAGS: Final = {
    "bootstrap_servers": "bootstrap_servers",
    "topic_prefix": "topic_prefix",
    "security_protocol": "security_protocol",
    "sasl_mechanism": "sasl_mechanism",
    "sasl_username": "sasl_username",
    "ssl_cafile": "ssl_cafile",
    "ssl_certfile": "ssl_certfile",
    "ssl_keyfile": "ssl_keyfile",
    "log_level": "log_level",
}
KEYRING_HELP: Final = (
    "operator public keys: a keyring file (YAML or JSON) or a folder of *.keyring.yaml files; "
    "repeat to merge several"
)

_current: list[Settings] = []  # the settings the running command built last (for its errors)


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """The Kafka connection and topic flags (secrets come from the environment only)."""
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers")
    parser.add_argument("--topic-prefix", help="topic name prefix (default toolcalls.)")
    parser.add_argument(
        "--security-protocol", choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
    )
    parser.add_argument(
        "--sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    )
    parser.add_argument("--sasl-username", help="SASL user (password: PROCESSOR_SASL_PASSWORD)")
    parser.add_argument("--ssl-cafile", help="CA bundle")
    parser.add_argument("--ssl-certfile", help="client certificate")
    parser.add_argument("--ssl-keyfile", help="client key (password: PROCESSOR_SSL_KEY_PASSWORD)")


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """Connection and topic flags shared by every Kafka-facing command (``settings_from_args``)."""
    add_connection_flags(parser)
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")


def settings_from_args(args: argparse.Namespace, **extra: Any) -> Settings:
    """Settings from the environment, overridden by every common flag that was given and by
    ``extra`` (a command's own flags, as settings fields; ``None`` values are ignored).

    Raises :class:`~processor.exits.ConfigInvalid` when a value is invalid."""
    from pydantic import ValidationError  # noqa: PLC0415  (kept off the parser's import path)

    from processor.settings import Settings  # noqa: PLC0415

    overrides: dict[str, Any] = {}
    for dest, name in COMMON_FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            overrides[name] = value
    overrides.update({k: v for k, v in extra.items() if v is not None})
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc) from None
    _current[:] = [settings]
    _quiet_kafka_client_logs()
    return settings


def _quiet_kafka_client_logs() -> None:
    """aiokafka's own error lines go to the process's logs when it configured logging (worker,
    executor), never bare to a one-shot command's stderr, where the error boundary says it in
    one line (``--debug`` shows them). They are recorded for that line (a refused login)."""
    client_log = logging.getLogger("aiokafka")
    record_client_errors()
    if not debug_requested(sys.argv[1:]) and not any(
        isinstance(h, logging.NullHandler) for h in client_log.handlers
    ):
        client_log.addHandler(logging.NullHandler())


def load_settings(args: argparse.Namespace, command: str = "processor", **extra: Any) -> Settings:
    """:func:`settings_from_args` (``command`` is kept for callers; the boundary names it)."""
    return settings_from_args(args, **extra)


def current_settings() -> Settings | None:
    """The settings the running command built, if any (to name the address in its errors)."""
    return _current[0] if _current else None


def settings_error(exc: ValidationError, *, prefix: str = "PROCESSOR_") -> ConfigInvalid:
    """One line naming every invalid setting and its environment variable (never the value);
    ``prefix``: the settings class's environment prefix."""
    problems: list[str] = []
    names: list[str] = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        message = str(error["msg"]).removeprefix("Value error, ")
        if loc:
            field = ".".join(loc)
            names.append(f"{prefix}{'__'.join(loc).upper()}")
            problems.append(f"{field}: {message}")
        else:
            problems.append(message)
    where = ", ".join(names) if names else "PROCESSOR_* settings"
    return ConfigInvalid(
        "invalid settings: " + "; ".join(problems),
        where=where,
        hint="fix the environment variable or flag (see `processor <command> --help`)",
    )
