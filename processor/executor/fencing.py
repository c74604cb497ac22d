"""Fence and barrier use: may this dispatch run now?

Owns the requirements of a dispatch (confirmation, its age, the dispatch age; from the handler's
registration, else the registry) and ``_fence``: read the turn's control partition up to its end
offset now (:class:`~processor.executor.barrier.ControlBarrier`, retried while incomplete,
:class:`_Stopping` when stopping) and check the call
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
from processor.executor.fence import Refusal, Requirements
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
        partition = self._barrier.partition_for_turn(dispatch.tenant, dispatch.turn_id)
        while True:
            started = time.monotonic()
            try:
                state = await self._barrier.sync(partition, self._barrier_timeout)
            except (BarrierTimeout, KafkaError) as exc:
                log.warning(
                    "control barrier incomplete; retrying",
                    extra=fields(partition=partition, error=type(exc).__name__),
                )
                if self._stopping.is_set():
                    raise _Stopping from None
                await asyncio.sleep(0.5)
                continue
            metrics.EXECUTOR_BARRIER_DURATION.observe(time.monotonic() - started)
            return state.check(dispatch, self._clock(), requirements)
