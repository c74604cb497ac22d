"""Without a keyring a real worker refuses operator commands; only the development flag applies
them, and ``/metrics`` says which (issue 30 item 1).

The harness's workers run with ``PROCESSOR_ALLOW_UNSIGNED_COMMANDS=true`` (its commands are
unsigned); here one runs without it, as a worker started with no keyring and no flag does.
"""

from __future__ import annotations

import re

import pytest

from tests.integration.conftest import (
    Runtime,
    call_events,
    tenant_stopped,
    turn_started,
    wait_until,
)

pytestmark = pytest.mark.integration
_GAUGE = re.compile(r"^toolcall_unsigned_commands_allowed (\S+)$", re.MULTILINE)


@pytest.mark.partitions(1)
async def test_no_keyring_refuses_and_audits_and_the_flag_shows_on_metrics(
    runtime: Runtime,
) -> None:
    safe = runtime.start_worker("safe", PROCESSOR_ALLOW_UNSIGNED_COMMANDS="false")
    await safe.wait_ready()
    assert _GAUGE.findall(await safe.metrics()) == ["0.0"]
    stop = tenant_stopped("acme")
    await runtime.broadcast(stop)
    await runtime.control(turn_started("acme", "t1"))
    await runtime.publish(call_events("acme", "t1", "call_0", '{"city": "Oslo"}'))

    async def dispatched() -> bool:
        return len(await runtime.dispatches()) == 1 and await runtime.caught_up()

    await wait_until(dispatched, timeout=60, what="acme's call dispatched: the stop was refused")
    [audit] = [a for a in await runtime.read("audit") if a["command_id"] == stop.command_id]
    assert (audit["outcome"], audit["rejection"]) == ("rejected", "unsigned")
    safe.terminate()
    assert await safe.wait_exit() == 0

    dev = runtime.start_worker("dev")  # the harness's development flag
    await dev.wait_ready()
    assert _GAUGE.findall(await dev.metrics()) == ["1.0"]
    assert "WITHOUT SIGNATURE CHECKS" in dev.log()
    dev.terminate()
    assert await dev.wait_exit() == 0
