"""The interpreter's recursion limit in this package's own processes (worker, executor, replay).

jsonschema validates by recursion, a few Python frames for each keyword on the way down. A
recursive tool schema (a tree of nodes through ``$ref``) validating an argument nested to the
scanner's depth limit (64) can need more than CPython's default limit of 1,000 frames: with
eight ``allOf`` around each level, 1,266 frames at depth 63 (measured with a profile hook).
The call then failed ``schema_invalid`` although its argument was valid.

:func:`allow_deep_validation` raises the limit to :data:`FRAMES`, or less if the main thread's
stack (``RLIMIT_STACK``) would not hold that many. On CPython 3.11 with an 8 MiB stack,
jsonschema's frames ran out of stack (a segmentation fault, not a ``RecursionError``) between
20,700 and 26,000 frames, about 360 bytes each; the limit allows one frame per
:data:`STACK_BYTES_PER_FRAME` bytes, more than twice that. The worker and ``replay`` call it at
start, before they load the tools (jsonschema's check of a schema at load recurses too, about
seven frames a level), and so does the executor; an application embedding the core decides for
its own process (and threads, whose stacks may be smaller).
"""

from __future__ import annotations

import resource
import sys
from typing import Final

FRAMES: Final = 10_000
STACK_BYTES_PER_FRAME: Final = 800


def allow_deep_validation() -> int:
    """Raise the recursion limit (never lower it) to what the stack holds; return the limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    frames = (
        FRAMES if soft == resource.RLIM_INFINITY else min(FRAMES, soft // STACK_BYTES_PER_FRAME)
    )
    limit = max(sys.getrecursionlimit(), frames)
    sys.setrecursionlimit(limit)
    return limit
