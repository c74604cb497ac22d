"""Confirmation and cancellation through ``processor ctl``, end to end on a real broker.

A confirmation binds the exact call key, ``args_digest`` and the turn's actor: the right one
dispatches once and runs once; a wrong digest, another actor, an expired or a repeated
confirmation never dispatches. A cancellation written after the worker dispatched a call but
before the executor ran it is refused by the executor's fence.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Runtime, call_events, wait_until
from tests.integration.executor_harness import results
from tests.integration.operator_harness import (
    BOOKING,
    calls_of,
    cli,
    deployment,
    result_for,
    start_turn,
    wait_audit,
    wait_status,
)

pytestmark = pytest.mark.integration


async def proposal_of(rt: Runtime, turn: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = await wait_until(
        lambda: calls_of(rt, "proposals", turn), timeout=60, what=f"proposal of {turn}"
    )
    return found[0]


async def confirm(
    rt: Runtime,
    proposal: dict[str, Any],
    *,
    digest: str | None = None,
    actor: str = "user-1",
    command_id: str,
    verb: str = "confirm",
) -> None:
    code, out = await cli(
        rt, "ctl", verb, "--tenant", proposal["tenant"], "--turn", proposal["turn_id"],
        "--response", proposal["response_id"], "--item", proposal["item_id"],
        "--call", proposal["call_id"], "--actor", actor,
        "--digest", digest or proposal["args_digest"], "--command-id", command_id,
    )  # fmt: skip
    assert code == 0, out


@pytest.mark.partitions(3)
async def test_confirmation_binds_digest_actor_and_expiry(runtime: Runtime, tmp_path: Path) -> None:
    rt = runtime
    async with deployment(rt, tmp_path) as dep:
        turns = {
            "ok": "book_slot",
            "wrong-digest": "book_slot",
            "wrong-actor": "book_slot",
            "expired": "hold_table",  # confirmation_ttl_seconds: 2
            "repeated": "book_slot",
            "denied": "book_slot",
        }
        for turn, tool in turns.items():
            await start_turn(rt, "acme", turn)
            args = BOOKING if tool == "book_slot" else '{"party_size": 2}'
            await rt.publish(call_events("acme", turn, "call_0", args, tool=tool))
        proposals = {turn: await proposal_of(rt, turn) for turn in turns}
        for turn, tool in turns.items():
            # the status stream tells the user what is awaited
            awaited = await wait_status(rt, turn, "awaiting_confirmation")
            assert awaited["tool"] == tool
        assert all(p["args_digest"] for p in proposals.values())

        await confirm(rt, proposals["ok"], command_id="c-ok")
        await confirm(rt, proposals["wrong-digest"], digest="0" * 32, command_id="c-digest")
        await confirm(rt, proposals["wrong-actor"], actor="mallory", command_id="c-actor")
        await confirm(rt, proposals["repeated"], command_id="c-rep")
        await confirm(rt, proposals["repeated"], command_id="c-rep")  # the same id again
        await confirm(rt, proposals["repeated"], command_id="c-rep-2")  # a second confirmation
        await confirm(rt, proposals["denied"], command_id="c-deny", verb="deny")
        await wait_status(rt, "expired", "failed", timeout=60)  # the window closed
        await confirm(rt, proposals["expired"], command_id="c-late")

        assert (await wait_audit(rt, "c-ok", "applied"))["affected"]
        rejections = {
            "c-digest": "digest_mismatch",
            "c-actor": "wrong_actor",
            "c-late": "not_awaiting_confirmation",
            "c-rep-2": "not_awaiting_confirmation",
        }
        for command_id, rejection in rejections.items():
            assert (await wait_audit(rt, command_id, "rejected"))["rejection"] == rejection
        replayed = await wait_audit(rt, "c-rep", "rejected")
        assert replayed["rejection"] == "replayed"
        await wait_audit(rt, "c-rep", "applied")

        for turn in ("ok", "repeated"):
            result = await result_for(rt, turn)
            assert result.outcome == "succeeded"
        await rt.wait_caught_up()
        dispatches = await rt.dispatches()
        assert sorted(d["turn_id"] for d in dispatches) == ["ok", "repeated"]
        by_turn = {d["turn_id"]: d for d in dispatches}
        assert by_turn["ok"]["confirmation_ref"] == "c-ok"
        assert by_turn["ok"]["args_digest"] == proposals["ok"]["args_digest"]
        ran = Counter(c.key.turn_id for c in dep.recorder.calls)
        assert ran == Counter({"ok": 1, "repeated": 1})  # each confirmed call runs once
        denied = await wait_status(rt, "denied", "failed")
        assert denied["message"] == "You declined this action."
        expired = await wait_status(rt, "expired", "failed")
        assert expired["retry_possible"] is True
        await asyncio.sleep(1.0)
        assert len(await results(rt.settings)) == 2


@pytest.mark.partitions(3)
async def test_cancellation_racing_dispatch_is_refused_by_the_executor_fence(
    runtime: Runtime, tmp_path: Path
) -> None:
    rt = runtime
    async with deployment(rt, tmp_path, start_executor=False) as dep:
        for turn in ("stop-me", "old"):
            await start_turn(rt, "acme", turn)
            await rt.publish(call_events("acme", turn, "call_0", '{"city": "Oslo"}'))
        await wait_until(
            lambda: _at_least(rt, 2), timeout=60, what="both calls dispatched by the worker"
        )
        # the executor has not run them yet: the user stops one turn, and a newer message
        # supersedes the other
        code, _ = await cli(
            rt, "ctl", "cancel-turn", "--tenant", "acme", "--turn", "stop-me",
            "--command-id", "cancel-1",
        )  # fmt: skip
        assert code == 0
        code, _ = await cli(
            rt, "ctl", "start-turn", "--tenant", "acme", "--turn", "new", "--actor", "user-1",
            "--supersedes", "old",
        )  # fmt: skip
        assert code == 0
        await rt.publish(call_events("acme", "new", "call_0", '{"city": "Rome"}'))
        await wait_audit(rt, "cancel-1", "applied")

        await dep.executor.start()
        got = {t: await result_for(rt, t) for t in ("stop-me", "old", "new")}
        assert (got["stop-me"].outcome, got["stop-me"].reason) == ("refused", "turn_cancelled")
        assert got["stop-me"].blocked_by == "cancel-1"
        assert (got["old"].outcome, got["old"].reason) == ("refused", "turn_cancelled")
        assert got["new"].outcome == "succeeded"
        assert [c.key.turn_id for c in dep.recorder.calls] == ["new"]
        status = await wait_status(rt, "stop-me", "cancelled")
        assert status["message"] == "This turn was cancelled before the action ran."


async def _at_least(rt: Runtime, n: int) -> bool:
    return len(await rt.dispatches()) >= n
