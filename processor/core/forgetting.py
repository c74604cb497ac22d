"""Terminal bookkeeping and bounded memory: how a call ends, and when it is forgotten. No IO.

Owns ``terminate`` (a call leaves the open indexes, becomes a compact inert record and emits its
ledger entry and terminal status), ``stop`` (terminate what is not already absorbing), and
forgetting: the retention window (``forget``, invariant 5) and the count bounds on inert calls
(``_evict_oldest``, ``Limits.max_inert_calls``) and on response records (``room_for_response``,
``Limits.max_responses``), with the stale cutoff they move for the forgotten record's tenant
(``close_behind``, ``meta:stale:<tenant>``; ``meta:evicted_before`` is the floor for every
tenant, read from older changelogs or folded into when too many tenants hold one).

Every function takes the :class:`~processor.core.assembly_state.AssemblyState` it works on. Must
not touch live buffers' contents or the control rules; it only ends and forgets.
See :mod:`processor.core.assembly_state` for the parts and their order."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from processor.core import outputs
from processor.core.assembly_state import (
    _HORIZON_KEY,
    AssemblyState,
    _call_state_key,
    _stale_key,
)
from processor.core.buffer import CallBuffer
from processor.core.control import command_state_key, response_state_key, turn_state_key
from processor.core.events import CallKey, OutputRecord
from processor.core.inert import InertCall
from processor.core.policy import fair_share_payers
from processor.core.states import TerminalReason

__all__ = ["close_behind", "forget", "room_for_response", "stale_before", "stop", "terminate"]


def terminate(
    state: AssemblyState,
    buf: CallBuffer,
    reason: TerminalReason,
    now: float,
    out: list[OutputRecord],
) -> None:
    state.uncount(buf)
    state.mark_texts(buf, buf.terminate(reason, now))
    key = buf.key.as_tuple
    state.calls.pop(buf.key, None)
    state.live.pop(key, None)
    last_ts = max(buf.last_ts, now)
    state.inert[key] = InertCall(buf.state, buf.reason, buf.terminal_event_id, now, last_ts)
    state.ended.append((now, key))
    state.touch(buf)
    out.append(outputs.ledger(buf, now))
    out.append(outputs.terminal_status(buf, now))
    while len(state.inert) > state.limits.max_inert_calls and _evict_oldest(state):
        pass


def stop(
    state: AssemblyState,
    bufs: Iterable[CallBuffer],
    reason: TerminalReason,
    now: float,
    out: list[OutputRecord],
) -> list[CallKey]:
    affected = []
    for buf in bufs:
        if not buf.state.absorbing:
            affected.append(buf.key)
            terminate(state, buf, reason, now, out)
    return affected


def _sort_ended(state: AssemblyState) -> None:
    if not state.ended_sorted:
        state.ended = deque(sorted(state.ended, key=lambda e: e[0]))
        state.ended_sorted = True


def _evict_oldest(state: AssemblyState) -> bool:
    """The count bound (``Limits.max_inert_calls``): forget the oldest terminal call before
    its retention ends, and make fragment events stale up to the latest ``ts`` its own
    events carried (not its end in worker time: an event's ``ts`` may run up to the clock
    skew ahead), so no replay of a call forgotten early can open it again. False when
    nothing was left to forget."""
    _sort_ended(state)
    while state.ended:
        ended_at, key = state.ended.popleft()
        inert = state.inert.get(key)
        if inert is not None and inert.ended_at == ended_at:
            del state.inert[key]
            state.mark(_call_state_key(key))
            close_behind(state, key[0], inert.last_ts)
            return True
    return False


def close_behind(state: AssemblyState, tenant: str, last_ts: float) -> None:
    """Fragment events of ``tenant`` dated up to ``last_ts`` are stale from now on."""
    if last_ts <= state.evicted_before:
        return  # the floor already covers them
    cutoffs = state.stale_cutoffs
    before = cutoffs.pop(tenant, None)  # re-inserted last: in the order cutoffs moved
    if before is not None and before >= last_ts:
        cutoffs[tenant] = before
        return
    cutoffs[tenant] = last_ts
    state.stale_moved.add(tenant)
    state.mark(_stale_key(tenant))
    if len(cutoffs) > state.limits.max_inert_calls:
        _fold_cutoffs(state)


def _fold_cutoffs(state: AssemblyState) -> None:
    """More tenants hold a cutoff than calls may be remembered: the lowest tenth become
    the floor for every tenant (stricter for the others, never looser; each cutoff marks at
    least one forgotten call, so this takes more tenants than the count bound has calls)."""
    ranked = sorted(state.stale_cutoffs.values())
    floor = ranked[len(ranked) // 10]
    state.evicted_before = max(state.evicted_before, floor)
    state.mark(_HORIZON_KEY)
    for tenant, before in list(state.stale_cutoffs.items()):
        if before <= state.evicted_before:
            del state.stale_cutoffs[tenant]
            state.mark(_stale_key(tenant))


def room_for_response(state: AssemblyState, tenant: str) -> None:
    """The count bound on response records (``Limits.max_responses``), before ``tenant``
    gets a new one: forget the oldest response of the tenant that pays by the fair-share
    rule (:func:`fair_share_payers`) that holds no open call and no quarantine, and make
    that tenant's fragment events dated up to its last sighting plus the skew stale (every
    event it could have had), so none can bring it back with another verdict. A quarantine
    is kept, as a cancellation is; when nothing can go, the bound gives way to them."""
    control = state.control
    if len(control.responses) < state.limits.max_responses:
        return
    by_tenant = control.responses_by_tenant
    for payer in fair_share_payers(by_tenant, tenant):
        for rk in by_tenant.get(payer, ()):
            record = control.responses[rk]
            if record.quarantined or (rk[0], rk[1]) in state.active_by_turn:
                continue
            control._put_response(rk, None)
            state.mark(response_state_key(*rk))
            close_behind(state, payer, record.last_seen + state.limits.max_clock_skew_seconds)
            state.response_evictions += 1
            return


def stale_before(state: AssemblyState, tenant: str) -> float:
    """Fragment events of ``tenant`` dated at or before this are stale (0.0: none)."""
    return max(state.evicted_before, state.stale_cutoffs.get(tenant, 0.0))


def forget(state: AssemblyState, horizon: float) -> None:
    """Drop inert facts older than the retention window (bounded memory, invariant 5).

    Turns and responses also go once older than what the count bound forgot (the events
    that could still need them are refused as stale); seen command ids have their own bound.
    """
    _sort_ended(state)
    while state.ended and state.ended[0][0] < horizon:
        ended_at, key = state.ended.popleft()
        inert = state.inert.get(key)
        if inert is not None and inert.ended_at == ended_at:
            del state.inert[key]
            state.mark(_call_state_key(key))
            if inert.last_ts >= horizon:  # its events' ts may run past the retention
                close_behind(state, key[0], inert.last_ts)
    control = state.control
    skew = state.limits.max_clock_skew_seconds
    # a turn or response last seen at t had events dated up to t + skew: forgotten only
    # once all of those are stale, so a quarantine or a cancel never reopens on a replay
    facts = max(horizon, state.evicted_before) - skew
    for tk in control.forget_turns(facts, state.active_by_turn):
        state.mark(turn_state_key(*tk))
    for rk in control.forget_responses(facts):
        state.mark(response_state_key(*rk))
    # the same per tenant, for the tenants whose own cutoff moved (nothing else of theirs
    # can pass it until it moves again, except a turn an open call held)
    for tenant in list(state.stale_moved):
        held = False
        own = state.stale_cutoffs.get(tenant, 0.0) - skew
        if own > facts:
            turns, held = control.forget_tenant_turns(tenant, own, state.active_by_turn)
            for tk in turns:
                state.mark(turn_state_key(*tk))
            for rk in control.forget_tenant_responses(tenant, own):
                state.mark(response_state_key(*rk))
        if not held:
            state.stale_moved.discard(tenant)
    # a cutoff the retention window has passed says nothing more (in the order they moved:
    # one moved earlier but set later waits for the ones before it, which is only memory)
    cutoffs = state.stale_cutoffs
    passed = []
    for tenant, before in cutoffs.items():
        if before >= horizon:
            break
        passed.append(tenant)
    for tenant in passed:
        del cutoffs[tenant]
        state.stale_moved.discard(tenant)
        state.mark(_stale_key(tenant))
    if 0.0 < state.evicted_before < horizon:
        state.evicted_before = 0.0
        state.mark(_HORIZON_KEY)
    for scope, seen in list(control.seen_commands.items()):
        # seen at t, its issued_at is at most t + skew: kept until a replay of it is stale
        if seen.at < horizon - state.limits.max_clock_skew_seconds:
            del control.seen_commands[scope]
            state.mark(command_state_key(scope))
