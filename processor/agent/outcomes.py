"""One turn's records folded into each call's settled outcome. Pure: no Kafka, no clock.

Owns :class:`OutcomeKind`, :class:`Outcome`, :class:`TurnOutcomes` (the per-turn fold) and
:func:`decode_outcome_record` (one record of ``status``, ``ledger``, ``results`` or ``audit``,
strictly decoded, or ``None``). The Kafka shell that feeds it is
:mod:`processor.agent.follower`.

How a call settles (the first settling fact wins; a settled outcome never changes):

=============  =================================================================================
kind           from
=============  =================================================================================
``ran``        a ``results`` record ``succeeded``: the handler ran; ``output`` is what it returned
``failed``     a ``results`` record ``failed``: the handler ran and failed with ``reason`` (its
               code); no argument values anywhere
``refused``    a ``results`` record ``refused``: the executor's fence stopped it just before it
               ran; ``reason`` is the refusal code, ``blocked_by`` the command that caused it
``unknown``    a ``results`` record ``unknown``: the executor claimed it and cannot tell whether
               it acted (it may have); it is never run again
``cancelled``  a ``ledger`` record ``cancelled`` by the user, a supersession, an operator (stop,
               quarantine, disabled tool) or a denied / expired confirmation: never dispatched
``voided``     a ``ledger`` record ``cancelled`` because its response did not end normally
               (``response_failed``, ``incomplete``, ``response_timeout``, another alternative
               chosen); ``provider_reason`` is the provider's stop reason
``rejected``   a ``ledger`` record ``failed`` (malformed JSON, unknown tool, schema, permission,
               limits), or the turn's binding refused on ``audit`` (none of its calls will run)
``open``       nothing settled yet; ``stage`` says how far it got (``unseen``, ``preparing``,
               ``awaiting_confirmation``, ``dispatched``)
=============  =================================================================================

A call that will never run settles when the worker decides (its ``ledger`` record), not at a
timeout. What this reader does not positively understand settles nothing as "not run": a
``ledger`` state it does not know leaves the call open, a ``results`` outcome it does not know
is ``unknown`` (it may have acted), a record that does not validate is dropped. Records of
another tenant or turn are never taken (the fold is keyed by both). With ``executor_group``
set, only that group's results count; without it, the first result read settles the call
(several executor groups may each run a dispatch; name the one whose outcome the model should
hear).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from processor.core.events import Audit, CallKey, Ledger, Status
from processor.executor.records import ExecutionOutcome, ExecutionResult

__all__ = [
    "LIFTABLE",
    "Outcome",
    "OutcomeKind",
    "OutcomeRecord",
    "TurnOutcomes",
    "decode_outcome_record",
]


class OutcomeKind(StrEnum):
    RAN = "ran"
    FAILED = "failed"
    REFUSED = "refused"
    UNKNOWN = "unknown"
    CANCELLED = "cancelled"
    VOIDED = "voided"
    REJECTED = "rejected"
    OPEN = "open"


_VOIDING: Final = frozenset(
    {"response_failed", "incomplete", "response_timeout", "alternative_not_chosen"}
)
_CANCELLING_FAILURES: Final = frozenset({"confirmation_denied", "confirmation_expired"})

LIFTABLE: Final = frozenset(
    {
        "confirmation_missing",
        "confirmation_expired",
        "confirmation_mismatch",
        "tool_disabled",
        "tenant_stopped",
        "quarantined",
    }
)
"""Reasons a user (or an operator) can lift: a confirmation to give, a tool or tenant switched off
for now, a response held for review. The model is told so, not that the call is impossible."""

_RESULT_KIND: Final = {
    ExecutionOutcome.SUCCEEDED: OutcomeKind.RAN,
    ExecutionOutcome.FAILED: OutcomeKind.FAILED,
    ExecutionOutcome.REFUSED: OutcomeKind.REFUSED,
    ExecutionOutcome.UNKNOWN: OutcomeKind.UNKNOWN,
}

OutcomeRecord = Status | Ledger | ExecutionResult | Audit
_MODEL_OF_TOPIC: Final[dict[str, type[BaseModel]]] = {
    "status": Status,
    "ledger": Ledger,
    "results": ExecutionResult,
    "audit": Audit,
}


@dataclass(frozen=True)
class Outcome:
    """What became of one call (``kind``), with what the model and the user may be told.

    ``tool``/``namespace`` are the registry's names; ``called_as`` the name the model called it
    by (from the tee's ``call.started``), when known. ``reason`` is a code (refusal, handler
    failure, terminal reason), never an argument value; ``output`` is the handler's returned
    object (``ran`` only). ``liftable``: the user can lift what stopped it (confirm, re-enable)."""

    key: CallKey
    kind: OutcomeKind = OutcomeKind.OPEN
    stage: str = "unseen"
    tool: str | None = None
    namespace: str | None = None
    called_as: str | None = None
    called_namespace: str | None = None
    provider: str | None = None
    reason: str | None = None
    detail: str = ""
    blocked_by: str | None = None
    retry_possible: bool = False
    output: dict[str, Any] | None = None
    provider_reason: str | None = None
    message: str = ""
    dispatch_id: str | None = None
    executor_group: str | None = None

    @property
    def settled(self) -> bool:
        return self.kind is not OutcomeKind.OPEN

    @property
    def decided(self) -> bool:
        """Whether the worker has decided (dispatched it, or settled it as never running)."""
        return self.settled or self.stage == "dispatched"

    @property
    def liftable(self) -> bool:
        return self.reason in LIFTABLE

    @property
    def ran(self) -> bool:
        return self.kind is OutcomeKind.RAN

    @property
    def name(self) -> str:
        """The name to answer the model with: as it called the tool, else the registry's."""
        return self.called_as or self.tool or ""


def decode_outcome_record(topic_role: str, payload: bytes | None) -> OutcomeRecord | None:
    """One record of ``status``, ``ledger``, ``results`` or ``audit`` (by topic role, without
    prefix), strictly decoded; ``None`` for anything else (a tombstone, another type, a record
    that does not validate): what is not positively understood settles nothing."""
    model = _MODEL_OF_TOPIC.get(topic_role)
    if model is None or payload is None:
        return None
    try:
        record = model.model_validate_json(payload)
    except (ValidationError, ValueError):
        return None
    assert isinstance(record, Status | Ledger | ExecutionResult | Audit)
    return record


def _call_tuple(key: CallKey) -> tuple[str, str, str]:
    return (key.response_id, key.item_id, key.call_id)


@dataclass
class TurnOutcomes:
    """The fold of one turn's records: ``apply`` each, read ``outcomes``.

    ``expect`` names the calls the agent waits for (a tee's ``call.started`` events, or keys);
    calls the records name are added as they are seen. ``binding_command_id`` is the
    ``turn.started`` command id whose refusal (on ``audit``) settles every undecided call
    ``rejected``."""

    tenant: str
    turn_id: str
    executor_group: str | None = None
    binding_command_id: str | None = None
    binding_refused: str | None = None
    calls: dict[tuple[str, str, str], Outcome] = field(default_factory=dict)
    expected: list[tuple[str, str, str]] = field(default_factory=list)

    def expect(
        self,
        key: CallKey,
        *,
        called_as: str | None = None,
        called_namespace: str | None = None,
        provider: str | None = None,
    ) -> None:
        """Wait for ``key`` (which must be of this turn) and remember the name (and namespace)
        it was called by."""
        if (key.tenant, key.turn_id) != (self.tenant, self.turn_id):
            raise ValueError("a call of another turn")
        ident = _call_tuple(key)
        if ident not in self.expected:
            self.expected.append(ident)
        known = self.calls.get(ident) or Outcome(key)
        self.calls[ident] = replace(
            known,
            called_as=called_as or known.called_as,
            called_namespace=called_namespace or known.called_namespace,
            provider=provider or known.provider,
        )
        if self.binding_refused is not None:
            self._refuse_undecided()

    def apply(self, record: OutcomeRecord) -> bool:
        """Fold one record in; True when it changed an outcome (or the turn's binding)."""
        if isinstance(record, Audit):
            return self._apply_audit(record)
        if (record.tenant, record.turn_id) != (self.tenant, self.turn_id):
            return False
        ident = _call_tuple(record.key)
        current = self.calls.get(ident) or Outcome(record.key)
        if current.settled:
            return False
        if isinstance(record, ExecutionResult):
            updated = self._from_result(current, record)
        elif isinstance(record, Ledger):
            updated = self._from_ledger(current, record)
        else:
            updated = self._from_status(current, record)
        if updated is None or updated == self.calls.get(ident):
            return False
        self.calls[ident] = updated
        return True

    def outcomes(self, calls: Iterable[tuple[str, str, str]] | None = None) -> list[Outcome]:
        """The outcomes of ``calls`` (default: the expected calls, else every call seen), in the
        order they were expected (or seen)."""
        chosen = list(calls) if calls is not None else (self.expected or list(self.calls))
        return [self.calls[c] for c in chosen if c in self.calls]

    def all_settled(self, *, decided: bool = False) -> bool:
        """Whether every expected call (every seen call when none is expected) is settled
        (``decided``: decided by the worker, dispatched counting)."""
        chosen = self.outcomes()
        if not chosen:
            return False
        return all(o.decided if decided else o.settled for o in chosen)

    # ------------------------------------------------------------------ the rules, per record

    def _from_result(self, current: Outcome, result: ExecutionResult) -> Outcome | None:
        if self.executor_group is not None and result.executor_group != self.executor_group:
            return None
        return replace(
            current,
            # an outcome this reader does not know may have acted: never told as not run
            kind=_RESULT_KIND.get(result.outcome, OutcomeKind.UNKNOWN),
            stage="dispatched",
            tool=result.tool,
            namespace=result.namespace,
            reason=result.reason,
            detail=result.detail,
            blocked_by=result.blocked_by,
            retry_possible=result.retry_possible,
            output=result.output if result.outcome is ExecutionOutcome.SUCCEEDED else None,
            dispatch_id=result.dispatch_id,
            executor_group=result.executor_group,
        )

    def _from_ledger(self, current: Outcome, ledger: Ledger) -> Outcome | None:
        named = replace(
            current,
            tool=ledger.tool or current.tool,
            namespace=ledger.namespace if ledger.tool else current.namespace,
            provider_reason=ledger.provider_reason,
        )
        reason = ledger.terminal_reason
        if ledger.state == "dispatched":
            return replace(named, stage="dispatched", dispatch_id=ledger.dispatch_id)
        if ledger.state == "cancelled":
            kind = OutcomeKind.VOIDED if reason in _VOIDING else OutcomeKind.CANCELLED
        elif ledger.state != "failed":  # a state this reader does not know settles nothing
            return None
        elif reason in _CANCELLING_FAILURES:
            kind = OutcomeKind.CANCELLED
        else:
            kind = OutcomeKind.REJECTED
        return replace(named, kind=kind, reason=reason or ledger.state)

    def _from_status(self, current: Outcome, status: Status) -> Outcome:
        stage = status.state.value
        if stage in ("cancelled", "failed"):  # the ledger (worker) or a result settles it
            stage = current.stage
        elif current.stage == "dispatched":
            stage = "dispatched"
        return replace(
            current,
            stage=stage,
            tool=current.tool or status.tool,
            message=status.message,
            retry_possible=status.retry_possible,
        )

    def _apply_audit(self, audit: Audit) -> bool:
        if (
            self.binding_command_id is None
            or audit.command_type != "turn.started"
            or audit.command_id != self.binding_command_id
            or audit.tenant != self.tenant
            or audit.outcome.value != "rejected"
            or self.binding_refused is not None
        ):
            return False
        self.binding_refused = audit.rejection or "rejected"
        self._refuse_undecided()
        return True

    def _refuse_undecided(self) -> None:
        for ident, outcome in self.calls.items():
            if not outcome.decided:
                self.calls[ident] = replace(
                    outcome,
                    kind=OutcomeKind.REJECTED,
                    reason="turn_binding_refused",
                    detail=self.binding_refused or "",
                )
