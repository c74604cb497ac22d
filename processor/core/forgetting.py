"""Terminal bookkeeping and bounded memory: how a call ends, and when it is forgotten. No IO.

Owns ``_terminate`` (a call leaves the open indexes, becomes a compact inert record and emits its
ledger entry and terminal status), ``_stop`` (terminate what is not already absorbing), and
forgetting: the retention window (``_forget``, invariant 5) and the count bounds on inert calls
(``_evict_oldest``, ``Limits.max_inert_calls``) and on response records (``_room_for_response``,
``Limits.max_responses``), with the stale cutoff they move for the forgotten record's tenant
(``_close_behind``, ``meta:stale:<tenant>``; ``meta:evicted_before`` is the floor for every
tenant, read from older changelogs or folded into when too many tenants hold one).

Must not touch live buffers' contents or the control rules; it only ends and forgets. See
:mod:`processor.core.assembly_state` for why this is a layer of one class."""

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

__all__ = ["Forgetting"]


class Forgetting(AssemblyState):
    """Ends calls and forgets old state within the retention window and count bounds."""

    def _terminate(
        self, buf: CallBuffer, reason: TerminalReason, now: float, out: list[OutputRecord]
    ) -> None:
        self._uncount(buf)
        self._mark_texts(buf, buf.terminate(reason, now))
        key = buf.key.as_tuple
        self.calls.pop(buf.key, None)
        self._live.pop(key, None)
        last_ts = max(buf.last_ts, now)
        self.inert[key] = InertCall(buf.state, buf.reason, buf.terminal_event_id, now, last_ts)
        self._ended.append((now, key))
        self._touch(buf)
        out.append(outputs.ledger(buf, now))
        out.append(outputs.terminal_status(buf, now))
        while len(self.inert) > self.limits.max_inert_calls and self._evict_oldest():
            pass

    def _stop(
        self,
        bufs: Iterable[CallBuffer],
        reason: TerminalReason,
        now: float,
        out: list[OutputRecord],
    ) -> list[CallKey]:
        affected = []
        for buf in bufs:
            if not buf.state.absorbing:
                affected.append(buf.key)
                self._terminate(buf, reason, now, out)
        return affected

    def _sort_ended(self) -> None:
        if not self._ended_sorted:
            self._ended = deque(sorted(self._ended, key=lambda e: e[0]))
            self._ended_sorted = True

    def _evict_oldest(self) -> bool:
        """The count bound (``Limits.max_inert_calls``): forget the oldest terminal call before
        its retention ends, and make fragment events stale up to the latest ``ts`` its own
        events carried (not its end in worker time: an event's ``ts`` may run up to the clock
        skew ahead), so no replay of a call forgotten early can open it again. False when
        nothing was left to forget."""
        self._sort_ended()
        while self._ended:
            ended_at, key = self._ended.popleft()
            inert = self.inert.get(key)
            if inert is not None and inert.ended_at == ended_at:
                del self.inert[key]
                self._mark(_call_state_key(key))
                self._close_behind(key[0], inert.last_ts)
                return True
        return False

    def _close_behind(self, tenant: str, last_ts: float) -> None:
        """Fragment events of ``tenant`` dated up to ``last_ts`` are stale from now on."""
        if last_ts <= self._evicted_before:
            return  # the floor already covers them
        cutoffs = self._stale_before
        before = cutoffs.pop(tenant, None)  # re-inserted last: in the order cutoffs moved
        if before is not None and before >= last_ts:
            cutoffs[tenant] = before
            return
        cutoffs[tenant] = last_ts
        self._stale_moved.add(tenant)
        self._mark(_stale_key(tenant))
        if len(cutoffs) > self.limits.max_inert_calls:
            self._fold_cutoffs()

    def _fold_cutoffs(self) -> None:
        """More tenants hold a cutoff than calls may be remembered: the lowest tenth become
        the floor for every tenant (stricter for the others, never looser; each cutoff marks at
        least one forgotten call, so this takes more tenants than the count bound has calls)."""
        ranked = sorted(self._stale_before.values())
        floor = ranked[len(ranked) // 10]
        self._evicted_before = max(self._evicted_before, floor)
        self._mark(_HORIZON_KEY)
        for tenant, before in list(self._stale_before.items()):
            if before <= self._evicted_before:
                del self._stale_before[tenant]
                self._mark(_stale_key(tenant))

    def _room_for_response(self, tenant: str) -> None:
        """The count bound on response records (``Limits.max_responses``), before ``tenant``
        gets a new one: forget the oldest response of the tenant that pays by the fair-share
        rule (:func:`fair_share_payers`) that holds no open call and no quarantine, and make
        that tenant's fragment events dated up to its last sighting plus the skew stale (every
        event it could have had), so none can bring it back with another verdict. A quarantine
        is kept, as a cancellation is; when nothing can go, the bound gives way to them."""
        control = self.control
        if len(control.responses) < self.limits.max_responses:
            return
        by_tenant = control.responses_by_tenant
        for payer in fair_share_payers(by_tenant, tenant):
            for rk in by_tenant.get(payer, ()):
                record = control.responses[rk]
                if record.quarantined or (rk[0], rk[1]) in self._active_by_turn:
                    continue
                control._put_response(rk, None)
                self._mark(response_state_key(*rk))
                self._close_behind(payer, record.last_seen + self.limits.max_clock_skew_seconds)
                self.response_evictions += 1
                return

    def stale_before(self, tenant: str) -> float:
        """Fragment events of ``tenant`` dated at or before this are stale (0.0: none)."""
        return max(self._evicted_before, self._stale_before.get(tenant, 0.0))

    def _forget(self, horizon: float) -> None:
        """Drop inert facts older than the retention window (bounded memory, invariant 5).

        Turns and responses also go once older than what the count bound forgot (the events
        that could still need them are refused as stale); seen command ids have their own bound.
        """
        self._sort_ended()
        while self._ended and self._ended[0][0] < horizon:
            ended_at, key = self._ended.popleft()
            inert = self.inert.get(key)
            if inert is not None and inert.ended_at == ended_at:
                del self.inert[key]
                self._mark(_call_state_key(key))
                if inert.last_ts >= horizon:  # its events' ts may run past the retention
                    self._close_behind(key[0], inert.last_ts)
        control = self.control
        skew = self.limits.max_clock_skew_seconds
        # a turn or response last seen at t had events dated up to t + skew: forgotten only
        # once all of those are stale, so a quarantine or a cancel never reopens on a replay
        facts = max(horizon, self._evicted_before) - skew
        for tk in control.forget_turns(facts, self._active_by_turn):
            self._mark(turn_state_key(*tk))
        for rk in control.forget_responses(facts):
            self._mark(response_state_key(*rk))
        # the same per tenant, for the tenants whose own cutoff moved (nothing else of theirs
        # can pass it until it moves again, except a turn an open call held)
        for tenant in list(self._stale_moved):
            held = False
            own = self._stale_before.get(tenant, 0.0) - skew
            if own > facts:
                turns, held = control.forget_tenant_turns(tenant, own, self._active_by_turn)
                for tk in turns:
                    self._mark(turn_state_key(*tk))
                for rk in control.forget_tenant_responses(tenant, own):
                    self._mark(response_state_key(*rk))
            if not held:
                self._stale_moved.discard(tenant)
        # a cutoff the retention window has passed says nothing more (in the order they moved:
        # one moved earlier but set later waits for the ones before it, which is only memory)
        cutoffs = self._stale_before
        passed = []
        for tenant, before in cutoffs.items():
            if before >= horizon:
                break
            passed.append(tenant)
        for tenant in passed:
            del cutoffs[tenant]
            self._stale_moved.discard(tenant)
            self._mark(_stale_key(tenant))
        if 0.0 < self._evicted_before < horizon:
            self._evicted_before = 0.0
            self._mark(_HORIZON_KEY)
        for scope, seen in list(control.seen_commands.items()):
            # seen at t, its issued_at is at most t + skew: kept until a replay of it is stale
            if seen.at < horizon - self.limits.max_clock_skew_seconds:
                del control.seen_commands[scope]
                self._mark(command_state_key(scope))
