"""The long-lived idempotent producers, and their renewal after a fatal producer error.

:class:`IdempotentProducer` (``enable_idempotence``, ``acks=all``, no transaction) is the base of
the adapters' :class:`~processor.kafka.publish.Publisher` (and through it the
:class:`~processor.kafka.publish.BlockingPublisher`), the operators' and gateways'
:class:`~processor.ops.ctl.ControlWriter` and the MCP :class:`~processor.mcp.audit.AuditWriter`.
Every record they write goes through one :class:`RenewingProducer`, which owns the one part
this module is for: replacing a producer that can no longer deliver.

Why a producer breaks for good. aiokafka numbers each partition's batches itself and never
resets the numbers. A batch it numbered that then fails (a non-retriable broker error, or a batch
that expired while its partition had no leader, which is what a whole-cluster outage leaves) burns
its sequence number: every later batch on that partition is refused with
``OutOfOrderSequenceNumber``, forever. The brokers can also forget or fence the producer id
(``UnknownProducerId``, ``InvalidProducerIdMapping``, ``InvalidProducerEpoch``, which aiokafka
raises as ``ProducerFenced``, ``InvalidTxnState``), and a sender task that died ("Unexpected
error during batch delivery") makes every later ``send`` raise. None of these heals by waiting.

What :meth:`RenewingProducer.send_all` does (one attempt = enqueue every record in order, then
wait for every acknowledgement), as the table :data:`RULES` says:

* a producer-state error (above), a dead sender, or any failure of a batch the sender had taken
  (its sequence number is spent): the producer is *renewed*: closed without delivering anything
  it still holds (:func:`~processor.kafka.clients.discard_producer`: its pending batches fail,
  nothing of it reaches the broker afterwards), and a new one started (a new producer id, its
  sequences from 0), waiting up to ``startup_timeout_seconds`` for the cluster; one warning line
  (role, error class, generation, no record content) and ``toolcall_producer_renewals_total``;
* then the whole attempt is sent again on the new producer, unless the error says the records
  themselves are refused (non-retriable and not a producer-state error: too large, not
  authorised): that error goes to the caller, the producer is renewed all the same so the next
  send works;
* an attempt that failed on a producer another send had already renewed (``ProducerDiscarded``)
  is sent again without a second renewal (one renewal per broken producer, however many sends
  were waiting on it);
* an error before anything was taken (waiting for metadata, a record over the client's size
  limit) on a healthy producer goes to the caller, as before;
* a send is sent again at most :data:`MAX_RETRIES` times, and a new producer that cannot start
  within ``startup_timeout_seconds`` ends the send with the start's error (the sends waiting for
  that same start get its error at once, not a wait of their own); the next send starts a
  producer again, so a gateway resumes by itself once the cluster answers: nobody restarts it.

Why sending again is safe: every record written through here is idempotent by its own id.
Fragment events carry ``event_id`` and a position; the Assembler ignores an identical repeat and
never revives a terminal call (invariants 7 and 9). Control events carry ``command_id``: a
repeated cancel, deny, quarantine, disable or stop is a no-op ``duplicate``, a repeated confirm,
enable or resume is dropped as a replay, in the worker and in the executor's fence alike
(:func:`processor.core.control.judge_command`). MCP audit records carry a stable ``audit_id``.
(``tests/integration/test_producer_renewal.py`` publishes the same events through the old and
the renewed producer and checks both.)

Why a turn's order holds. One attempt enqueues its records in order on one producer, and the
broker never appends a batch of a producer id past a gap in its sequence, so what an old producer
delivered of an attempt is a prefix of it. The renewal awaits the old producer's in-flight
requests and fails the rest before the new producer starts, and the attempt is then sent whole,
in order, again. So across a renewal a turn's partition holds, at worst, a prefix of the attempt
followed by the whole attempt: every event's first copy still comes after the events before it,
and the copies are repeats. A send that ends in an error delivered at most a prefix; the tee then
ends the response ``error`` (``tee_stream``), and a caller that publishes a turn's events one
send after another (the tee does) never starts the next send before this one returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTxnState,
    KafkaError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    UnknownProducerId,
)

from processor.core.errors import KafkaStepError
from processor.kafka.clients import ProducerDiscarded, discard_producer, settle_unawaited
from processor.observability import metrics
from processor.observability.logging import fields
from processor.settings import Settings

__all__ = [
    "MAX_RETRIES",
    "RULES",
    "IdempotentProducer",
    "Outgoing",
    "RenewingProducer",
]

log = logging.getLogger(__name__)

MAX_RETRIES: Final = 3
"""Times one :meth:`RenewingProducer.send_all` sends its records again before its error goes to
the caller (each after a renewal, its own or another send's)."""

_START_RETRY_SECONDS: Final = 1.0  # between two tries to start a new producer (cluster away)

PRODUCER_STATE_ERRORS: Final[tuple[type[BaseException], ...]] = (
    OutOfOrderSequenceNumber,
    UnknownProducerId,
    InvalidProducerIdMapping,
    InvalidProducerEpoch,
    ProducerFenced,
    InvalidTxnState,
)
"""The brokers no longer accept this producer id's writes: only a new producer id helps."""


class Failure(enum.Enum):
    """What one failed attempt says about its producer (see :func:`classify`)."""

    PRODUCER_STATE = "producer_state"  # a producer-state error, wherever it surfaced
    DEAD_SENDER = "dead_sender"  # the producer's sender task is gone: every send raises
    REPLACED = "replaced"  # the producer was renewed under this attempt by another send
    DELIVERY_RETRIABLE = "delivery_retriable"  # a taken batch failed; the error is transient
    DELIVERY_REFUSED = "delivery_refused"  # a taken batch failed; the records are refused
    NOT_TAKEN = "not_taken"  # failed before the sender took anything; the producer is healthy


@dataclass(frozen=True)
class Rule:
    renew: bool  # replace the producer (once per producer)
    retry: bool  # send the whole attempt again (within MAX_RENEWALS)


RULES: Final[dict[Failure, Rule]] = {
    Failure.PRODUCER_STATE: Rule(renew=True, retry=True),
    Failure.DEAD_SENDER: Rule(renew=True, retry=True),
    Failure.REPLACED: Rule(renew=False, retry=True),
    Failure.DELIVERY_RETRIABLE: Rule(renew=True, retry=True),
    Failure.DELIVERY_REFUSED: Rule(renew=True, retry=False),
    Failure.NOT_TAKEN: Rule(renew=False, retry=False),
}
"""Failure → what :meth:`RenewingProducer.send_all` does (the module docstring says why)."""


def classify(exc: BaseException, *, taken: bool, dead_sender: bool, replaced: bool) -> Failure:
    """The :class:`Failure` of an attempt that raised ``exc``: ``taken`` when it came from a
    delivery (a batch the sender had numbered), ``dead_sender`` when the producer's sender task
    is gone, ``replaced`` when the producer was renewed while the attempt used it."""
    if replaced or isinstance(exc, ProducerDiscarded):
        return Failure.REPLACED
    if isinstance(exc, PRODUCER_STATE_ERRORS):
        return Failure.PRODUCER_STATE
    if dead_sender:
        return Failure.DEAD_SENDER
    if not taken:
        return Failure.NOT_TAKEN
    if isinstance(exc, KafkaError) and exc.retriable:
        return Failure.DELIVERY_RETRIABLE
    return Failure.DELIVERY_REFUSED


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One record to send: topic, value, key, and optionally a partition and headers."""

    topic: str
    value: bytes
    key: bytes
    partition: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


class _AttemptFailed(KafkaStepError):
    """An attempt's error, with where it surfaced (internal to :class:`RenewingProducer`)."""

    def __init__(self, error: Exception, *, taken: bool) -> None:
        super().__init__(type(error).__name__)
        self.error = error
        self.taken = taken


def _sender_dead(producer: AIOKafkaProducer) -> bool:
    # aiokafka internals (pinned <0.15; tests/unit/test_discard_producer.py guards this area)
    sender = getattr(producer, "_sender", None)
    task = getattr(sender, "sender_task", None)
    return task is not None and task.done()


def _batch_futures(producer: AIOKafkaProducer) -> list[asyncio.Future[Any]]:
    # aiokafka internals, as above: the batches a discard fails, queued or in flight
    accumulator = producer._message_accumulator
    queued = [b.future for q in accumulator._batches.values() for b in q]
    return queued + [b.future for b in accumulator._pending_batches]


async def _attempt(producer: AIOKafkaProducer, records: Sequence[Outgoing]) -> list[Any]:
    """Enqueue ``records`` in order, then wait for every acknowledgement."""
    futures: list[asyncio.Future[Any]] = []
    try:
        for r in records:
            futures.append(
                await producer.send(
                    r.topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    headers=list(r.headers),
                )
            )
    except Exception as exc:
        settle_unawaited(futures)
        raise _AttemptFailed(exc, taken=False) from exc
    except BaseException:
        settle_unawaited(futures)
        raise
    try:
        return list(await asyncio.gather(*futures))
    except Exception as exc:
        settle_unawaited(futures)
        raise _AttemptFailed(exc, taken=True) from exc
    except BaseException:
        settle_unawaited(futures)
        raise


class RenewingProducer:
    """One idempotent ``AIOKafkaProducer`` at a time, renewed after a fatal error (see the
    module docstring). ``make`` builds a new (not started) producer; ``role`` names the writer
    in the log line and the metric; ``start_timeout`` bounds the wait for a new one to start."""

    def __init__(
        self, make: Callable[[], AIOKafkaProducer], role: str, *, start_timeout: float
    ) -> None:
        self._make = make
        self.role = role
        self._start_timeout = start_timeout
        self._producer: AIOKafkaProducer | None = None
        self._started = False
        self.generation = 0
        """How many producers this one has started (1 after :meth:`start`)."""
        self._epoch = 0  # moves on whenever the producer in use is dropped
        self._lock = asyncio.Lock()  # one renewal (or start) at a time
        self._starts = 0  # tries to start a replacement that ended, either way
        self._start_error: Exception | None = None  # how the last one failed, if it did

    @property
    def current(self) -> AIOKafkaProducer | None:
        """The producer in use now (None before :meth:`start`, after :meth:`stop`, or while a
        renewal has dropped it): for diagnostics and fault tests; send through
        :meth:`send_all`."""
        return self._producer

    async def start(self) -> None:
        """Start the first producer (an unreachable cluster raises, as before)."""
        producer = self._make()
        try:
            await producer.start()
        except BaseException:
            await producer.stop()  # closed on every path: no "Unclosed AIOKafkaProducer"
            raise
        self._producer, self._started = producer, True
        self.generation = 1

    async def stop(self) -> None:
        """Flush and close the current producer (nothing when none is open)."""
        self._started = False
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def partitions_for(self, topic: str) -> set[int]:
        """The partitions of ``topic`` (from the current producer's metadata)."""
        producer, _ = await self._current(self._starts)
        return set(await producer.partitions_for(topic))

    async def send_all(self, records: Sequence[Outgoing]) -> list[Any]:
        """Send ``records`` in order and wait for every acknowledgement; return their
        ``RecordMetadata``. A fatal producer error renews the producer and sends them all again
        (at most :data:`MAX_RETRIES` times); see :data:`RULES`."""
        starts = self._starts  # a replacement that fails to start from now on ends this send
        retries = 0
        while True:
            producer, epoch = await self._current(starts)
            try:
                return await _attempt(producer, records)
            except _AttemptFailed as failed:
                failure = classify(
                    failed.error,
                    taken=failed.taken,
                    dead_sender=_sender_dead(producer),
                    replaced=epoch != self._epoch,
                )
                rule = RULES[failure]
                if rule.renew:
                    await self._renew(epoch, failed.error, starts)
                retries += 1
                if not rule.retry or retries > MAX_RETRIES:
                    raise failed.error from None

    # -- the producer in use ---------------------------------------------------------------

    async def _current(self, starts: int) -> tuple[AIOKafkaProducer, int]:
        """The producer to use and its epoch; starts one if the last renewal could not, unless
        a start failed since the send began (``starts``): then that start's error."""
        if not self._started:
            raise RuntimeError(f"the {self.role} producer is not started (use it as `async with`)")
        if self._producer is None:
            async with self._lock:
                if self._producer is None:
                    self._raise_failed_start(starts)
                    await self._start_new()
        assert self._producer is not None
        return self._producer, self._epoch

    def _raise_failed_start(self, starts: int) -> None:
        if self._starts != starts and self._start_error is not None:
            raise self._start_error  # sends waiting on one start share its outcome

    async def _renew(self, epoch: int, error: Exception, starts: int) -> None:
        """Replace the producer of ``epoch`` (nothing if another send already did)."""
        async with self._lock:
            if epoch != self._epoch or not self._started:
                return
            began = time.monotonic()
            old, self._producer = self._producer, None
            self._epoch += 1  # sends still waiting on ``old`` now count as replaced
            metrics.PRODUCER_RENEWALS.labels(self.role, type(error).__name__).inc()
            if old is not None:
                leftovers = _batch_futures(old)
                await discard_producer(old)
                settle_unawaited(leftovers)  # failed ProducerDiscarded, awaited by nobody
            try:
                self._raise_failed_start(starts)
                await self._start_new()
            finally:
                log.warning(
                    "an idempotent producer hit a fatal error: closed without delivering what "
                    "it held, and replaced by a new producer",
                    extra=fields(
                        role=self.role,
                        error=type(error).__name__,
                        generation=self.generation,
                        started=self._producer is not None,
                        seconds=round(time.monotonic() - began, 3),
                    ),
                )

    async def _start_new(self) -> None:
        """Start a replacement, trying again while the cluster is away, for up to
        ``start_timeout`` seconds; the last error is raised when it never starts."""
        deadline = time.monotonic() + self._start_timeout
        while True:
            producer = self._make()
            try:
                remaining = max(0.001, deadline - time.monotonic())
                await asyncio.wait_for(producer.start(), remaining)
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    await discard_producer(producer)
                if not isinstance(exc, Exception):
                    raise
                if time.monotonic() >= deadline:
                    self._starts += 1
                    self._start_error = exc
                    raise
                await asyncio.sleep(min(_START_RETRY_SECONDS, deadline - time.monotonic()))
                continue
            self._starts += 1
            self._start_error = None
            self._producer = producer
            self.generation += 1
            return


class IdempotentProducer:
    """An idempotent producer (``enable_idempotence``, ``acks=all``) for one topic, used as
    ``async with``, renewed after a fatal producer error (:class:`RenewingProducer`).
    ``client_suffix`` names the role in the client id, the log and the metric; ``extra`` adds
    producer settings (``linger_ms``, ``max_request_size``)."""

    def __init__(self, settings: Settings, topic: str, client_suffix: str, **extra: Any) -> None:
        self.settings = settings
        self.topic = topic
        options = {
            **settings.kafka_client_kwargs(),
            "client_id": f"{settings.client_id}-{client_suffix}",
            "enable_idempotence": True,
            "acks": "all",
            **extra,
        }
        self.producers = RenewingProducer(
            lambda: AIOKafkaProducer(**options),
            client_suffix,
            start_timeout=settings.startup_timeout_seconds,
        )

    async def start(self) -> None:
        await self.producers.start()

    async def stop(self) -> None:
        await self.producers.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
