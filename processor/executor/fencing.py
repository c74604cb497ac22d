"""Fence and barrier use: may this dispatch run now?

Owns the requirements of a dispatch (confirmation, its age, the dispatch age; from the handler's
registration, else the registry) and ``_fences``: read the control partitions of a batch of
calls up to their end offsets now, once each (:class:`~processor.executor.barrier.ControlBarrier`,
retried while incomplete, :class:`_Stopping` when stopping), and check every call
(:class:`~processor.executor.fence.FenceState`).

Must not write anything nor run handlers; the barrier and fence rules live in
:mod:`processor.executor.barrier` and :mod:`processor.executor.fence`.

:class:`~processor.executor.client.ExecutorClient` is one class built in layers; why, and
their order, is in :mod:`processor.executor.executor_state`."""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka.errors import KafkaError

from processor.core.events import Dispatch
from processor.executor.barrier import BarrierTimeout
from processor.executor.executor_state import _Stopping
from processor.executor.fence import FenceState, Refusal, Requirements
from processor.executor.handlers import Registration
from processor.executor.transactions import Transactions
from processor.observability import metrics
from processor.observability.logging import fields

__all__ = ["Fencing"]

log = logging.getLogger("processor.executor.client")  # one logger for all the client's parts


class Fencing(Transactions):
    """Syncs the control barrier and checks a dispatch against the fence."""

    def _requirements(self, registration: Registration, dispatch: Dispatch) -> Requirements:
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
            max_dispatch_age_seconds=self._retention,
        )

    async def _fence(self, dispatch: Dispatch, requirements: Requirements) -> Refusal | None:
        """Read the turn's control partition up to its end offset now, then check the call."""
        [refusal] = await self._fences([(dispatch, requirements)])
        return refusal

    async def _fences(self, calls: list[tuple[Dispatch, Requirements]]) -> list[Refusal | None]:
        """One fence for many calls: each control partition they need is read up to its end
        offset now, once (one barrier read per partition, however many calls it holds), then
        every call is checked against its partition's state; in the order of ``calls``."""
        partitions = [
            self._barrier.partition_for_turn(dispatch.tenant, dispatch.turn_id)
            for dispatch, _ in calls
        ]
        states = await self._synced(list(dict.fromkeys(partitions)))
        now = self._clock()
        return [
            states[p].check(dispatch, now, requirements)
            for p, (dispatch, requirements) in zip(partitions, calls, strict=True)
        ]

    async def _synced(self, partitions: list[int]) -> dict[int, FenceState]:
        """Control ``partitions`` read up to their end offsets now (one ListOffsets for all;
        retried while the barrier is incomplete; :class:`_Stopping` when the executor stops
        meanwhile)."""
        while True:
            started = time.monotonic()
            try:
                states = await self._barrier.sync_many(partitions, self._barrier_timeout)
            except (BarrierTimeout, KafkaError) as exc:
                log.warning(
                    "control barrier incomplete; retrying",
                    extra=fields(partitions=partitions, error=type(exc).__name__),
                )
                if self._stopping.is_set():
                    raise _Stopping from None
                await asyncio.sleep(0.5)
                continue
            metrics.EXECUTOR_BARRIER_DURATION.observe(time.monotonic() - started)
            return states
