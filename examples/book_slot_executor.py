"""An example executor for the ``book_slot`` tool of ``examples/tools.yaml``.

Run it against a deployment (worker + topics) with::

    processor executor run --handlers examples.book_slot_executor:handlers \\
        --group bookings --tools examples/tools.yaml --keyring keyring.yaml --create-topics

``book_slot`` requires a confirmation, so the executor receives a call only after the user
confirmed exactly its ``args_digest`` (``processor ctl confirm``) and the fence re-checked, right
before the handler runs, that the turn was not cancelled, the response not quarantined, the tool
not disabled and the tenant not stopped.

The handler passes ``call.idempotency_key`` (the ``dispatch_id``) to the booking system, so the
booking system can dedupe it: the executor runs each dispatch at most once per executor group,
and an outcome recorded as ``unknown`` (the executor died mid-call) can be resolved by asking the
booking system about that key. The in-memory ``BOOKINGS`` dict stands in for that system.

The handler returns a booking reference for the result record; it never returns or logs the
call's arguments.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

from processor.executor.handlers import Call, ExecutionFailed, Handlers

log = logging.getLogger(__name__)

handlers = Handlers()

# idempotency key → booking reference (a stand-in for the external booking system)
BOOKINGS: dict[str, str] = {}
CAPACITY = 8  # seats per slot in this toy system
_SEATS: dict[tuple[str, str], int] = {}


@handlers.tool("book_slot", version="1", requires_confirmation=True, timeout_seconds=30.0)
async def book_slot(call: Call) -> Mapping[str, Any]:
    """Book ``party_size`` seats at ``date`` ``time``; idempotent on ``call.idempotency_key``."""
    existing = BOOKINGS.get(call.idempotency_key)
    if existing is not None:
        return {"booking_ref": existing, "repeated": True}
    slot = (str(call.arguments["date"]), str(call.arguments["time"]))
    party = int(call.arguments["party_size"])
    taken = _SEATS.get(slot, 0)
    if taken + party > CAPACITY:
        raise ExecutionFailed("slot_full", retry_possible=True, detail="no seats left in the slot")
    _SEATS[slot] = taken + party
    ref = "BK-" + hashlib.sha256(call.idempotency_key.encode()).hexdigest()[:10].upper()
    BOOKINGS[call.idempotency_key] = ref
    log.info("booked", extra={"fields": {"dispatch_id": call.dispatch_id, "booking_ref": ref}})
    return {"booking_ref": ref}
