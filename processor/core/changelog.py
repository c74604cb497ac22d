"""Changelog tracking: the state records the runtime writes, and rebuilding state from them.

Owns ``drain_changes`` (the keys marked since the last drain, as :class:`StateChange` records,
written in the same transaction as the outputs), the snapshot of one key, and ``restore`` (apply
one changelog record, last one per key wins; an unreadable record is skipped and reported), each
over the :class:`~processor.core.assembly_state.AssemblyState` it is given.

Must not make decisions or emit outputs: restoring rebuilds the indexes, and flags awaiting calls
for one re-check (``recheck_awaiting``) that :mod:`processor.core.gating` does.
See :mod:`processor.core.assembly_state` for the parts and their order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from processor.core.assembly_state import (
    _HORIZON_KEY,
    _STALE_PREFIX,
    AssemblyState,
    _call_key,
    _parse_text_key,
    _restored_key,
)
from processor.core.buffer import CallBuffer
from processor.core.control import decode_state_value, encode_state_value
from processor.core.events import decode_key
from processor.core.inert import InertCall, call_tuple
from processor.core.states import CallState

__all__ = ["StateChange", "drain_changes", "restore"]


@dataclass(frozen=True)
class StateChange:
    """One changelog record: a state key and its new value (``None`` deletes it)."""

    key: str
    value: bytes | None


def drain_changes(state: AssemblyState) -> list[StateChange]:
    """The state records changed since the last drain, for the changelog topic."""
    changes = []
    for key in sorted(state.dirty):
        value = _snapshot_entry(state, key)
        if value is None and key in state.fresh:
            continue  # written and dropped between two drains: never in the changelog
        encoded = encode_state_value(value) if value is not None else None
        changes.append(StateChange(key, encoded))
    state.dirty.clear()
    state.fresh.clear()
    return changes


def _snapshot_entry(state: AssemblyState, key: str) -> Any:
    if key.startswith("call:"):
        call_key = _call_key(key[5:])
        buf = state.calls.get(call_key)
        if buf is not None:
            return buf.snapshot()
        inert = state.inert.get(call_key.as_tuple)
        return inert.snapshot(call_key.as_tuple) if inert else None
    if key == _HORIZON_KEY:
        return {"evicted_before": state.evicted_before} if state.evicted_before else None
    if key.startswith(_STALE_PREFIX):
        [tenant] = decode_key(key[len(_STALE_PREFIX) :])
        before = state.stale_cutoffs.get(tenant)
        return {"before": before} if before is not None else None
    if key.startswith("text:"):
        call_key, position = _parse_text_key(key)
        buf = state.calls.get(call_key)
        return buf.texts.get(position) if buf else None
    return state.control.snapshot_entry(key)


def restore(state: AssemblyState, key: str, value: bytes | None) -> str | None:
    """Apply one changelog record (the last one per key wins, as in a compacted topic).

    Returns None, or why the record was skipped: a key or value this version cannot read
    (a damaged or foreign record) changes nothing; the runtime logs and counts it.
    """
    try:
        data = decode_state_value(value) if value is not None else None
        _restore(state, key, data)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        # the type only: a message could quote a key or a value (argument text)
        return f"unreadable record ({type(exc).__name__})"
    return None


def _restore(state: AssemblyState, key: str, data: Any) -> None:
    if key.startswith("text:"):
        call_key, position = _parse_text_key(key)
        owner = state.calls.get(call_key)
        if data is not None and not isinstance(data, str):
            raise TypeError("a text record holds a string")
        if owner is not None:
            texts = owner.texts
        elif data is None:  # a text dropped after its call ended: nothing to keep
            held = state.restored_texts.get(call_key)
            if held is not None:
                held.pop(position, None)
                if not held:
                    del state.restored_texts[call_key]
            return
        else:
            texts = state.restored_texts.setdefault(call_key, {})
        if data is None:
            texts.pop(position, None)
        else:
            texts[position] = data
        return
    if key.startswith("call:"):
        parts = call_tuple(decode_key(key[5:]))
        if data is not None and not isinstance(data, dict):
            raise TypeError("a call record holds an object")
        inert: InertCall | None = None
        buf: CallBuffer | None = None
        if data is not None:
            if call_tuple(data.get("key")) != parts:
                raise ValueError("the value names another call than the key")
            skew = state.limits.max_clock_skew_seconds
            if CallState(data["state"]).absorbing:
                inert = InertCall.from_snapshot(data)
            else:
                buf = CallBuffer.from_snapshot(data)
                buf.last_ts = (buf.last_activity or 0.0) + skew
        # a CallKey model only when a live buffer or held texts may exist (restores of
        # terminal calls are the bulk of a long changelog: no model for each)
        live_key = _restored_key(*parts) if state.calls or state.restored_texts else None
        old = state.calls.pop(live_key, None) if live_key is not None else None
        state.live.pop(parts, None)
        if old is not None:
            state.uncount(old)
        state.inert.pop(parts, None)
        if inert is not None:
            if live_key is not None:
                state.restored_texts.pop(live_key, None)
            state.inert[parts] = inert
            state.ended.append((inert.ended_at, parts))
            state.ended_sorted = False
        elif buf is not None:
            live_key = buf.key
            buf.texts = old.texts if old else state.restored_texts.pop(live_key, {})
            state.calls[live_key] = buf
            state.live[live_key.as_tuple] = buf
            state.count(buf)
            if buf.state is CallState.AWAITING_RESPONSE:
                state.enter_awaiting(buf)
                state.recheck_awaiting = True
        return
    if key == _HORIZON_KEY:
        before = 0.0 if data is None else float(data["evicted_before"])
        state.evicted_before = before
        return
    if key.startswith(_STALE_PREFIX):
        [tenant] = decode_key(key[len(_STALE_PREFIX) :])
        if not isinstance(tenant, str):
            raise TypeError("a stale cutoff names a tenant")
        state.stale_cutoffs.pop(tenant, None)
        if data is not None:
            state.stale_cutoffs[tenant] = float(data["before"])
            state.stale_moved.add(tenant)  # its turns are looked at once more
        else:
            state.stale_moved.discard(tenant)
        return
    state.control.restore_entry(key, data)
