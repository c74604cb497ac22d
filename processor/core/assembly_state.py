"""The Assembler's state and the indexes over it: every field, declared once. No IO.

Owns the attributes of one partition's Assembler (``__init__``: buffers, inert calls, control
state, the open-buffer indexes, the awaiting/held sets, the counters), the upkeep of the
open-buffer indexes (``_count`` / ``_uncount`` / ``_await``) and the marking of changed state keys
(``_mark``, ``_touch``, ``_mark_texts``) that :mod:`processor.core.changelog` drains. Also the
state-key helpers shared by the layers (``_call_state_key``, ``_text_key``, ``_parse_text_key``).

Must not decide anything: no event handling, no terminal transitions, no outputs. The fields are
set here only; each is changed by the layer that owns its rule.

The Assembler is one class built in layers, each module's class the base of the next (bottom
to top: ``assembly_state``, ``forgetting``, ``changelog``, ``gating``, ``binding``,
``control_commands``, ``fragments``, ``assembler``). A layer calls only itself and the layers
below it. They are layers of one object rather than collaborators because the state is genuinely
shared: every part reads and writes the same buffers, indexes and dirty-key set, and the
per-delta path must stay one attribute lookup on ``self`` (collaborator objects would need a
back-reference to all of it and forwarding calls on the hot path)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from processor.core.authn import CommandVerifier, NoKeyring
from processor.core.buffer import CallBuffer
from processor.core.control import ControlState
from processor.core.events import CallKey, decode_key, encode_key, trusted_call_key
from processor.core.inert import CallTuple, InertCall
from processor.core.policy import Limits
from processor.core.registry import Registry

__all__ = ["AssemblyState"]


class AssemblyState:
    """Owns the call buffers and control state of one partition (the fields and indexes)."""

    def __init__(
        self,
        registry: Registry,
        limits: Limits | None = None,
        *,
        verifier: CommandVerifier | None = None,
    ) -> None:
        self.registry = registry
        self.limits = limits or Limits()
        # never ``verifier or ...``: an empty keyring is falsy, and must not mean "unsigned ok"
        self.verifier: CommandVerifier = NoKeyring() if verifier is None else verifier
        self.calls: dict[CallKey, CallBuffer] = {}  # not yet terminal
        # the same buffers by key tuple: a tuple hashes and compares in C, a CallKey model in
        # Python, and the per-delta path looks a call up by the event's ids without a model
        self._live: dict[CallTuple, CallBuffer] = {}
        # terminal calls, compact (processor.core.inert), until retention or the count bound
        self.inert: dict[CallTuple, InertCall] = {}
        self.control = ControlState()
        self._dirty: set[str] = set()
        self._fresh: set[str] = set()  # text keys first written since the last drain
        # fragment events of a tenant dated at or before its cutoff are stale: the count bound
        # forgot a call of that tenant whose events carried ts up to it. Per tenant, so a tenant
        # stamping its own flood ahead of the clock cannot make another tenant's events stale.
        # Kept in the order they last moved (pruned from the front once retention covers them).
        self._stale_before: dict[str, float] = {}
        self._stale_moved: set[str] = set()  # tenants whose turns and responses to look at
        # the same for every tenant: only from a changelog written before cutoffs were per
        # tenant, or when more tenants hold a cutoff than the count bound allows (folded)
        self._evicted_before = 0.0
        # indexes over the open buffers only, so no hot path walks the inert ones
        self._active: dict[CallTuple, CallBuffer] = {}
        # (max bytes, max deltas) per declared tool name as written (None: no tool yet), for
        # the limits and registry they were computed from
        self._bounds: dict[str | tuple[str, str] | None, tuple[int, int]] = {}
        self._bounds_limits: Limits | None = None
        self._bounds_registry: Registry | None = None
        self._active_by_turn: dict[tuple[str, str], dict[CallKey, CallBuffer]] = {}
        self._open_per_tenant: dict[str, int] = {}
        self._open_total = 0
        # the byte_count of the buffers in ``_active``, kept as they change (a gauge the worker
        # reads every iteration: a sum over 10,000 open buffers would cost it milliseconds)
        self._buffered_bytes = 0
        self.evictions = 0  # open buffers failed to admit another tenant's call (fair share)
        self.turn_evictions = 0  # turn records forgotten to make room (max_turns*)
        self.response_evictions = 0  # response records forgotten to make room (max_responses)
        self._ended: deque[tuple[float, CallTuple]] = deque()  # in order of ended_at
        self._ended_sorted = True
        self._restored_texts: dict[CallKey, dict[int, str]] = {}  # texts seen before their call
        # validated calls waiting for their response's end or for the control barrier
        self._awaiting: dict[CallKey, CallBuffer] = {}
        self._awaiting_rank: dict[CallKey, int] = {}  # order of entry, to release in that order
        self._awaiting_seq = 0
        # of those, the ones held by the barrier only: key → (barrier, order of entry); and
        # the same as a heap of (barrier, order, push, key), so advancing control finds the calls
        # it frees without a scan (entries whose key left or moved on are skipped when popped;
        # ``push`` is unique, so keys are never compared)
        self._barrier_held: dict[CallKey, tuple[int, int]] = {}
        self._held_heap: list[tuple[int, int, int, CallKey]] = []
        self._held_seq = 0
        self._held_pushes = 0
        self._recheck_awaiting = False  # after a restore: look at every awaiting call once
        self._control_position: int | None = None  # how far this partition's control is applied
        # terminal candidates waiting for their turn's binding while control is not yet applied
        # up to their barrier (the binding may be there): key → barrier, about in barrier order
        self._unbound_lagging: dict[CallKey, int] = {}
        self.late_events = 0  # events for absorbing calls, ignored (a delivery condition)
        self.duplicate_deltas = 0

    def _count(self, buf: CallBuffer) -> None:
        """Index an open buffer and count it against the open-buffer limits until terminal."""
        buf.counted = True
        key = buf.key
        self._active[key.as_tuple] = buf
        self._active_by_turn.setdefault((key.tenant, key.turn_id), {})[key] = buf
        self._open_per_tenant[key.tenant] = self._open_per_tenant.get(key.tenant, 0) + 1
        self._open_total += 1
        self._buffered_bytes += buf.byte_count

    def _await(self, buf: CallBuffer) -> None:
        self._awaiting[buf.key] = buf
        self._awaiting_seq += 1
        self._awaiting_rank[buf.key] = self._awaiting_seq

    def _uncount(self, buf: CallBuffer) -> None:
        self._awaiting.pop(buf.key, None)
        self._awaiting_rank.pop(buf.key, None)
        self._barrier_held.pop(buf.key, None)
        self._unbound_lagging.pop(buf.key, None)
        if not buf.counted:
            return
        buf.counted = False
        key = buf.key
        del self._active[key.as_tuple]
        self._buffered_bytes -= buf.byte_count
        turn = self._active_by_turn[(key.tenant, key.turn_id)]
        del turn[key]
        if not turn:
            del self._active_by_turn[(key.tenant, key.turn_id)]
        self._open_total -= 1
        count = self._open_per_tenant[key.tenant] - 1
        if count > 0:
            self._open_per_tenant[key.tenant] = count
        else:
            del self._open_per_tenant[key.tenant]

    def _turn_calls(self, tenant: str, turn_id: str) -> list[CallBuffer]:
        """The open buffers of one turn (a copy: callers terminate while iterating)."""
        return list(self._active_by_turn.get((tenant, turn_id), {}).values())

    def _touch(self, buf: CallBuffer) -> None:
        self._mark(buf.state_key)

    def _drop_text(self, buf: CallBuffer) -> None:
        self._mark_texts(buf, buf.drop_text())

    def _mark_texts(self, buf: CallBuffer, positions: Iterable[int]) -> None:
        prefix = buf.text_key_prefix  # _text_key, inlined
        self._dirty.update([f"{prefix}{position}]" for position in positions])

    def _mark(self, key: str) -> None:
        self._dirty.add(key)

    def _declaration(self, buf: CallBuffer) -> Any:
        resolution = self.registry.resolve(buf.tool, buf.namespace) if buf.tool else None
        return resolution.declaration if resolution else None


_HORIZON_KEY = "meta:evicted_before"
_STALE_PREFIX = "meta:stale:"


def _stale_key(tenant: str) -> str:
    """The changelog key of one tenant's stale cutoff."""
    return _STALE_PREFIX + encode_key((tenant,))


def _call_state_key(key: CallTuple) -> str:
    return "call:" + encode_key(key)


def _text_key(buf: CallBuffer, position: int) -> str:
    """``"text:" + encode_key((*key, position))``, from the buffer's cached encoded key.

    Both forms of :func:`encode_key` end with ``]`` and write an int part as its digits, so
    appending the position to the encoded key gives the same text.
    """
    return f"{buf.text_key_prefix}{position}]"


def _parse_text_key(key: str) -> tuple[CallKey, int]:
    t, u, r, i, c, position = decode_key(key[5:])
    return _restored_key(t, u, r, i, c), int(position)


def _call_key(encoded: str) -> CallKey:
    t, u, r, i, c = decode_key(encoded)
    return _restored_key(t, u, r, i, c)


def _later(a: int | None, b: int | None) -> int | None:
    """The later of two barriers (None = no barrier)."""
    if a is None:
        return b
    return a if b is None else max(a, b)


def _restored_key(t: str, u: str, r: str, i: str, c: str) -> CallKey:
    """A call key read back from the changelog: it was validated when first seen."""
    return trusted_call_key(t, u, r, i, c)
