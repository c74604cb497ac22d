"""What a failed transaction leaves behind is settled, not reported as an unhandled error.

asyncio reports a future whose exception nobody retrieved when the future is collected, through
the loop's exception handler. These tests collect such futures on purpose and watch the handler.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from aiokafka.errors import KafkaConnectionError, ProducerFenced

from processor.kafka.clients import (
    ProducerDiscarded,
    ignore_fenced_leftovers,
    settle_unawaited,
)


def _reports(body: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: seen.append(context))
        await body(loop)
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(main())
    return seen


def test_a_dropped_failed_future_is_reported_without_settling() -> None:
    """The control: without settling, asyncio does report it (so the next test can fail)."""

    async def body(loop: asyncio.AbstractEventLoop) -> None:
        future: asyncio.Future[None] = loop.create_future()
        future.set_exception(ProducerFenced())
        del future

    assert [c["message"] for c in _reports(body)] == ["Future exception was never retrieved"]


def test_settled_futures_are_not_reported_done_or_pending() -> None:
    async def body(loop: asyncio.AbstractEventLoop) -> None:
        done: asyncio.Future[None] = loop.create_future()
        done.set_exception(ProducerFenced())
        pending: asyncio.Future[None] = loop.create_future()
        cancelled: asyncio.Future[None] = loop.create_future()
        cancelled.cancel()
        settle_unawaited([done, pending, cancelled])
        pending.set_exception(KafkaConnectionError())  # fails after being settled
        await asyncio.sleep(0)  # the done callback runs
        del done, pending, cancelled

    assert _reports(body) == []


def test_the_loop_handler_drops_only_a_fenced_producers_futures() -> None:
    forwarded: list[dict[str, Any]] = []

    class Loop(asyncio.SelectorEventLoop):
        def default_exception_handler(self, context: dict[str, Any]) -> None:
            forwarded.append(context)

    loop = Loop()
    try:
        never = "Future exception was never retrieved"
        ignore_fenced_leftovers(loop, {"message": never, "exception": ProducerFenced()})
        ignore_fenced_leftovers(loop, {"message": never, "exception": ProducerDiscarded()})
        assert forwarded == []
        other = {"message": never, "exception": KafkaConnectionError()}
        ignore_fenced_leftovers(loop, other)
        crash = {"message": "Task exception was never retrieved", "exception": ProducerFenced()}
        ignore_fenced_leftovers(loop, crash)
        assert forwarded == [other, crash]
    finally:
        loop.close()
