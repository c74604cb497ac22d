"""Control state of one partition: turns, quarantines, disabled tools, stopped tenants, seen ids.

These facts outlive the calls they stop: a cancelled turn stays cancelled (absorbing), a
quarantined or ended response refuses its late events, a disabled tool or a stopped tenant refuses
new calls until enabled or resumed, and every command id is remembered so a replayed command is
refused. Everything here is plain data with a snapshot form for the state changelog; the
Assembler decides what to do with it.

**Command ids** (replay protection) are :mod:`processor.core.command_ids`'s; the table of seen
ids lives here (``seen_commands``) with the other facts.

**State keys** are ``kind:`` followed by :func:`~processor.core.events.encode_key` of the parts,
injective for any strings (a separator, quotes, U+001F or a lone surrogate inside an id cannot
make two keys meet or a key unreadable), so ``restore`` reads back exactly what was written.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, fields
from typing import Any

import orjson

from processor.core.command_ids import SeenCommand
from processor.core.events import decode_key, encode_key
from processor.core.states import TerminalReason

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(record: Any) -> dict[str, Any]:
    """The record's fields as a dict, in declaration order: what ``dataclasses.asdict`` gives
    for these records (their values are scalars), without its recursive deep copy."""
    cls = type(record)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(record))
    return {name: getattr(record, name) for name in names}


@dataclass(slots=True)
class TurnRecord:
    tenant: str
    turn_id: str
    actor: str | None = None  # the authenticated actor bound by turn.started
    session: str | None = None
    cancelled: str | None = None  # TerminalReason value once cancelled (absorbing)
    last_seen: float = 0.0
    # calls of this turn denied by ``call.denied``, whenever it was committed (before the call
    # exists, while it streams, while it waits): (response_id, item_id, call_id) -> command id.
    # A safety fact: a denied call never dispatches, and the turn is not forgotten early for
    # room while it holds one (only by retention, as a cancellation is).
    denied: dict[tuple[str, str, str], str] | None = None


@dataclass(slots=True)
class ResponseRecord:
    quarantined: bool = False
    ended: str | None = None  # TerminalReason value for calls that were still open
    last_seen: float = 0.0
    completed: bool = False  # ended with the provider's normal completion: its calls may act
    barrier: int | None = None  # control position to apply before its calls act (see Assembler)
    provider_reason: str | None = None  # the provider's stop reason as the adapter gave it

    def refusal(self, *, call_ended: bool = False) -> TerminalReason | None:
        """Why the response refuses a call event, if it does. ``ended`` is the reason of the
        calls still open when the response ended; a completed response does not refuse the
        events of a call that had ended before it (``call_ended``: a terminal candidate
        waiting for its binding): they are read again (a restore behind its input offsets, a
        reconnect replay) and are checked as duplicates of the call (chaos seed 5)."""
        if self.quarantined:
            return TerminalReason.QUARANTINED
        if not self.ended or (call_ended and self.completed):
            return None
        return TerminalReason(self.ended)


@dataclass(slots=True)
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
        # the turns that are not cancelled, per tenant, in the order their records were made
        # (oldest first): what max_turns* bound (a cancellation is kept for safety, uncounted)
        self.bindings_by_tenant: dict[str, OrderedDict[str, None]] = {}
        self.binding_count = 0
        self.responses: dict[tuple[str, str, str], ResponseRecord] = {}
        self.disabled_tools: dict[tuple[str, str], Flag] = {}  # (tenant or "*", tool)
        self.stopped_tenants: dict[str, Flag] = {}
        self.seen_commands: dict[str, SeenCommand] = {}  # by command_scope()
        self._unsorted = False  # turns/responses restored out of last_seen order
        # the same turns and responses per tenant, also in last_seen order: a tenant whose own
        # stale cutoff moves forgets its own records without walking other tenants'. These
        # orders (and the bindings') lose their oldest entries one at a time while the bounds
        # read the oldest: an OrderedDict finds its first entry at once, where a dict walks over
        # the holes its deletions left (a scan per eviction: quadratic under a flood)
        self._turns_by_tenant: dict[str, OrderedDict[tuple[str, str], None]] = {}
        self.responses_by_tenant: dict[str, OrderedDict[tuple[str, str, str], None]] = {}

    # -- reads ---------------------------------------------------------------------------

    def turn(self, tenant: str, turn_id: str) -> TurnRecord | None:
        return self.turns.get((tenant, turn_id))

    def ensure_turn(self, tenant: str, turn_id: str, now: float) -> TurnRecord:
        key = (tenant, turn_id)
        record = self.turns.pop(key, None)  # re-inserted last: the table stays in last_seen order
        if record is None:
            record = TurnRecord(tenant=tenant, turn_id=turn_id)
            self._add_turn(record)
        else:
            self.turns[key] = record
            self._turns_by_tenant[tenant].move_to_end(key)
        record.last_seen = max(record.last_seen, now)
        return record

    def _add_turn(self, record: TurnRecord) -> None:
        key = (record.tenant, record.turn_id)
        self.turns[key] = record
        self._turns_by_tenant.setdefault(record.tenant, OrderedDict())[key] = None
        if record.cancelled is None:
            self.bindings_by_tenant.setdefault(record.tenant, OrderedDict())[record.turn_id] = None
            self.binding_count += 1

    def drop_turn(self, tenant: str, turn_id: str) -> None:
        if self.turns.pop((tenant, turn_id), None) is not None:
            _drop_from(self._turns_by_tenant, tenant, (tenant, turn_id))
            self._unindex(tenant, turn_id)

    def cancel_turn(self, record: TurnRecord, reason: str) -> None:
        """Mark a turn cancelled (absorbing); it no longer counts against max_turns*."""
        record.cancelled = reason
        self._unindex(record.tenant, record.turn_id)

    def _unindex(self, tenant: str, turn_id: str) -> None:
        ids = self.bindings_by_tenant.get(tenant)
        if ids is None or turn_id not in ids:
            return
        del ids[turn_id]
        self.binding_count -= 1
        if not ids:
            del self.bindings_by_tenant[tenant]

    def response(self, tenant: str, turn_id: str, response_id: str) -> ResponseRecord | None:
        return self.responses.get((tenant, turn_id, response_id))

    def ensure_response(
        self, tenant: str, turn_id: str, response_id: str, now: float
    ) -> ResponseRecord:
        key = (tenant, turn_id, response_id)
        record = self.responses.pop(key, None)  # re-inserted last, as for turns
        order = self.responses_by_tenant.setdefault(tenant, OrderedDict())
        if record is None:
            record = ResponseRecord()
            order[key] = None
        else:
            order.move_to_end(key)
        self.responses[key] = record
        record.last_seen = max(record.last_seen, now)
        return record

    def _put_response(self, key: tuple[str, str, str], record: ResponseRecord | None) -> None:
        if self.responses.pop(key, None) is not None:
            _drop_from(self.responses_by_tenant, key[0], key)
        if record is not None:
            self.responses[key] = record
            self.responses_by_tenant.setdefault(key[0], OrderedDict())[key] = None

    def deny(self, record: TurnRecord, call: tuple[str, str, str], command_id: str) -> None:
        """Remember that ``call`` of the turn ``record`` is denied (the first denial stands)."""
        if record.denied is None:
            record.denied = {}
        record.denied.setdefault(call, command_id)

    def denial(self, tenant: str, turn_id: str, call: tuple[str, str, str]) -> str | None:
        """The command id that denied ``call`` of the turn, if one did."""
        turn = self.turns.get((tenant, turn_id))
        if turn is None or turn.denied is None:
            return None
        return turn.denied.get(call)

    def tool_disabled(self, tenant: str, tool: str) -> bool:
        return (tenant, tool) in self.disabled_tools or ("*", tool) in self.disabled_tools

    def refusal(
        self, tenant: str, turn_id: str, response_id: str | None, *, call_ended: bool = False
    ) -> TerminalReason | None:
        """Why a call event of this turn/response must not make progress, if it must not.

        ``call_ended``: the event is of a call that has had its terminal event (see
        :meth:`ResponseRecord.refusal`)."""
        if tenant in self.stopped_tenants:
            return TerminalReason.TENANT_STOPPED
        turn = self.turns.get((tenant, turn_id))  # self.turn(), inlined: once per fragment
        if turn is not None and turn.cancelled:
            return TerminalReason(turn.cancelled)
        if response_id is not None:
            response = self.responses.get((tenant, turn_id, response_id))
            if response is not None and (response.quarantined or response.ended):
                return response.refusal(call_ended=call_ended)
        return None

    # -- forgetting ----------------------------------------------------------------------

    def forget_turns(self, horizon: float, busy: Collection[tuple[str, str]]) -> list[Any]:
        """Drop the turns last seen before ``horizon`` that no open call holds; their keys.

        The table is kept in ``last_seen`` order (``ensure_turn`` re-inserts last; a restore
        sorts once), so this stops at the first turn seen since: O(forgotten + busy).
        """
        if self._unsorted:
            self._sort()
        gone = []
        for tk, turn in self.turns.items():
            if turn.last_seen >= horizon:
                break
            if tk not in busy:
                gone.append(tk)
        for tk in gone:
            self.drop_turn(*tk)
        return gone

    def forget_responses(self, horizon: float) -> list[Any]:
        """Drop the responses last seen before ``horizon``; their keys (as for turns)."""
        if self._unsorted:
            self._sort()
        gone = []
        for rk, response in self.responses.items():
            if response.last_seen >= horizon:
                break
            gone.append(rk)
        for rk in gone:
            self._put_response(rk, None)
        return gone

    def forget_tenant_turns(
        self, tenant: str, horizon: float, busy: Collection[tuple[str, str]]
    ) -> tuple[list[Any], bool]:
        """:meth:`forget_turns` for one tenant's turns only (its own stale cutoff moved); the
        keys, and whether a turn before ``horizon`` was kept because an open call holds it."""
        if self._unsorted:
            self._sort()
        gone, held = [], False
        for tk in self._turns_by_tenant.get(tenant, ()):
            if self.turns[tk].last_seen >= horizon:
                break
            if tk in busy:
                held = True
            else:
                gone.append(tk)
        for tk in gone:
            self.drop_turn(*tk)
        return gone, held

    def forget_tenant_responses(self, tenant: str, horizon: float) -> list[Any]:
        """:meth:`forget_responses` for one tenant's responses only."""
        if self._unsorted:
            self._sort()
        gone = []
        for rk in self.responses_by_tenant.get(tenant, ()):
            if self.responses[rk].last_seen >= horizon:
                break
            gone.append(rk)
        for rk in gone:
            self._put_response(rk, None)
        return gone

    def _sort(self) -> None:
        self.turns = dict(sorted(self.turns.items(), key=lambda kv: kv[1].last_seen))
        self.responses = dict(sorted(self.responses.items(), key=lambda kv: kv[1].last_seen))
        self._turns_by_tenant = {}
        for tk in self.turns:
            self._turns_by_tenant.setdefault(tk[0], OrderedDict())[tk] = None
        self.responses_by_tenant = {}
        for rk in self.responses:
            self.responses_by_tenant.setdefault(rk[0], OrderedDict())[rk] = None
        self._unsorted = False

    # -- persistence ---------------------------------------------------------------------

    def snapshot_entry(self, key: str) -> dict[str, Any] | None:
        """The changelog value of one state key (``None`` = deleted)."""
        kind, _, rest = key.partition(":")
        if kind == "turn":
            tenant, turn_id = decode_key(rest)
            turn = self.turns.get((tenant, turn_id))
            return _turn_value(turn) if turn else None
        if kind == "resp":
            t, u, r = decode_key(rest)
            response = self.responses.get((t, u, r))
            return _plain(response) if response else None
        if kind == "tool":
            tenant, tool = decode_key(rest)
            flag = self.disabled_tools.get((tenant, tool))
            return _plain(flag) if flag else None
        if kind == "tenant":
            [tenant] = decode_key(rest)
            flag = self.stopped_tenants.get(tenant)
            return _plain(flag) if flag else None
        if kind == "cmd":
            seen = self.seen_commands.get(rest)
            return _plain(seen) if seen is not None else None
        raise KeyError(key)

    def restore_entry(self, key: str, value: dict[str, Any] | None) -> None:
        kind, _, rest = key.partition(":")
        if value is not None and not isinstance(value, dict):
            raise TypeError(f"a {kind} record holds an object")
        if kind in ("turn", "resp"):
            self._unsorted = True
        if kind == "turn":
            tenant, turn_id = decode_key(rest)
            self.drop_turn(tenant, turn_id)
            if value:
                self._add_turn(_turn_from_value(value))
        elif kind == "resp":
            t, u, r = decode_key(rest)
            self._put_response((t, u, r), ResponseRecord(**value) if value else None)
        elif kind == "tool":
            tenant, tool = decode_key(rest)
            _put(self.disabled_tools, (tenant, tool), Flag(**value) if value else None)
        elif kind == "tenant":
            [tenant] = decode_key(rest)
            _put(self.stopped_tenants, tenant, Flag(**value) if value else None)
        elif kind == "cmd":
            _put(self.seen_commands, rest, SeenCommand(**value) if value else None)
        else:
            raise KeyError(key)


def _turn_value(turn: TurnRecord) -> dict[str, Any]:
    """A turn's changelog value; its denials as ``[response_id, item_id, call_id, command_id]``
    rows, and only when it has some (a turn without denials is written as before them)."""
    value = _plain(turn)
    denied = value.pop("denied")
    if denied:
        value["denied"] = [[*call, command_id] for call, command_id in denied.items()]
    return value


def _turn_from_value(value: dict[str, Any]) -> TurnRecord:
    """The turn a changelog value describes. Raises TypeError or ValueError on a value that is
    not one (a denial row that is not four strings included: a store that cannot say which
    calls are denied is not read as one that denies none)."""
    value = dict(value)
    rows = value.pop("denied", None)
    denied: dict[tuple[str, str, str], str] | None = None
    if rows is not None:
        if not isinstance(rows, list):
            raise TypeError("a turn's denials are a list")
        denied = {}
        for row in rows:
            if not (
                isinstance(row, list) and len(row) == 4 and all(isinstance(p, str) for p in row)
            ):
                raise ValueError("a turn's denial is four strings")
            denied[(row[0], row[1], row[2])] = row[3]
    return TurnRecord(**value, denied=denied or None)


def turn_state_key(tenant: str, turn_id: str) -> str:
    return "turn:" + encode_key((tenant, turn_id))


def response_state_key(tenant: str, turn_id: str, response_id: str) -> str:
    return "resp:" + encode_key((tenant, turn_id, response_id))


def tool_state_key(tenant: str | None, tool: str) -> str:
    return "tool:" + encode_key((tool_slot(tenant), tool))


def tool_slot(tenant: str | None) -> str:
    """The tenant slot of a tool switch: the tenant, or ``*`` for every tenant (no tenant is
    ``*``: the identifier alphabet of a tenant excludes it)."""
    return "*" if tenant is None else tenant


def tenant_state_key(tenant: str) -> str:
    return "tenant:" + encode_key((tenant,))


def command_state_key(scope: str) -> str:
    return "cmd:" + scope


def encode_state_value(value: Any) -> bytes:
    """A changelog value (orjson; never raises: a lone surrogate is written as an escape)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=True).encode("ascii")


def decode_state_value(data: bytes) -> Any:
    """A changelog value written by :func:`encode_state_value`."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _drop_from(index: dict[str, OrderedDict[Any, None]], tenant: str, key: Any) -> None:
    """Remove ``key`` from ``tenant``'s order, and the tenant once it holds nothing."""
    order = index.get(tenant)
    if order is not None:
        order.pop(key, None)
        if not order:
            del index[tenant]


def _put(table: dict[Any, Any], key: Any, value: Any) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
