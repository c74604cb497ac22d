"""The chaos executors' handlers (``--handlers tests.chaos.effects:handlers``): one for every
tool of the run's registry, whose side effect is a line appended to ``CHAOS_EFFECTS``.

Kept apart from :mod:`tests.chaos.executors` so that an executor process imports only this and
the product, not the test harness.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from processor.executor.handlers import Call, Handlers
from processor.registry_file import load_registry


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """The same digest for equal JSON objects, whatever their member order."""
    return hashlib.sha256(orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)).hexdigest()


def handlers() -> Handlers:
    """The handlers of every tool in ``PROCESSOR_TOOLS_FILE`` (the factory ``--handlers``
    names): each appends its side effect to ``CHAOS_EFFECTS``, then takes 0-500 ms (many calls
    in flight at every kill). The line says when the side effect happened (``at``) and when the
    handler will return (``ends``: ``at`` + its sleep), so the harness can see, while the run
    goes on, how many handlers each member is running, and the verdict how many were in flight
    at each fault."""
    effects = Path(os.environ["CHAOS_EFFECTS"])
    registry = load_registry(Path(os.environ["PROCESSOR_TOOLS_FILE"]))
    made = Handlers()
    rng = random.Random()  # the harness's own timing, not the product's

    async def effect(call: Call) -> Mapping[str, Any]:
        sleep = rng.uniform(0.0, 0.5)
        at = time.time()
        line = {
            "dispatch_id": call.dispatch_id,
            "pid": os.getpid(),
            "arguments": arguments_digest(call.arguments),
            "at": at,
            "ends": at + sleep,
        }
        fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:  # one write of one short line with O_APPEND: whole, and never interleaved
            os.write(fd, orjson.dumps(line) + b"\n")
        finally:
            os.close(fd)
        await asyncio.sleep(sleep)
        return {"done": True}

    for tool in registry.tools:
        made.register(tool.name, effect, timeout_seconds=30.0)
    return made
