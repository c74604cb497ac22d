"""Whether the Kafka broker can be reached: waited for at start-up, watched while running.

A worker or executor pod often starts before its broker does. :func:`wait_for_broker` retries
with backoff (0.5 s doubling to 5 s) for ``startup_timeout_seconds``
(``PROCESSOR_STARTUP_TIMEOUT_SECONDS``, 60 s by default), one log line per attempt naming the
address, then raises :class:`~processor.exits.Unavailable` (exit 69, one line). The process
serves liveness meanwhile; readiness stays false.

:class:`BrokerWatch` probes the broker while the process runs: unreachable, the process reports
not ready; unreachable for longer than the same bound, it calls ``on_lost`` with the same error,
and the process stops and exits 69 (a pod restarts it; a reachable broker resets the clock).

A probe is one metadata bootstrap with a fresh client, closed on every path. Credentials refused
by the broker are not retried: :class:`~processor.exits.NotAuthorised` at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from processor.exits import CliError, NotAuthorised, broker_unreachable, classify
from processor.observability.logging import fields
from processor.settings import Settings

log = logging.getLogger(__name__)

FIRST_DELAY_S: Final = 0.5
MAX_DELAY_S: Final = 5.0
WATCH_INTERVAL_S: Final = 5.0


class _Quiet(logging.Filter):
    """Keeps aiokafka's own connection errors of a probe out of the log (one line per attempt,
    ours, names the address); remembers the last one for that line."""

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def filter(self, record: logging.LogRecord) -> bool:
        self.last = record.getMessage()
        return False


async def probe(settings: Settings, timeout: float) -> None:
    """One bootstrap (metadata request) with a fresh client; raises when the broker is not
    reachable within ``timeout`` seconds. The client is closed on every path."""
    client = AIOKafkaClient(**settings.kafka_client_kwargs())
    quiet = _Quiet()
    aiokafka_log = logging.getLogger("aiokafka")
    aiokafka_log.addFilter(quiet)
    try:
        await asyncio.wait_for(client.bootstrap(), timeout)
    except Exception as exc:
        if quiet.last:
            exc.add_note(quiet.last)
        raise
    finally:
        aiokafka_log.removeFilter(quiet)
        await client.close()


def _detail(exc: BaseException) -> str:
    notes = getattr(exc, "__notes__", None)
    return str(notes[-1]) if notes else type(exc).__name__


def _refused(exc: BaseException, servers: str) -> CliError | None:
    """The error when the broker answered but refused us (never retried), else None."""
    known = classify(exc, servers)
    return known if isinstance(known, NotAuthorised) else None


def _unreachable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaConnectionError | KafkaTimeoutError | TimeoutError | OSError) or (
        isinstance(exc, KafkaError) and exc.retriable
    )


async def wait_for_broker(settings: Settings, *, timeout: float | None = None) -> None:
    """Return once the broker answers; raise ``Unavailable`` after ``timeout`` seconds."""
    bound = settings.startup_timeout_seconds if timeout is None else timeout
    servers = settings.bootstrap_servers
    deadline = time.monotonic() + bound
    delay = FIRST_DELAY_S
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        try:
            await probe(settings, max(0.1, min(remaining, settings.request_timeout_ms / 1000)))
        except Exception as exc:
            refused = _refused(exc, servers)
            if refused is not None:
                raise refused from None
            if not _unreachable(exc):
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                error = broker_unreachable(servers)
                error.cause += f" after {bound:g} s"
                raise error from None
            wait = min(delay, remaining)
            log.warning(
                "kafka unreachable; retrying",
                extra=fields(
                    bootstrap_servers=servers,
                    attempt=attempt,
                    retry_in_seconds=round(wait, 2),
                    gives_up_in_seconds=round(remaining, 1),
                    error=type(exc).__name__,
                    detail=_detail(exc),
                ),
            )
            await asyncio.sleep(wait)
            delay = min(delay * 2, MAX_DELAY_S)
            continue
        if attempt > 1:
            log.info("kafka reachable", extra=fields(bootstrap_servers=servers, attempt=attempt))
        return


class BrokerWatch:
    """Probes the broker every ``interval`` seconds while running (``await watch.run()``)."""

    def __init__(
        self,
        settings: Settings,
        on_lost: Callable[[CliError], None],
        *,
        interval: float = WATCH_INTERVAL_S,
    ) -> None:
        self.settings = settings
        self.on_lost = on_lost
        self.interval = min(interval, settings.startup_timeout_seconds)
        self.reachable = True
        self.lost_since: float | None = None

    async def run(self) -> None:
        servers = self.settings.bootstrap_servers
        bound = self.settings.startup_timeout_seconds
        while True:
            await asyncio.sleep(self.interval)
            try:
                await probe(
                    self.settings, min(self.interval, self.settings.request_timeout_ms / 1000)
                )
            except Exception as exc:
                now = time.monotonic()
                self.reachable = False
                self.lost_since = self.lost_since if self.lost_since is not None else now
                down = now - self.lost_since
                log.warning(
                    "kafka unreachable",
                    extra=fields(
                        bootstrap_servers=servers,
                        unreachable_seconds=round(down, 1),
                        gives_up_in_seconds=round(max(0.0, bound - down), 1),
                        error=type(exc).__name__,
                        detail=_detail(exc),
                    ),
                )
                if down >= bound:
                    error = broker_unreachable(servers)
                    error.cause += f" for {down:.0f} s"
                    self.on_lost(error)
                    return
                continue
            if not self.reachable:
                log.info("kafka reachable again", extra=fields(bootstrap_servers=servers))
            self.reachable = True
            self.lost_since = None
