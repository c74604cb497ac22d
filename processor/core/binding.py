"""Turn bindings, admission and validation on binding. No IO.

Owns ``turn.started`` (``on_turn_started``: binding a turn to its actor; an actor rebind is
refused), the turn-record bounds (``room_for_turn``: ``max_turns``, ``max_turns_per_tenant``; the
oldest turn without an open call of the tenant that pays by the fair-share rule is forgotten),
admission of a new call's buffer (``capacity_refusal``: per-tenant cap, and the fair-share
eviction when the partition is full), and ``try_validate``: once a terminal candidate's turn is
bound, one strict parse, the schema, business rules, the provider's final arguments, permission
and tool switches, then the gate (:func:`processor.core.gating.try_release`). How long a
candidate may wait for its binding is :mod:`processor.core.expiry`'s rule.

Must not apply control commands or fragments, and owns no state of its own: every function takes
the :class:`~processor.core.assembly_state.AssemblyState` it works on.
See :mod:`processor.core.assembly_state` for the parts and their order."""

from __future__ import annotations

from typing import Any

import orjson

from processor.core import outputs
from processor.core.assembly_state import AssemblyState
from processor.core.buffer import CallBuffer
from processor.core.control import turn_state_key
from processor.core.events import AuditOutcome, OutputRecord, TurnStarted
from processor.core.forgetting import terminate
from processor.core.gating import try_release
from processor.core.policy import fair_share_payers, permission
from processor.core.registry import ToolDeclaration, ValidationContext
from processor.core.states import CallState, TerminalReason, Trigger
from processor.core.validation import Rejected, validate_call

__all__ = [
    "capacity_refusal",
    "on_turn_started",
    "room_for_turn",
    "try_validate",
]


def capacity_refusal(
    state: AssemblyState, tenant: str, now: float, out: list[OutputRecord]
) -> TerminalReason | None:
    """Admit a new call of ``tenant``, or say why not (``buffer_limit``).

    A tenant holds at most ``max_open_buffers_per_tenant`` open buffers. When the partition
    holds ``max_open_buffers``, the call is still admitted if its tenant holds fewer than
    the largest holder: that holder's least recently active buffer fails ``buffer_limit``
    (audited in the ledger and status) to make room. So many tenants, or one, filling the
    partition cannot shut out a tenant holding less than they do; a tenant that is itself
    the largest holder is refused instead.
    """
    held = state.open_per_tenant.get(tenant, 0)
    if held >= state.limits.max_open_buffers_per_tenant:
        return TerminalReason.BUFFER_LIMIT
    if state.open_total < state.limits.max_open_buffers:
        return None
    payers = fair_share_payers(state.open_per_tenant, tenant)
    if payers == [tenant]:
        return TerminalReason.BUFFER_LIMIT
    victim = next(b for b in state.active.values() if b.key.tenant in payers)
    state.evictions += 1
    terminate(state, victim, TerminalReason.BUFFER_LIMIT, now, out)
    return None


def on_turn_started(
    state: AssemblyState, event: TurnStarted, now: float, out: list[OutputRecord]
) -> None:
    if state.control.turn(event.tenant, event.turn_id) is None and not room_for_turn(
        state, event.tenant
    ):
        out.append(outputs.audit(event, AuditOutcome.REJECTED, "turn_limit", [], now))
        return
    turn = state.control.ensure_turn(event.tenant, event.turn_id, now)
    if turn.actor is not None and turn.actor != event.actor:
        out.append(outputs.audit(event, AuditOutcome.REJECTED, "actor_rebind", [], now))
        return
    turn.actor, turn.session = event.actor, event.session
    state.mark(turn_state_key(event.tenant, event.turn_id))
    for buf in state.turn_calls(event.tenant, event.turn_id):
        if buf.state is CallState.TERMINAL_CANDIDATE:
            try_validate(state, buf, None, now, out)


def room_for_turn(state: AssemblyState, tenant: str) -> bool:
    """Make room for a new turn record of ``tenant`` within ``max_turns`` and
    ``max_turns_per_tenant``, which count the turns that are not cancelled (a cancellation
    is kept for safety and counts against nothing a tenant could be starved by): forget the
    oldest such turn without an open call of the tenant that pays by the fair-share rule
    (:func:`fair_share_payers`, as for open buffers: the tenant holding the most, or this
    tenant when it holds as much as any other or is at its own cap). False when none can
    go: the turn.started is refused (``turn_limit``)."""
    by_tenant = state.control.bindings_by_tenant
    if len(by_tenant.get(tenant, ())) >= state.limits.max_turns_per_tenant:
        return _forget_oldest_turn(state, tenant)
    if state.control.binding_count < state.limits.max_turns:
        return True
    return any(_forget_oldest_turn(state, t) for t in fair_share_payers(by_tenant, tenant))


def _forget_oldest_turn(state: AssemblyState, tenant: str) -> bool:
    turns = state.control.turns
    for turn_id in state.control.bindings_by_tenant.get(tenant, ()):
        # skipped: a turn with open calls, and one holding denials (a safety fact, kept)
        if (tenant, turn_id) not in state.active_by_turn and not turns[(tenant, turn_id)].denied:
            state.control.drop_turn(tenant, turn_id)
            state.mark(turn_state_key(tenant, turn_id))
            state.turn_evictions += 1
            return True
    return False


def try_validate(
    state: AssemblyState, buf: CallBuffer, text: bytes | None, now: float, out: list[OutputRecord]
) -> None:
    """Validate a terminal candidate once its turn is bound; then permission and dispatch."""
    turn = state.control.turn(buf.key.tenant, buf.key.turn_id)
    if turn is None or turn.actor is None:
        if buf.awaiting_binding_since is None:
            buf.awaiting_binding_since = now
            state.touch(buf)
        barrier, position = buf.barrier, state.control_position
        if barrier is not None and (position is None or position < barrier):
            state.unbound_lagging[buf.key] = barrier
        return
    state.unbound_lagging.pop(buf.key, None)
    registry = state.registry
    resolution = registry.resolve(buf.tool or "", buf.namespace)
    if resolution is None:
        namespace = buf.namespace
        unknown_namespace = namespace is not None and namespace not in registry.namespaces
        buf.validation_result = "unknown_namespace" if unknown_namespace else "unknown_tool"
        terminate(state, buf, TerminalReason.UNKNOWN_TOOL, now, out)
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
        terminate(state, buf, result.reason, now, out)
        return
    buf.parse_result, buf.validation_result = "ok", "ok"
    if buf.provider_arguments is not None and not _same_json(
        buf.provider_arguments, result.arguments
    ):
        terminate(state, buf, TerminalReason.ARGUMENTS_MISMATCH, now, out)
        return
    denied = permission(
        declaration, tenant=buf.key.tenant, call_actor=buf.actor or "", bound_actor=turn.actor
    )
    if denied is None and _tool_disabled(state, buf.key.tenant, declaration):
        denied = TerminalReason.TOOL_DISABLED
    if denied is not None:
        terminate(state, buf, denied, now, out)
        return
    buf.fire(Trigger.VALIDATE)
    buf.arguments, buf.args_digest = result.arguments, result.args_digest
    buf.awaiting_binding_since = None
    buf.validated_at = now
    state.drop_text(buf)  # the validated object is all we keep now
    state.enter_awaiting(buf)
    state.touch(buf)
    try_release(state, buf, now, out)


def _tool_disabled(state: AssemblyState, tenant: str, declaration: ToolDeclaration) -> bool:
    """Whether a switch for ``tenant`` (or every tenant) names the declared tool: by its
    name or an alias, in any namespace (a switch names no namespace)."""
    disabled = state.control.tool_disabled
    return any(disabled(tenant, n) for n in state.registry.switch_names(declaration))


def _same_json(provider_text: str, arguments: dict[str, Any]) -> bool:
    try:
        return bool(orjson.loads(provider_text) == arguments)
    except orjson.JSONDecodeError:
        return False
