"""The partition task's states change only through their table (issue 41, item 1).

``TaskState`` was assigned from two modules (the task and the partition manager), with no
table saying which changes are allowed: a closed (revoked) task could be set preparing again by
a late ``prepare``. Now the task holds its state read-only and every change goes through
:data:`~processor.runtime.task_states.TASK_TRANSITIONS`, like the calls' table.
"""

from __future__ import annotations

import pytest

from processor.core.assembler import Assembler
from processor.core.errors import InvalidTransition
from processor.runtime.partition import PartitionTask, TaskState
from processor.runtime.task_states import TASK_TRANSITIONS, TaskTrigger, next_task_state
from processor.settings import Settings
from tests.unit.scenario import registry


def _task() -> PartitionTask:
    settings = Settings(bootstrap_servers="127.0.0.1:1", topic_prefix="t.")
    return PartitionTask(0, settings, lambda: Assembler(registry()))


def test_every_state_and_trigger_is_decided_by_the_table() -> None:
    assert set(TASK_TRANSITIONS) == set(TaskState)
    for state in TaskState:
        for trigger in TaskTrigger:
            target = TASK_TRANSITIONS[state].get(trigger)
            if target is None:
                with pytest.raises(InvalidTransition):
                    next_task_state(state, trigger)
            else:
                assert next_task_state(state, trigger) is target


def test_closed_is_absorbing() -> None:
    assert TASK_TRANSITIONS[TaskState.CLOSED] == {TaskTrigger.CLOSE: TaskState.CLOSED}


def test_ready_only_from_a_preparation_that_returned() -> None:
    edges = [
        (source, trigger)
        for source, table in TASK_TRANSITIONS.items()
        for trigger, target in table.items()
        if target is TaskState.READY
    ]
    assert edges == [(TaskState.PREPARING, TaskTrigger.PREPARED)]


def test_the_state_is_not_assignable() -> None:
    task = _task()
    with pytest.raises(AttributeError):
        task.state = TaskState.READY  # type: ignore[misc]
    assert task.state is TaskState.PREPARING


async def test_a_closed_task_is_never_prepared_again() -> None:
    """A preparation of a revoked task fails before it touches anything, and the task stays
    closed (before: ``prepare`` set it preparing, then went on to fence)."""
    task = _task()
    await task.close()
    with pytest.raises(InvalidTransition):
        await task.prepare(object())  # not even read: the table refuses first
    assert task.state is TaskState.CLOSED
