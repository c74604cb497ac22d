"""The replay-protection memory is bounded (Limits.max_seen_commands), failing closed.

A flood of distinct command ids must not grow a worker's memory without bound. When the set of
remembered ids is full, a granting command (confirm, resume, enable) is refused and audited
``replay_window_full`` (its replay could not be detected); a command that only makes things safer
still applies (never dropped, invariant 11); once retention forgets old ids, grants work again.
bench/bench_attack_memory.py measures the memory.
"""

from __future__ import annotations

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.events import Audit, TenantResumed, TenantStopped, ToolDisabled, ToolEnabled
from processor.core.policy import Limits
from processor.core.registry import Registry
from processor.settings import LimitsSettings

NOW = 1_000.0


def command(cls: type, n: int, **fields: object) -> object:
    return cls(command_id=f"{cls.__name__}-{n}", issued_by="ops", issued_at=NOW,
               expires_at=NOW + 600, tenant="acme", reason="test", **fields)  # fmt: skip


def audits(asm: Assembler, event: object, now: float = NOW) -> list[tuple[str, str | None]]:
    return [(o.outcome, o.rejection) for o in asm.handle(event, now) if isinstance(o, Audit)]


def test_a_full_window_refuses_grants_and_still_applies_safety_commands() -> None:
    registry = Registry.from_document({"tools": [{"name": "t", "parameters": {"type": "object"}}]})
    asm = Assembler(
        registry, Limits(max_seen_commands=3, retention_seconds=3600), verifier=AllowUnsigned()
    )
    for n in range(3):
        assert audits(asm, command(ToolEnabled, n, tool="t")) == [("applied", None)]
    assert len(asm.control.seen_commands) == 3

    assert audits(asm, command(ToolEnabled, 9, tool="t")) == [("rejected", "replay_window_full")]
    assert audits(asm, command(TenantResumed, 9)) == [("rejected", "replay_window_full")]
    assert audits(asm, command(ToolDisabled, 9, tool="t")) == [("applied", None)]
    assert audits(asm, command(TenantStopped, 9)) == [("applied", None)]
    assert "acme" in asm.control.stopped_tenants
    assert len(asm.control.seen_commands) == 3  # bounded
    assert audits(asm, command(ToolEnabled, 0, tool="t")) == [("rejected", "replayed")]

    # retention forgets the old ids (once a replay of them is stale whatever its issued_at,
    # the skew allowance later): grants are accepted again
    later = NOW + 3600 + Limits().max_clock_skew_seconds + 1
    asm.tick(later)
    resumed = TenantResumed(command_id="resume-late", issued_by="ops", issued_at=later,
                            expires_at=later + 600, tenant="acme", reason="ok")  # fmt: skip
    assert audits(asm, resumed, later) == [("applied", None)]


def test_the_bound_is_a_setting() -> None:
    assert LimitsSettings(max_seen_commands=7).to_limits().max_seen_commands == 7
