"""What the Assembler keeps of a call once it is terminal: a compact, immutable fact.

A terminal call (``dispatched``, ``cancelled``, ``failed``) never changes again, and nothing it
held is needed any more except to recognise it: a late or replayed event of the call is absorbed
(counted, never acted on), and a confirmation or a denial of it is refused as
``not_awaiting_confirmation``. So the open :class:`~processor.core.buffer.CallBuffer` (texts,
scanner, arguments, resolution, about 3 KiB) is replaced at the terminal by an :class:`InertCall`
of four fields, held in a table keyed by the call key's plain tuple (a tuple of five strings is a
third of a ``CallKey`` model). Its changelog value is the same four fields and the key.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from processor.core.states import CallState, TerminalReason

CallTuple = tuple[str, str, str, str, str]
"""A call key as its five strings: (tenant, turn_id, response_id, item_id, call_id)."""


class InertCall(NamedTuple):
    """A terminal call: its absorbing state, why it ended, its terminal event and when.

    ``last_ts`` is the latest own ``ts`` its events carried, or its end when later (a
    byte-identical replay of its events carries no later one): forgetting the call makes
    fragment events up to it stale. In the changelog value only when later than ``ended_at``
    (an event dated ahead of the worker's clock, within the skew allowance)."""

    state: CallState
    reason: TerminalReason | None
    terminal_event_id: str | None
    ended_at: float
    last_ts: float = 0.0

    def snapshot(self, key: CallTuple) -> dict[str, Any]:
        """The changelog value (readable by :meth:`CallBuffer.from_snapshot`'s reader too)."""
        return {
            "key": list(key),
            "state": self.state.value,
            "reason": self.reason.value if self.reason else None,
            "terminal_event_id": self.terminal_event_id,
            "ended_at": self.ended_at,
        } | ({"last_ts": self.last_ts} if self.last_ts > self.ended_at else {})

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> InertCall:
        """From a compact value, or from a full buffer snapshot of a terminal call (older logs).

        Raises ValueError or TypeError when the value does not describe a terminal call.
        """
        state = CallState(data["state"])
        if not state.absorbing:
            raise ValueError(f"{state.value} is not a terminal state")
        reason = TerminalReason(data["reason"]) if data.get("reason") else None
        event_id = data.get("terminal_event_id")
        if event_id is not None and not isinstance(event_id, str):
            raise TypeError("terminal_event_id is not a string")
        ended_at = float(data.get("ended_at") or 0.0)
        return cls(
            state, reason, event_id, ended_at, max(ended_at, float(data.get("last_ts") or 0))
        )


def call_tuple(value: Any) -> CallTuple:
    """A call key read back from a changelog value; ValueError when it is not five strings."""
    if not isinstance(value, list | tuple) or len(value) != 5:
        raise ValueError("a call key is five strings")
    if not all(isinstance(part, str) for part in value):
        raise ValueError("a call key is five strings")
    t, u, r, i, c = value
    return (t, u, r, i, c)
