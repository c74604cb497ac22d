"""Operator keys in practice, on a real broker: rotation with an overlap, then revocation.

The workers trust a keyring folder (``PROCESSOR_KEYRING_FILE=<folder>``: every
``*.keyring.yaml`` in it, one per key as ``processor ctl keygen`` writes them) and read it at
start-up, so a keyring change reaches a deployment by a rolling restart. The sequence:

1. key ``ops-old`` alone: its commands apply;
2. rotation: ``ops-new`` is added, workers restart; during the overlap both keys' commands apply;
3. revocation: ``ops-old.keyring.yaml`` is removed, workers restart; a command signed by the old
   key (even one not yet expired) is rejected ``unknown_key`` and audited, the new key's applies,
   and what the old key did before its revocation stays done (restored state).

``ctl keygen`` also refuses to overwrite a key, leaving the existing private key (mode 0600) as it
was.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.integration.conftest import Runtime
from tests.integration.operator_harness import cli, wait_audit

pytestmark = pytest.mark.integration


async def keygen(rt: Runtime, folder: Path, key_id: str) -> tuple[int, str]:
    return await cli(
        rt, "ctl", "keygen", "--key-id", key_id, "--operator", "oncall", "--tenants", "acme",
        "--out", str(folder),
    )  # fmt: skip


async def command(rt: Runtime, folder: Path, key_id: str, verb: str, command_id: str) -> None:
    code, out = await cli(
        rt, "ctl", verb, "--tool", "get_weather", "--tenant", "acme", "--reason", "rotation drill",
        "--command-id", command_id, "--key", str(folder / f"{key_id}.pem"), "--key-id", key_id,
        "--operator", "oncall",
    )  # fmt: skip
    assert code == 0, out


@pytest.mark.partitions(1)
async def test_key_rotation_overlap_then_revocation(runtime: Runtime, tmp_path: Path) -> None:
    rt = runtime
    ops = tmp_path / "ops"
    code, out = await keygen(rt, ops, "ops-old")
    assert code == 0, out
    env = {"PROCESSOR_KEYRING_FILE": str(ops)}

    # 1. the old key alone
    worker = rt.start_worker("w1", **env)
    await worker.wait_ready()
    await command(rt, ops, "ops-old", "disable-tool", "old-1")
    await wait_audit(rt, "old-1", "applied")

    # 2. rotation: the new key is added; after a restart both are valid
    code, out = await keygen(rt, ops, "ops-new")
    assert code == 0, out
    worker.terminate()
    assert await worker.wait_exit(30) == 0
    worker = rt.start_worker("w2", **env)
    await worker.wait_ready()
    await command(rt, ops, "ops-old", "enable-tool", "old-2")
    await wait_audit(rt, "old-2", "applied")
    await command(rt, ops, "ops-new", "disable-tool", "new-1")
    await wait_audit(rt, "new-1", "applied")

    # 3. revocation: the old key's entry leaves the keyring; after a restart it is refused
    (ops / "ops-old.keyring.yaml").unlink()
    worker.terminate()
    assert await worker.wait_exit(30) == 0
    worker = rt.start_worker("w3", **env)
    await worker.wait_ready()
    await command(rt, ops, "ops-old", "enable-tool", "old-3")
    rejected = await wait_audit(rt, "old-3", "rejected")
    assert rejected["rejection"] == "unknown_key"
    await command(rt, ops, "ops-new", "enable-tool", "new-2")
    await wait_audit(rt, "new-2", "applied")
    # what the old key did while it was valid stays done: old-1 is still applied, once
    assert (await wait_audit(rt, "old-1", "applied"))["copies"] == 1

    # keygen never overwrites a private key, and the existing one stays 0600 and unchanged
    pem = ops / "ops-new.pem"
    before = pem.read_bytes()
    code, _ = await keygen(rt, ops, "ops-new")
    assert code != 0
    assert pem.read_bytes() == before
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    worker.terminate()
    assert await worker.wait_exit(30) == 0
