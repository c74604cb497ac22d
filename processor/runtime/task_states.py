"""A partition task's states, its triggers and the one transition table.

A :class:`~processor.runtime.partition.PartitionTask` is ``preparing`` (being fenced, restored and
sought, its input partitions paused), ``ready`` (its batches are built and committed) or
``closed`` (revoked or shut down). Everything that decides how that state may change lives here,
as data, like the call state machine's table (:mod:`processor.core.states`): a (state, trigger)
pair absent from :data:`TASK_TRANSITIONS` raises
:class:`~processor.core.errors.InvalidTransition`, and ``closed`` is absorbing (closing again is
allowed and changes nothing), so a revoked partition is never prepared or made ready again. The
task holds its state read-only and changes it only through :func:`next_task_state`.
"""

from __future__ import annotations

import enum
from typing import Final

from processor.core.errors import InvalidTransition


class TaskState(enum.Enum):
    PREPARING = "preparing"
    READY = "ready"
    CLOSED = "closed"


class TaskTrigger(enum.StrEnum):
    PREPARE = "prepare"  # a preparation starts (PartitionTask.prepare: on assignment, on a retry)
    PREPARED = "prepared"  # the preparation returned: the manager resumes the partition
    RESET = "reset"  # a transaction failed: the manager prepares the partition again
    CLOSE = "close"  # revoked, reassigned or shut down


_S = TaskState
_T = TaskTrigger

TASK_TRANSITIONS: Final[dict[TaskState, dict[TaskTrigger, TaskState]]] = {
    _S.PREPARING: {
        _T.PREPARE: _S.PREPARING,  # a retry of a failed preparation
        _T.PREPARED: _S.READY,
        _T.RESET: _S.PREPARING,
        _T.CLOSE: _S.CLOSED,
    },
    _S.READY: {
        _T.PREPARE: _S.PREPARING,
        _T.RESET: _S.PREPARING,
        _T.CLOSE: _S.CLOSED,
    },
    _S.CLOSED: {
        _T.CLOSE: _S.CLOSED,
    },
}


def next_task_state(state: TaskState, trigger: TaskTrigger) -> TaskState:
    """The state after ``trigger`` in ``state``; raises InvalidTransition when not allowed."""
    try:
        return TASK_TRANSITIONS[state][trigger]
    except KeyError:
        raise InvalidTransition(
            detail=f"partition task: {trigger.value} is not allowed in {state.value}"
        ) from None
