"""Pytest fixture: a real Kafka broker that authenticates and authorises (``secured_broker``).

Started from the project's own files with ``scripts/kafka-local start --secured`` (state in
``<repo>/.kafka-secured``: a throwaway CA, a broker certificate and one random SCRAM-SHA-512
password per user: admin, worker, executor, adapter, operator, auditor). The client listener is
SASL_SSL on loopback; ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false`` and
only ``admin`` as super user, so every other principal can do exactly what its ACLs grant.

:meth:`SecuredBroker.settings` gives a principal's :class:`~processor.settings.Settings`;
:meth:`SecuredBroker.env` the same as ``PROCESSOR_*`` variables for a subprocess (the password
from the environment, as a deployment passes it).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from processor.settings import Settings
from tests.kafka_broker import KAFKA_LOCAL, KAFKA_LOCAL_START_TIMEOUT_S, REPO_ROOT

STATE_DIR = REPO_ROOT / ".kafka-secured"
_PLAINTEXT_OVERRIDES = frozenset(
    {"KAFKA_LOCAL_DIR", "KAFKA_LOCAL_PORT", "KAFKA_LOCAL_CONTROLLER_PORT", "KAFKA_LOCAL_PROFILE"}
)


@dataclass(frozen=True)
class SecuredBroker:
    bootstrap: str
    secrets: Path

    @property
    def cafile(self) -> Path:
        return self.secrets / "ca.pem"

    def password(self, user: str) -> str:
        return (self.secrets / f"{user}.password").read_text().strip()

    def env(self, user: str) -> dict[str, str]:
        """``PROCESSOR_*`` connection variables of ``user`` (SCRAM-SHA-512 over TLS)."""
        return {
            "PROCESSOR_BOOTSTRAP_SERVERS": self.bootstrap,
            "PROCESSOR_SECURITY_PROTOCOL": "SASL_SSL",
            "PROCESSOR_SASL_MECHANISM": "SCRAM-SHA-512",
            "PROCESSOR_SASL_USERNAME": user,
            "PROCESSOR_SASL_PASSWORD": self.password(user),
            "PROCESSOR_SSL_CAFILE": str(self.cafile),
        }

    def settings(self, user: str, **extra: Any) -> Settings:
        fields = {k.removeprefix("PROCESSOR_").lower(): v for k, v in self.env(user).items()}
        return Settings(**{**fields, **extra})


def start_secured_broker() -> SecuredBroker:
    res = subprocess.run(
        ["bash", str(KAFKA_LOCAL), "start", "--secured"],
        capture_output=True,
        text=True,
        timeout=KAFKA_LOCAL_START_TIMEOUT_S,
        check=False,
        cwd=REPO_ROOT,
        # the plaintext broker's overrides (state dir, ports) must not leak into this one
        env={k: v for k, v in os.environ.items() if k not in _PLAINTEXT_OVERRIDES},
    )
    lines = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    if res.returncode != 0 or not lines:
        raise RuntimeError(
            f"scripts/kafka-local start --secured failed (exit {res.returncode}).\n"
            f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"
        )
    return SecuredBroker(bootstrap=lines[-1], secrets=STATE_DIR / "secrets")


@pytest.fixture(scope="session")
def secured_broker() -> Iterator[SecuredBroker]:
    """The secured broker (left running, like the plaintext one; ``kafka-local stop --secured``)."""
    yield start_secured_broker()
