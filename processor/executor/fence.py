"""The execution-time fence: pure control state of one ``control`` partition, and its check.

An executor re-checks every dispatched call just before it runs (ARCHITECTURE.md §7, invariant
3): the call's turn must not be cancelled, its response not quarantined, its tool not disabled
(for its tenant or globally), its tenant not stopped, the call not denied, and, where the tool
requires a confirmation, the confirmation the dispatch names must exist in ``control``, bind the
exact call key and ``args_digest``, come from the turn's bound actor, and still be fresh.

:class:`FenceState` is sans-IO: :meth:`FenceState.apply` takes one decoded control event and the
time it was appended to ``control`` (its record timestamp), :meth:`FenceState.check` takes a
dispatch and ``now``; there is no clock, no Kafka and no randomness inside. The barrier
(:mod:`processor.executor.barrier`) feeds it the control partition of the call's turn up to the
end offset observed when the dispatch arrived.

It mirrors the Assembler's control rules (``processor.core.assembler``), so an executor refuses
whatever a worker would have refused had it seen the same control events first:

- operator commands are applied only when the :class:`~processor.core.authn.CommandVerifier`
  accepts them (Ed25519 signature, expiry, scope), verified as of their append time (the record
  timestamp; the worker verified them when it read them, and an executor that starts later
  replays old commands that have expired since), except that ``tool.enabled`` and
  ``tenant.resumed`` are verified no earlier than the latest append time seen on the partition,
  so a replayed permissive command with a forged old timestamp is rejected as expired; a forged
  or out-of-scope command changes nothing here either. ``processor topics create`` gives
  ``control`` ``message.timestamp.type=LogAppendTime``, so the append time is the broker's and
  producer clocks are out of the picture; the floor still guards a ``control`` topic created
  with producer timestamps (CreateTime);
- command ids follow the worker's replay rule (:func:`processor.core.command_ids.judge_command`): an
  id is remembered in its scope (type, signer, tenant, target), so no unsigned record, other
  operator, other tenant or other target can consume it; a command that only makes things safer
  (cancel, deny, quarantine, disable, stop) always applies (an identical repeat is a no-op
  ``duplicate``, a reused id with a different content applies as ``conflict``), and a granting one
  (confirm, enable, resume) is strictly deduplicated (the copies a fan-out writes land on different
  partitions, and every partition has its own :class:`FenceState`);
- records are decoded strictly (:func:`processor.core.events.decode_input`): a time that is not a
  finite number, or that lies more than ``clock_skew_seconds`` after the record's append time, is
  undecodable, and a confirmation's age is counted from the earlier of its ``issued_at`` and its
  append time;
- tool names are resolved to their declared names with the executor's registry
  (``canonical_tool``), as the worker does; a switch names a tool without a namespace, so it
  stops that name (or alias) in every namespace (``switch_names``), as the worker does;
  without a registry the fence cannot tell an alias from another tool, so a
  ``tool.disabled`` naming, for the call's tenant (or every tenant), any name other than the
  call's tool and the tools this executor runs (``known_tools``, its handlers' declared names)
  refuses the call too (``tool_disabled``, detail ``unresolved_alias``): run executors with the
  tool registry;
- ``turn.cancelled`` is absorbing; ``turn.started`` binds the actor once (a different actor later
  is ignored, as the Assembler audits ``actor_rebind``);
- ``call.confirmed`` and ``call.denied`` count only from the turn's bound actor.

Only the control facts are kept, never argument values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from processor.core.authn import CommandVerifier
from processor.core.command_ids import SeenCommand, Verdict, judge_command
from processor.core.errors import RecordRejected
from processor.core.events import (
    CallConfirmed,
    CallDenied,
    CallKey,
    ControlEvent,
    Dispatch,
    InputEvent,
    OperatorCommand,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    TurnStarted,
    check_time,
    decode_input,
)

__all__ = [
    "ApplyOutcome",
    "Confirmation",
    "FenceState",
    "Refusal",
    "RefusalCode",
    "Requirements",
]

CLOCK_SKEW_SECONDS: Final = 60.0
"""How far a record's append time may lag the latest one seen on its partition, and how far a
record's own time (``ts``, ``issued_at``) may lie after its append time."""
GLOBAL: Final = "*"
"""The tenant slot of a tool disabled for every tenant."""


class RefusalCode(StrEnum):
    """Why the fence refuses to run a dispatched call (stable codes for results and metrics)."""

    TENANT_STOPPED = "tenant_stopped"
    TURN_CANCELLED = "turn_cancelled"
    QUARANTINED = "quarantined"
    TOOL_DISABLED = "tool_disabled"
    TURN_NOT_BOUND = "turn_not_bound"
    ACTOR_MISMATCH = "actor_mismatch"
    CONFIRMATION_DENIED = "confirmation_denied"
    CONFIRMATION_MISSING = "confirmation_missing"
    CONFIRMATION_MISMATCH = "confirmation_mismatch"
    CONFIRMATION_WRONG_ACTOR = "confirmation_wrong_actor"
    CONFIRMATION_EXPIRED = "confirmation_expired"
    STALE_DISPATCH = "stale_dispatch"


class ApplyOutcome(StrEnum):
    """What :meth:`FenceState.apply` did with one control record."""

    APPLIED = "applied"
    CONFLICT = "conflict"  # a safety command whose id was used by another one: applied
    DUPLICATE = "duplicate"  # a safety command repeated identically: a no-op
    REPLAYED = "replayed"  # a granting command whose id was seen before on this partition
    REJECTED = "rejected"  # an operator command the verifier refused, or an actor rebind
    IGNORED = "ignored"  # not a control event (a fragment type on the control topic)
    UNDECODABLE = "undecodable"


@dataclass(frozen=True)
class Refusal:
    """A fence decision against running a call. ``command_id`` names the control event that
    caused it, where one did; ``detail`` is a short code-like note, never argument values."""

    code: RefusalCode
    command_id: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class Requirements:
    """What the executor requires of a call on top of the control facts.

    ``requires_confirmation``: the dispatch must name a confirmation (a ``call.confirmed``
    command id). ``confirmation_max_age_seconds``: that confirmation must have been issued at
    most this long before ``now`` (``None``: no age limit). ``max_dispatch_age_seconds``: a
    dispatch older than this is refused as stale, because control facts older than the same
    horizon may have been forgotten (``None``: no limit).
    """

    requires_confirmation: bool = False
    confirmation_max_age_seconds: float | None = None
    max_dispatch_age_seconds: float | None = None


@dataclass(frozen=True)
class Confirmation:
    """A ``call.confirmed`` as the fence keeps it: key, digest, actor, time. No arguments."""

    command_id: str
    key: CallKey
    args_digest: str
    actor: str
    issued_at: float  # the earlier of its own issued_at and its append time
    at: float = 0.0  # its append time (for forgetting)


@dataclass
class _Turn:
    actor: str | None = None
    cancelled: str | None = None  # the cancelling command id once cancelled (absorbing)
    cancel_reason: str = ""
    last_seen: float = 0.0


@dataclass
class _Flag:
    command_id: str
    set_at: float


@dataclass
class FenceState:
    """The control facts of one ``control`` partition, as an executor needs them.

    ``verifier`` authenticates operator commands (a :class:`processor.ops.signing.Keyring` in
    production). ``canonical_tool`` maps a tool name (maybe an alias) to its declared name, or
    ``None`` for a name the registry does not know; ``None`` itself means the executor has no
    registry (then a disable of a name outside ``known_tools`` refuses every call of its
    tenant, see the module docstring). ``known_tools``: the declared names this executor runs.
    ``switch_names`` maps a dispatch's (tool, namespace) to the switch names that stop it (the
    registry's :meth:`~processor.core.registry.Registry.switch_names`: its declared name and
    aliases, whatever its namespace, since a switch names none), or ``None`` when the registry
    does not know it; without it, a dispatch is stopped by its own name.
    """

    verifier: CommandVerifier
    canonical_tool: Callable[[str], str | None] | None = None
    known_tools: frozenset[str] = frozenset()
    switch_names: Callable[[str, str | None], frozenset[str] | None] | None = None
    clock_skew_seconds: float = CLOCK_SKEW_SECONDS
    turns: dict[tuple[str, str], _Turn] = field(default_factory=dict)
    quarantined: dict[tuple[str, str, str], _Flag] = field(default_factory=dict)
    disabled_tools: dict[tuple[str, str], _Flag] = field(default_factory=dict)
    stopped_tenants: dict[str, _Flag] = field(default_factory=dict)
    confirmations: dict[str, dict[CallKey, Confirmation]] = field(default_factory=dict)
    denials: dict[CallKey, _Flag] = field(default_factory=dict)
    seen_commands: dict[str, SeenCommand] = field(default_factory=dict)  # by command scope
    latest_append: float = 0.0
    applied: int = 0
    rejected: int = 0

    # ------------------------------------------------------------------------------ input

    def apply_record(self, payload: bytes, at: float) -> ApplyOutcome:
        """Decode and apply one raw ``control`` record appended at ``at`` (epoch seconds)."""
        try:
            event = decode_input(payload, now=at, clock_skew=self.clock_skew_seconds)
        except RecordRejected:
            return ApplyOutcome.UNDECODABLE
        return self.apply(event, at)

    def apply(self, event: InputEvent | ControlEvent, at: float) -> ApplyOutcome:
        """Apply one decoded control event appended to ``control`` at time ``at``.

        Never raises: an event dated beyond ``at`` plus the clock skew is rejected.
        """
        try:
            check_time(event, at, self.clock_skew_seconds)
        except RecordRejected:
            self.rejected += 1
            return ApplyOutcome.REJECTED
        floor = self.latest_append - CLOCK_SKEW_SECONDS
        self.latest_append = max(self.latest_append, at)
        match event:
            case TurnStarted():
                return self._on_turn_started(event, at)
            case TurnCancelled():
                verdict = self._judge(event, at)
                if not verdict.applies:
                    return _NOT_APPLIED[verdict]
                turn = self._turn(event.tenant, event.turn_id, at)
                if turn.cancelled is None:
                    turn.cancelled, turn.cancel_reason = event.command_id, event.reason
                return self._ok(verdict)
            case CallConfirmed():
                verdict = self._judge(event, at)
                if not verdict.applies:
                    return _NOT_APPLIED[verdict]
                self._turn(event.tenant, event.turn_id, at)
                self.confirmations.setdefault(event.command_id, {})[event.key] = Confirmation(
                    command_id=event.command_id,
                    key=event.key,
                    args_digest=event.args_digest,
                    actor=event.actor,
                    issued_at=min(event.issued_at, at),
                    at=at,
                )
                return self._ok(verdict)
            case CallDenied():
                verdict = self._judge(event, at)
                if not verdict.applies:
                    return _NOT_APPLIED[verdict]
                turn = self._turn(event.tenant, event.turn_id, at)
                if turn.actor is not None and turn.actor != event.actor:
                    self.rejected += 1
                    return ApplyOutcome.REJECTED  # a denial counts only from the bound actor
                self.denials.setdefault(event.key, _Flag(event.command_id, at))
                return self._ok(verdict)
            case (
                ResponseQuarantined()
                | ToolDisabled()
                | ToolEnabled()
                | TenantStopped()
                | TenantResumed()
            ):
                return self._on_operator(event, at, floor)
            case _:
                return ApplyOutcome.IGNORED

    def _on_turn_started(self, event: TurnStarted, at: float) -> ApplyOutcome:
        turn = self._turn(event.tenant, event.turn_id, at)
        if turn.actor is not None and turn.actor != event.actor:
            self.rejected += 1
            return ApplyOutcome.REJECTED
        turn.actor = event.actor
        return self._ok()

    def _on_operator(self, event: OperatorCommand, at: float, floor: float) -> ApplyOutcome:
        # ``control`` is created with LogAppendTime (the broker's clock); on a topic created
        # with CreateTime, a replayed permissive command could carry an old, in-window time.
        # Permissive commands are verified no earlier than the partition's latest append time
        # (less the clock skew); restrictive ones at their own time. A forged timestamp can
        # only ever make the fence stricter.
        when = max(at, floor) if isinstance(event, ToolEnabled | TenantResumed) else at
        if self.verifier.verify(event, when) is not None:
            self.rejected += 1
            return ApplyOutcome.REJECTED
        verdict = self._judge(event, at)
        if not verdict.applies:
            return _NOT_APPLIED[verdict]
        flag = _Flag(event.command_id, at)
        match event:
            case ResponseQuarantined():
                self.quarantined[(event.tenant, event.turn_id, event.response_id)] = flag
            case ToolDisabled():
                slot = (event.tenant or GLOBAL, self._tool(event.tool))
                self.disabled_tools[slot] = flag
            case ToolEnabled():
                slot = (event.tenant or GLOBAL, self._tool(event.tool))
                self.disabled_tools.pop(slot, None)
            case TenantStopped():
                self.stopped_tenants[event.tenant] = flag
            case TenantResumed():
                self.stopped_tenants.pop(event.tenant, None)
        return self._ok(verdict)

    def _ok(self, verdict: Verdict = Verdict.NEW) -> ApplyOutcome:
        self.applied += 1
        return ApplyOutcome.CONFLICT if verdict is Verdict.CONFLICT else ApplyOutcome.APPLIED

    def _judge(
        self, event: TurnCancelled | CallConfirmed | CallDenied | OperatorCommand, at: float
    ) -> Verdict:
        verdict, _scope = judge_command(self.seen_commands, event, at)
        return verdict

    def _tool(self, name: str) -> str:
        """The declared name of ``name`` (as written when unknown or without a registry)."""
        if self.canonical_tool is None:
            return name
        return self.canonical_tool(name) or name

    def _turn(self, tenant: str, turn_id: str, at: float) -> _Turn:
        turn = self.turns.get((tenant, turn_id))
        if turn is None:
            turn = self.turns[(tenant, turn_id)] = _Turn()
        turn.last_seen = max(turn.last_seen, at)
        return turn

    # ------------------------------------------------------------------------------ check

    def check(
        self, dispatch: Dispatch, now: float, requirements: Requirements | None = None
    ) -> Refusal | None:
        """``None`` when ``dispatch`` may run at ``now``, else the first reason it may not.

        The order follows the Assembler's: tenant stop, turn cancellation, quarantine, tool
        switch, then the actor binding, then a denial, then the confirmation.
        """
        req = requirements or Requirements()
        key = dispatch.key
        if (
            req.max_dispatch_age_seconds is not None
            and now - dispatch.ts > req.max_dispatch_age_seconds
        ):
            return Refusal(RefusalCode.STALE_DISPATCH)
        stop = self.stopped_tenants.get(key.tenant)
        if stop is not None:
            return Refusal(RefusalCode.TENANT_STOPPED, stop.command_id)
        turn = self.turns.get((key.tenant, key.turn_id))
        if turn is not None and turn.cancelled is not None:
            return Refusal(RefusalCode.TURN_CANCELLED, turn.cancelled, _short(turn.cancel_reason))
        quarantine = self.quarantined.get((key.tenant, key.turn_id, key.response_id))
        if quarantine is not None:
            return Refusal(RefusalCode.QUARANTINED, quarantine.command_id)
        disabled = self._disabled(key.tenant, dispatch.tool, dispatch.namespace)
        if disabled is not None:
            return disabled
        if turn is None or turn.actor is None:
            return Refusal(RefusalCode.TURN_NOT_BOUND)
        if dispatch.actor != turn.actor:
            return Refusal(RefusalCode.ACTOR_MISMATCH)
        denial = self.denials.get(key)
        if denial is not None:
            return Refusal(RefusalCode.CONFIRMATION_DENIED, denial.command_id)
        if dispatch.confirmation_ref is None:
            if req.requires_confirmation:
                return Refusal(RefusalCode.CONFIRMATION_MISSING)
            return None
        return self._check_confirmation(dispatch, turn.actor, now, req)

    def _disabled(self, tenant: str, tool_name: str, namespace: str | None) -> Refusal | None:
        names = self.switch_names(tool_name, namespace) if self.switch_names else None
        for tool in names or (self._tool(tool_name),):
            flag = self.disabled_tools.get((tenant, tool)) or self.disabled_tools.get(
                (GLOBAL, tool)
            )
            if flag is not None:
                return Refusal(RefusalCode.TOOL_DISABLED, flag.command_id)
        if self.canonical_tool is None:  # no registry: an unknown disabled name may be an alias
            for (slot_tenant, name), other in self.disabled_tools.items():
                if slot_tenant in (tenant, GLOBAL) and name not in self.known_tools:
                    return Refusal(RefusalCode.TOOL_DISABLED, other.command_id, "unresolved_alias")
        return None

    def _check_confirmation(
        self, dispatch: Dispatch, bound_actor: str, now: float, req: Requirements
    ) -> Refusal | None:
        ref = dispatch.confirmation_ref
        by_key = self.confirmations.get(ref, {}) if ref is not None else {}
        confirmation = by_key.get(dispatch.key)
        if confirmation is None and by_key:  # that id confirmed another call only
            return Refusal(RefusalCode.CONFIRMATION_MISMATCH, ref, "call_key")
        if confirmation is None:
            return Refusal(RefusalCode.CONFIRMATION_MISSING, ref)
        if confirmation.args_digest != dispatch.args_digest:
            return Refusal(RefusalCode.CONFIRMATION_MISMATCH, ref, "args_digest")
        if confirmation.actor != bound_actor:
            return Refusal(RefusalCode.CONFIRMATION_WRONG_ACTOR, ref)
        max_age = req.confirmation_max_age_seconds
        if max_age is not None and now - confirmation.issued_at > max_age:
            return Refusal(RefusalCode.CONFIRMATION_EXPIRED, ref)
        return None

    # ------------------------------------------------------------------------------ memory

    def forget(self, horizon: float) -> int:
        """Drop facts last touched before ``horizon``; returns how many were dropped.

        Call it with ``now - retention`` and refuse dispatches older than the same retention
        (:attr:`Requirements.max_dispatch_age_seconds`), so forgetting can never let a call run
        that a remembered fact would have stopped. Tenant stops and tool switches are kept: they
        hold until resumed or enabled.
        """
        dropped = 0
        for tk, turn in list(self.turns.items()):
            if turn.last_seen < horizon:
                del self.turns[tk]
                dropped += 1
        for rk, flag in list(self.quarantined.items()):
            if flag.set_at < horizon:
                del self.quarantined[rk]
                dropped += 1
        for ck, flag in list(self.denials.items()):
            if flag.set_at < horizon:
                del self.denials[ck]
                dropped += 1
        for command_id, by_key in list(self.confirmations.items()):
            for ck, confirmation in list(by_key.items()):
                if confirmation.at < horizon:
                    del by_key[ck]
                    dropped += 1
            if not by_key:
                del self.confirmations[command_id]
        for scope, seen in list(self.seen_commands.items()):
            if seen.at < horizon:
                del self.seen_commands[scope]
                dropped += 1
        return dropped


_NOT_APPLIED: Final = {
    Verdict.DUPLICATE: ApplyOutcome.DUPLICATE,
    Verdict.REPLAYED: ApplyOutcome.REPLAYED,
}


def _short(text: str) -> str:
    return text[:64]
