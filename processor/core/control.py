"""Control state of one partition: turns, quarantines, disabled tools, stopped tenants, seen ids.

These facts outlive the calls they stop: a cancelled turn stays cancelled (absorbing), a
quarantined or ended response refuses its late events, a disabled tool or a stopped tenant refuses
new calls until enabled or resumed, and every command id is remembered so a replayed command is
refused. Everything here is plain data with a snapshot form for the state changelog; the
Assembler decides what to do with it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from processor.core.states import TerminalReason


@dataclass
class TurnRecord:
    tenant: str
    turn_id: str
    actor: str | None = None  # the authenticated actor bound by turn.started
    session: str | None = None
    cancelled: str | None = None  # TerminalReason value once cancelled (absorbing)
    last_seen: float = 0.0


@dataclass
class ResponseRecord:
    quarantined: bool = False
    ended: str | None = None  # TerminalReason value for calls that were still open
    last_seen: float = 0.0
    completed: bool = False  # ended with the provider's normal completion: its calls may act
    barrier: int | None = None  # control position to apply before its calls act (see Assembler)
    provider_reason: str | None = None  # the provider's stop reason as the adapter gave it

    def refusal(self) -> TerminalReason | None:
        if self.quarantined:
            return TerminalReason.QUARANTINED
        return TerminalReason(self.ended) if self.ended else None


@dataclass
class Flag:
    """An operator switch (tool disabled, tenant stopped) with the command that set it."""

    command_id: str
    reason: str
    set_at: float


def cancel_reason(reason: str) -> TerminalReason:
    """The terminal reason for a turn.cancelled reason (free-form ones are ``turn_cancelled``)."""
    try:
        parsed = TerminalReason(reason)
    except ValueError:
        return TerminalReason.TURN_CANCELLED
    allowed = (TerminalReason.USER_STOP, TerminalReason.SUPERSEDED, TerminalReason.CONNECTION_LOST)
    return parsed if parsed in allowed else TerminalReason.TURN_CANCELLED


class ControlState:
    """The control facts of one partition, with change tracking for the changelog."""

    def __init__(self) -> None:
        self.turns: dict[tuple[str, str], TurnRecord] = {}
        self.responses: dict[tuple[str, str, str], ResponseRecord] = {}
        self.disabled_tools: dict[tuple[str, str], Flag] = {}  # (tenant or "*", tool)
        self.stopped_tenants: dict[str, Flag] = {}
        self.seen_commands: dict[str, float] = {}

    # -- reads ---------------------------------------------------------------------------

    def turn(self, tenant: str, turn_id: str) -> TurnRecord | None:
        return self.turns.get((tenant, turn_id))

    def ensure_turn(self, tenant: str, turn_id: str, now: float) -> TurnRecord:
        key = (tenant, turn_id)
        record = self.turns.get(key)
        if record is None:
            record = self.turns[key] = TurnRecord(tenant=tenant, turn_id=turn_id)
        record.last_seen = max(record.last_seen, now)
        return record

    def response(self, tenant: str, turn_id: str, response_id: str) -> ResponseRecord | None:
        return self.responses.get((tenant, turn_id, response_id))

    def ensure_response(
        self, tenant: str, turn_id: str, response_id: str, now: float
    ) -> ResponseRecord:
        key = (tenant, turn_id, response_id)
        record = self.responses.get(key)
        if record is None:
            record = self.responses[key] = ResponseRecord()
        record.last_seen = max(record.last_seen, now)
        return record

    def tool_disabled(self, tenant: str, tool: str) -> bool:
        return (tenant, tool) in self.disabled_tools or ("*", tool) in self.disabled_tools

    def refusal(self, tenant: str, turn_id: str, response_id: str | None) -> TerminalReason | None:
        """Why a call event of this turn/response must not make progress, if it must not."""
        if tenant in self.stopped_tenants:
            return TerminalReason.TENANT_STOPPED
        turn = self.turn(tenant, turn_id)
        if turn is not None and turn.cancelled:
            return TerminalReason(turn.cancelled)
        if response_id is not None:
            response = self.response(tenant, turn_id, response_id)
            if response is not None:
                return response.refusal()
        return None

    # -- persistence ---------------------------------------------------------------------

    def snapshot_entry(self, key: str) -> dict[str, Any] | None:
        """The changelog value of one state key (``None`` = deleted)."""
        kind, _, rest = key.partition(":")
        if kind == "turn":
            tenant, _, turn_id = rest.partition("\x1f")
            turn = self.turns.get((tenant, turn_id))
            return asdict(turn) if turn else None
        if kind == "resp":
            t, u, r = _split3(rest)
            response = self.responses.get((t, u, r))
            return asdict(response) if response else None
        if kind == "tool":
            tenant, _, tool = rest.partition("\x1f")
            flag = self.disabled_tools.get((tenant, tool))
            return asdict(flag) if flag else None
        if kind == "tenant":
            flag = self.stopped_tenants.get(rest)
            return asdict(flag) if flag else None
        if kind == "cmd":
            seen = self.seen_commands.get(rest)
            return {"at": seen} if seen is not None else None
        raise KeyError(key)

    def restore_entry(self, key: str, value: dict[str, Any] | None) -> None:
        kind, _, rest = key.partition(":")
        if kind == "turn":
            tenant, _, turn_id = rest.partition("\x1f")
            _put(self.turns, (tenant, turn_id), TurnRecord(**value) if value else None)
        elif kind == "resp":
            _put(self.responses, _split3(rest), ResponseRecord(**value) if value else None)
        elif kind == "tool":
            tenant, _, tool = rest.partition("\x1f")
            _put(self.disabled_tools, (tenant, tool), Flag(**value) if value else None)
        elif kind == "tenant":
            _put(self.stopped_tenants, rest, Flag(**value) if value else None)
        elif kind == "cmd":
            _put(self.seen_commands, rest, float(value["at"]) if value else None)
        else:
            raise KeyError(key)


def turn_state_key(tenant: str, turn_id: str) -> str:
    return "turn:" + tenant + "\x1f" + turn_id


def response_state_key(tenant: str, turn_id: str, response_id: str) -> str:
    return "resp:" + "\x1f".join((tenant, turn_id, response_id))


def tool_state_key(tenant: str | None, tool: str) -> str:
    return "tool:" + (tenant or "*") + "\x1f" + tool


def _split3(rest: str) -> tuple[str, str, str]:
    a, b, c = rest.split("\x1f")
    return a, b, c


def _put(table: dict[Any, Any], key: Any, value: Any) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
