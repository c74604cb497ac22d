"""The registry decides the confirmation rule of a handler that does not say it (issue 41,
item 6), shown by what the executor does on a real broker, not by which object it holds.

A handler registered without ``requires_confirmation`` takes its tool's rule from the registry:
where the registry requires a confirmation, a dispatch that names none is refused by the fence
(``confirmation_missing``) and the handler never runs; where it does not, the same dispatch runs.
"""

from __future__ import annotations

import pytest

from processor.core.registry import Registry
from tests.integration.conftest import Runtime, turn_started
from tests.integration.executor_harness import (
    Executor,
    Recorder,
    group_of,
    make_dispatch,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("requires", [True, False])
async def test_the_registry_decides_for_a_handler_that_does_not_say(
    runtime: Runtime, requires: bool
) -> None:
    registry = Registry.from_document(
        {
            "tools": [
                {
                    "name": "book_slot",
                    "version": "1",
                    "parameters": {"type": "object"},
                    "requires_confirmation": requires,
                }
            ]
        }
    )
    recorder = Recorder("book_slot", requires_confirmation=None)
    dispatch = make_dispatch("acme", "turn-1", "call_0", tool="book_slot")
    await runtime.control(turn_started("acme", "turn-1"))
    await write_dispatch(runtime, dispatch)
    executor = Executor(
        runtime.settings, recorder.handlers, group=group_of(runtime), registry=registry
    )
    async with running(executor):
        [result] = await wait_results(runtime.settings, 1)
    if requires:
        assert (result.outcome, result.reason) == ("refused", "confirmation_missing")
        assert recorder.dispatch_ids == []
    else:
        assert result.outcome == "succeeded"
        assert recorder.dispatch_ids == [dispatch.dispatch_id]
