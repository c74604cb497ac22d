"""Limits and the permission boundary, as data.

:class:`Limits` bounds every buffer's lifecycle (bytes, deltas, reordering window, idle time) and
the number of open buffers per partition and per tenant (invariant 5). :func:`permission` decides
whether a validated call may proceed for its bound actor; it returns the terminal reason that
stops it, or None. :func:`fair_share_payers` is the one admission rule of the partition-wide
bounds (open buffers, turn bindings): who makes room when a bound is full.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING

from processor.core.states import TerminalReason

if TYPE_CHECKING:
    from processor.core.registry import ToolDeclaration


@dataclass(frozen=True)
class Limits:
    max_call_bytes: int = 1 << 20
    max_deltas: int = 100_000
    max_reorder_window: int = 256
    max_depth: int = 64
    idle_timeout_seconds: float = 120.0
    max_open_buffers: int = 10_000
    max_open_buffers_per_tenant: int = 1_000
    # How long inert records (terminal calls, cancelled turns, seen command ids) are remembered.
    # Events of a turn older than this are rejected as stale, so forgetting cannot revive a call.
    retention_seconds: float = 24 * 3600.0
    # How long a validated call may wait for its turn's actor binding (turn.started).
    binding_wait_seconds: float = 30.0
    # How far a record's own time (ts, issued_at) may lie in the future of its reading before it
    # is dead-lettered as future_time (producers' clocks differ a little; never by minutes).
    max_clock_skew_seconds: float = 60.0
    # How long a validated call may wait for its response's end (response.ended) before it is
    # made inert as ``response_timeout``: a stream that stops without its end event never acts.
    response_wait_seconds: float = 600.0
    # How many command ids are remembered for replay protection (within retention_seconds); when
    # full, granting commands are refused (replay_window_full) and safety commands still apply.
    max_seen_commands: int = 100_000
    # How many turn records that are not cancelled (bindings) a partition keeps, in all and per
    # tenant (cancellations are kept for safety and not counted). When a new turn.started finds
    # either full, the oldest binding without an open call of the tenant holding the most is
    # forgotten (a late call of it then waits for a binding and fails permission_denied:
    # fail-safe); if none can go, the turn.started is refused (turn_limit).
    max_turns: int = 200_000
    max_turns_per_tenant: int = 20_000
    # How many terminal calls are remembered (within retention_seconds) to absorb their late
    # events. When full, the oldest is forgotten early and fragment events older than its end
    # become stale (dead-lettered), so memory stays bounded under any call rate or flood.
    max_inert_calls: int = 200_000
    # How many response records (a verdict, a quarantine) a partition keeps within
    # retention_seconds. When a new response's end finds it full, the oldest response without an
    # open call or a quarantine of the tenant holding the most is forgotten early, and that
    # tenant's fragment events dated up to its last sighting plus the skew become stale.
    max_responses: int = 200_000
    # How many calls of one turn a partition remembers as denied (call.denied, committed at any
    # time). A denial is never dropped: one past the bound cancels the whole turn instead
    # (``turn_cancelled``), which denies every call of it.
    max_denials_per_turn: int = 1_000

    def call_bytes(self, declaration: ToolDeclaration | None) -> int:
        if declaration is not None and declaration.limits.max_bytes is not None:
            return min(declaration.limits.max_bytes, self.max_call_bytes)
        return self.max_call_bytes

    def call_deltas(self, declaration: ToolDeclaration | None) -> int:
        if declaration is not None and declaration.limits.max_deltas is not None:
            return min(declaration.limits.max_deltas, self.max_deltas)
        return self.max_deltas


def permission(
    declaration: ToolDeclaration, *, tenant: str, call_actor: str, bound_actor: str
) -> TerminalReason | None:
    """The call's actor must be the turn's authenticated actor, and the tool must allow them."""
    if call_actor != bound_actor:
        return TerminalReason.PERMISSION_DENIED
    if not declaration.permits(tenant, bound_actor):
        return TerminalReason.PERMISSION_DENIED
    return None


def fair_share_payers(held: Mapping[str, Sized | int], newcomer: str) -> list[str]:
    """Who makes room when a partition-wide bound is full and ``newcomer`` asks for one more.

    ``held`` maps each tenant to what it holds (a count, or a collection of it). The tenants
    holding the most pay, in name order, unless the newcomer holds as much as any other tenant:
    then it pays itself (``[newcomer]``), so a tie goes to the incumbent and no tenant can take
    a place from another that holds no more than it does. Both bounds apply this rule: the open
    buffers (the newcomer paying is a refusal, ``buffer_limit``) and the turn bindings (the
    newcomer paying forgets one of its own turns, or is refused ``turn_limit``).
    """

    def size(value: Sized | int) -> int:
        return value if isinstance(value, int) else len(value)

    own = size(held.get(newcomer, 0))
    others = {t: size(v) for t, v in held.items() if t != newcomer}
    most = max(others.values(), default=0)
    if most <= own:
        return [newcomer]
    return sorted(t for t, n in others.items() if n == most)
