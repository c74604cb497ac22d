"""An async client kept on an event loop of its own, in a daemon thread, for synchronous code.

Owns :class:`BackgroundLoop`: the loop and its thread, :meth:`~BackgroundLoop.run` (a
coroutine on that loop, blocking the caller until it ends), :meth:`~BackgroundLoop.start` (make
the client with its factory on the loop and start it) and :meth:`~BackgroundLoop.stop` (stop
the client, then the loop). The blocking forms of the library's long-lived clients are made of
one: :class:`processor.kafka.publish.BlockingPublisher`,
:class:`processor.agent.follower.BlockingOutcomeFollower`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["BackgroundLoop"]

_T = TypeVar("_T")


class _Client(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


_C = TypeVar("_C", bound=_Client)


class BackgroundLoop(Generic[_C]):
    """One client made by ``make`` and started on a loop in a thread named ``name``."""

    def __init__(self, name: str, make: Callable[[], _C]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._make = make
        self.client: _C | None = None
        """The started client (None before :meth:`start` and after :meth:`stop`)."""

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the loop; block until it ends and return (or raise) what it did."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def start(self) -> _C:
        """Start the loop's thread, then make and start the client on it. On a failure the
        loop is stopped again and the error raised."""
        self._thread.start()

        async def make() -> _C:
            client = self._make()
            await client.start()
            return client

        try:
            self.client = self.run(make())
        except BaseException:
            self.stop()
            raise
        return self.client

    def stop(self) -> None:
        """Stop the client (if it started), then the loop and its thread."""
        client, self.client = self.client, None
        if client is not None:
            self.run(client.stop())
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()
