"""The executor's gate: may these dispatched calls run now?

Owns :class:`CallGate`: the requirements of a dispatch (confirmation, its age, the dispatch age;
from the handler's registration, else the registry), and ``check``: read the control partitions
of a batch of calls up to their end offsets now, once each
(:class:`~processor.executor.barrier.ControlBarrier`, retried while incomplete,
:class:`~processor.executor.executor_state.Stopping` when the executor stops meanwhile), and
check every call (:class:`~processor.executor.fence.FenceState`).

Must not write anything nor run handlers; the barrier and fence rules live in
:mod:`processor.executor.barrier` and :mod:`processor.executor.fence`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiokafka.errors import KafkaError

from processor.core.events import Dispatch
from processor.core.registry import Registry
from processor.executor.barrier import BarrierTimeout, ControlBarrier
from processor.executor.executor_state import Stopping
from processor.executor.fence import FenceState, Refusal, Requirements
from processor.executor.handlers import Registration
from processor.observability import metrics
from processor.observability.logging import fields

__all__ = ["CallGate"]

log = logging.getLogger("processor.executor.client")  # one logger for all the client's parts


class CallGate:
    """Syncs the control barrier and checks dispatches against the fence."""

    def __init__(
        self,
        barrier: ControlBarrier,
        registry: Registry | None,
        *,
        retention_seconds: float,
        barrier_timeout_seconds: float,
        stopping: asyncio.Event,
        clock: Callable[[], float],
    ) -> None:
        self.barrier = barrier
        self.registry = registry
        self.retention_seconds = retention_seconds
        self.barrier_timeout_seconds = barrier_timeout_seconds
        self._stopping = stopping
        self._clock = clock

    def requirements(self, registration: Registration, dispatch: Dispatch) -> Requirements:
        declaration = None
        if self.registry is not None:
            resolution = self.registry.resolve(dispatch.tool, dispatch.namespace)
            declaration = resolution.declaration if resolution else None
        requires = registration.requires_confirmation
        if requires is None:  # unknown to the registry too: required (fail closed)
            requires = declaration is None or declaration.requires_confirmation
        max_age = registration.confirmation_max_age_seconds
        if max_age is None and declaration is not None and declaration.requires_confirmation:
            max_age = declaration.confirmation_ttl_seconds
        return Requirements(
            requires_confirmation=requires,
            confirmation_max_age_seconds=max_age,
            max_dispatch_age_seconds=self.retention_seconds,
        )

    async def check(self, calls: list[tuple[Dispatch, Requirements]]) -> list[Refusal | None]:
        """One fence for many calls: each control partition they need is read up to its end
        offset now, once (one barrier read per partition, however many calls it holds), then
        every call is checked against its partition's state; in the order of ``calls``."""
        partitions = [
            self.barrier.partition_for_turn(dispatch.tenant, dispatch.turn_id)
            for dispatch, _ in calls
        ]
        states = await self.synced(list(dict.fromkeys(partitions)))
        now = self._clock()
        return [
            states[p].check(dispatch, now, requirements)
            for p, (dispatch, requirements) in zip(partitions, calls, strict=True)
        ]

    async def synced(self, partitions: list[int]) -> dict[int, FenceState]:
        """Control ``partitions`` read up to their end offsets now (one ListOffsets for all;
        retried while the barrier is incomplete; :class:`Stopping` when the executor stops
        meanwhile)."""
        while True:
            started = time.monotonic()
            try:
                states = await self.barrier.sync_many(partitions, self.barrier_timeout_seconds)
            except (BarrierTimeout, KafkaError) as exc:
                log.warning(
                    "control barrier incomplete; retrying",
                    extra=fields(partitions=partitions, error=type(exc).__name__),
                )
                if self._stopping.is_set():
                    raise Stopping from None
                await asyncio.sleep(0.5)
                continue
            metrics.EXECUTOR_BARRIER_DURATION.observe(time.monotonic() - started)
            return states
