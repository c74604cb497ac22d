"""Turn bindings, admission and validation on binding. No IO.

Owns ``turn.started`` (binding a turn to its actor; an actor rebind is refused), the turn-record
bounds (``max_turns``, ``max_turns_per_tenant``: the oldest turn without an open call of the
tenant that pays by the fair-share rule is forgotten), admission of a new call's buffer
(``_capacity_refusal``: per-tenant cap, and the fair-share eviction when the partition is full),
and ``_try_validate``: once a terminal candidate's turn is bound, one strict parse, the schema,
business rules, the provider's final arguments, permission and tool switches, then the gate.

Must not apply control commands or fragments, and owns no state of its own. See
:mod:`processor.core.assembly_state` for why this is a layer of one class."""

from __future__ import annotations

from typing import Any

import orjson

from processor.core import outputs
from processor.core.buffer import CallBuffer
from processor.core.control import turn_state_key
from processor.core.events import AuditOutcome, OutputRecord, TurnStarted
from processor.core.gating import ResponseGate
from processor.core.policy import fair_share_payers, permission
from processor.core.registry import ToolDeclaration, ValidationContext
from processor.core.states import CallState, TerminalReason, Trigger
from processor.core.validation import Rejected, validate_call

__all__ = ["TurnBinding"]


class TurnBinding(ResponseGate):
    """Binds turns, admits new calls by fair share, validates calls once bound."""

    def _capacity_refusal(
        self, tenant: str, now: float, out: list[OutputRecord]
    ) -> TerminalReason | None:
        """Admit a new call of ``tenant``, or say why not (``buffer_limit``).

        A tenant holds at most ``max_open_buffers_per_tenant`` open buffers. When the partition
        holds ``max_open_buffers``, the call is still admitted if its tenant holds fewer than
        the largest holder: that holder's least recently active buffer fails ``buffer_limit``
        (audited in the ledger and status) to make room. So many tenants, or one, filling the
        partition cannot shut out a tenant holding less than they do; a tenant that is itself
        the largest holder is refused instead.
        """
        held = self._open_per_tenant.get(tenant, 0)
        if held >= self.limits.max_open_buffers_per_tenant:
            return TerminalReason.BUFFER_LIMIT
        if self._open_total < self.limits.max_open_buffers:
            return None
        payers = fair_share_payers(self._open_per_tenant, tenant)
        if payers == [tenant]:
            return TerminalReason.BUFFER_LIMIT
        victim = next(b for b in self._active.values() if b.key.tenant in payers)
        self.evictions += 1
        self._terminate(victim, TerminalReason.BUFFER_LIMIT, now, out)
        return None

    def _on_turn_started(self, event: TurnStarted, now: float, out: list[OutputRecord]) -> None:
        if self.control.turn(event.tenant, event.turn_id) is None and not self._room_for_turn(
            event.tenant
        ):
            out.append(outputs.audit(event, AuditOutcome.REJECTED, "turn_limit", [], now))
            return
        turn = self.control.ensure_turn(event.tenant, event.turn_id, now)
        if turn.actor is not None and turn.actor != event.actor:
            out.append(outputs.audit(event, AuditOutcome.REJECTED, "actor_rebind", [], now))
            return
        turn.actor, turn.session = event.actor, event.session
        self._mark(turn_state_key(event.tenant, event.turn_id))
        for buf in self._turn_calls(event.tenant, event.turn_id):
            if buf.state is CallState.TERMINAL_CANDIDATE:
                self._try_validate(buf, None, now, out)

    def _room_for_turn(self, tenant: str) -> bool:
        """Make room for a new turn record of ``tenant`` within ``max_turns`` and
        ``max_turns_per_tenant``, which count the turns that are not cancelled (a cancellation
        is kept for safety and counts against nothing a tenant could be starved by): forget the
        oldest such turn without an open call of the tenant that pays by the fair-share rule
        (:func:`fair_share_payers`, as for open buffers: the tenant holding the most, or this
        tenant when it holds as much as any other or is at its own cap). False when none can
        go: the turn.started is refused (``turn_limit``)."""
        by_tenant = self.control.bindings_by_tenant
        if len(by_tenant.get(tenant, ())) >= self.limits.max_turns_per_tenant:
            return self._forget_oldest_turn(tenant)
        if self.control.binding_count < self.limits.max_turns:
            return True
        return any(self._forget_oldest_turn(t) for t in fair_share_payers(by_tenant, tenant))

    def _forget_oldest_turn(self, tenant: str) -> bool:
        turns = self.control.turns
        for turn_id in self.control.bindings_by_tenant.get(tenant, ()):
            # skipped: a turn with open calls, and one holding denials (a safety fact, kept)
            if (tenant, turn_id) not in self._active_by_turn and not turns[
                (tenant, turn_id)
            ].denied:
                self.control.drop_turn(tenant, turn_id)
                self._mark(turn_state_key(tenant, turn_id))
                self.turn_evictions += 1
                return True
        return False

    def _binding_expired(self, buf: CallBuffer, now: float, control_end: int | None) -> bool:
        """Whether an unbound terminal candidate has waited for its turn's binding too long.

        The wait (``binding_wait_seconds`` from when the candidate found its turn unbound) is
        counted on the clock, but a clock says nothing of what this worker has read: after an
        outage or a rebuild the ``turn.started`` may have sat in ``control`` all along, unread.
        So when control is read apart from fragments (the runtime gives ``tick`` control's end,
        or applies control positions), the call fails closed only once control is applied up to
        its ``binding_fence``: control's end as read after the wait ran out. Every binding
        written before the wait ran out has then been applied (and would have bound the call);
        only one written after it can come too late. A worker that cannot read control's end,
        or does not know how far control is applied, expires nothing for want of a binding.
        With neither (offline replay, one ordered stream in which control is applied as it is
        read), the clock alone.
        """
        since = buf.awaiting_binding_since
        if since is None or now - since <= self.limits.binding_wait_seconds:
            return False
        if buf.binding_fence is None and control_end is not None:
            buf.binding_fence = control_end  # read at ``now`` or later: after the wait ran out
        position = self._control_position
        if buf.binding_fence is None:
            return position is None
        return position is not None and position >= buf.binding_fence

    def _try_validate(
        self, buf: CallBuffer, text: bytes | None, now: float, out: list[OutputRecord]
    ) -> None:
        """Validate a terminal candidate once its turn is bound; then permission and dispatch."""
        turn = self.control.turn(buf.key.tenant, buf.key.turn_id)
        if turn is None or turn.actor is None:
            if buf.awaiting_binding_since is None:
                buf.awaiting_binding_since = now
                self._touch(buf)
            barrier, position = buf.barrier, self._control_position
            if barrier is not None and (position is None or position < barrier):
                self._unbound_lagging[buf.key] = barrier
            return
        self._unbound_lagging.pop(buf.key, None)
        registry = self.registry
        resolution = registry.resolve(buf.tool or "", buf.namespace)
        if resolution is None:
            namespace = buf.namespace
            unknown_namespace = namespace is not None and namespace not in registry.namespaces
            buf.validation_result = "unknown_namespace" if unknown_namespace else "unknown_tool"
            self._terminate(buf, TerminalReason.UNKNOWN_TOOL, now, out)
            return
        declaration = resolution.declaration
        buf.tool_name, buf.tool_version = declaration.name, declaration.version
        buf.alias_used = resolution.alias_used
        if declaration.namespace != buf.namespace:  # called by its flattened name
            buf.tool_namespace = declaration.namespace
        if text is None:
            text = buf.text()
        actor = turn.actor

        def ctx() -> ValidationContext:  # made only for a tool with business validators
            return ValidationContext(
                tenant=buf.key.tenant,
                turn_id=buf.key.turn_id,
                actor=actor,
                tool=declaration.name,
                tool_version=declaration.version,
                namespace=declaration.namespace,
            )

        result = validate_call(text, declaration, ctx)
        if isinstance(result, Rejected):
            buf.parse_result, buf.validation_result = result.parse_result, result.validation_result
            self._terminate(buf, result.reason, now, out)
            return
        buf.parse_result, buf.validation_result = "ok", "ok"
        if buf.provider_arguments is not None and not _same_json(
            buf.provider_arguments, result.arguments
        ):
            self._terminate(buf, TerminalReason.ARGUMENTS_MISMATCH, now, out)
            return
        denied = permission(
            declaration, tenant=buf.key.tenant, call_actor=buf.actor or "", bound_actor=turn.actor
        )
        if denied is None and self._tool_disabled(buf.key.tenant, declaration):
            denied = TerminalReason.TOOL_DISABLED
        if denied is not None:
            self._terminate(buf, denied, now, out)
            return
        buf.fire(Trigger.VALIDATE)
        buf.arguments, buf.args_digest = result.arguments, result.args_digest
        buf.awaiting_binding_since = None
        buf.validated_at = now
        self._drop_text(buf)  # the validated object is all we keep now
        self._await(buf)
        self._touch(buf)
        self._try_release(buf, now, out)

    def _tool_disabled(self, tenant: str, declaration: ToolDeclaration) -> bool:
        """Whether a switch for ``tenant`` (or every tenant) names the declared tool: by its
        name or an alias, in any namespace (a switch names no namespace)."""
        disabled = self.control.tool_disabled
        return any(disabled(tenant, n) for n in self.registry.switch_names(declaration))


def _same_json(provider_text: str, arguments: dict[str, Any]) -> bool:
    try:
        return bool(orjson.loads(provider_text) == arguments)
    except orjson.JSONDecodeError:
        return False
