"""One test deployment on the secured broker (tests/secured_broker.py), for the tests that need
users and ACLs: a topic prefix, its groups, one user per role with its settings and environment,
the ``processor`` commands run in-process with that environment, the ``deployment`` fixture
(topics created and ACLs applied by ``processor topics create --apply-acls``), and the broker's
KIP-890 partition verification switched for a test that needs it off."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from processor.cli import topics as runtime_cli
from processor.kafka.acls import Role, acl_bindings
from processor.kafka.clients import admin_client
from processor.settings import Settings
from tests.secured_broker import SecuredBroker, secured_broker  # noqa: F401  (fixture)

PARTITIONS = 2
ROLES = ("adapter", "worker", "executor", "operator", "auditor")


class Deployment:
    """One test deployment on the secured broker: a topic prefix, groups, one user per role."""

    def __init__(self, broker: SecuredBroker, prefix: str, tmp_path: Path) -> None:
        self.broker = broker
        self.prefix = prefix
        self.tmp_path = tmp_path
        self.executor_group = f"{prefix}exec"
        self.common = {
            "topic_prefix": prefix,
            "partitions": PARTITIONS,
            "group_id": f"{prefix}assemblers",
            "application_id": f"{prefix}assembler",
        }

    def settings(self, user: str) -> Settings:
        return self.broker.settings(user, **self.common)

    def env(self, user: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
        env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
        env.update(self.broker.env(user))
        env.update({f"PROCESSOR_{k.upper()}": str(v) for k, v in self.common.items()})
        return env


async def run_cli(module: Any, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """``processor <argv>`` in-process, with ``env`` as the process environment."""
    parser = argparse.ArgumentParser(prog="processor")
    module.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)

    def run() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = args.func(args)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return code, out.getvalue(), err.getvalue()

    return await asyncio.to_thread(run)


@pytest.fixture
async def deployment(
    secured_broker: SecuredBroker,  # noqa: F811
    topic_prefix: str,
    tmp_path: Path,
) -> AsyncIterator[Deployment]:
    dep = Deployment(secured_broker, topic_prefix, tmp_path)
    acls_for = [arg for role in ROLES for arg in ("--acls-for", f"{role}=User:{role}")]
    code, out, err = await run_cli(
        runtime_cli,
        ["topics", "create", "--executor-group", dep.executor_group, *acls_for, "--apply-acls"],
        dep.env("admin"),
    )
    assert code == 0, out + err
    principals = {Role(r): f"User:{r}" for r in ROLES}
    expected = len(
        acl_bindings(dep.settings("admin"), principals, executor_group=dep.executor_group)
    )
    assert f"created {expected} ACLs for User:adapter, User:auditor, User:executor" in out
    yield dep


async def partition_verification(admin: Settings, *, enabled: bool) -> None:
    """KIP-890's partition verification, off while the test leaves a transaction open on a
    partition its coordinator does not know of (on by default; this broker is the tests' own)."""
    value = "true" if enabled else "false"
    async with admin_client(admin) as client:
        resource = ConfigResource(
            ConfigResourceType.BROKER, "1", {"transaction.partition.verification.enable": value}
        )
        for response in await client.alter_configs([resource]):
            assert all(code == 0 for code, *_ in response.resources), response
