"""How to reach an MCP server, from the environment (``PROCESSOR_MCP_*``) and the flags.

- ``PROCESSOR_MCP_SERVER_COMMAND``: a command line started as a stdio server;
- ``PROCESSOR_MCP_SERVER_URL``: a Streamable HTTP endpoint (``https://…/mcp``);
- ``PROCESSOR_MCP_SERVER_NAME``: the server's name in the registry (default: the name the
  server reports in ``initialize``);
- ``PROCESSOR_MCP_HEADERS``: HTTP headers, a JSON object (``{"Authorization": "Bearer …"}``):
  secrets, so from the environment only, never logged;
- ``PROCESSOR_MCP_CALL_TIMEOUT_SECONDS``: one ``tools/call``'s deadline (60);
- ``PROCESSOR_MCP_MAX_RESULT_BYTES``: the largest result recorded (65,536, and at most that).

``--header NAME=ENV_VAR`` adds a header whose value is read from ``ENV_VAR`` (so a secret is
never on a command line). The flags ``--server-command``, ``--server-url`` and
``--server-name`` override the environment.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from processor.core.errors import ConfigurationError
from processor.executor.records import MAX_OUTPUT_BYTES

__all__ = ["McpSettings", "headers_from_flags"]


class McpSettings(BaseSettings):
    """See the module docstring."""

    model_config = SettingsConfigDict(env_prefix="PROCESSOR_MCP_", extra="ignore")

    server_command: str | None = None
    server_url: str | None = None
    server_name: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    call_timeout_seconds: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    max_result_bytes: int = Field(default=MAX_OUTPUT_BYTES, gt=0, le=MAX_OUTPUT_BYTES)

    def header_values(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        values = {name: secret.get_secret_value() for name, secret in self.headers.items()}
        values.update(extra or {})
        return values


def headers_from_flags(specs: list[str] | None, environ: Any = None) -> dict[str, str]:
    """``NAME=ENV_VAR`` flags as headers whose values come from the environment."""
    environ = os.environ if environ is None else environ
    headers: dict[str, str] = {}
    for spec in specs or ():
        name, sep, variable = spec.partition("=")
        if not sep or not name.strip() or not variable.strip():
            raise ConfigurationError(
                "invalid_header", f"--header {spec!r}: expected NAME=ENV_VAR (the value's variable)"
            )
        value = environ.get(variable.strip())
        if value is None:
            raise ConfigurationError(
                "invalid_header", f"--header {name.strip()}: ${variable.strip()} is not set"
            )
        headers[name.strip()] = value
    return headers
