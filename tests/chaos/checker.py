"""The chaos suite's checker: reads the outputs (read_committed, from the beginning) and judges.

For every call of the plan (see :class:`~tests.chaos.workload.Expect`):

* **lost**: a call that must act was never dispatched.
* **duplicated**: a call dispatched more than once (two dispatch records, whatever their ids).
* **unsafe**: a call that must never act was dispatched (cancelled before its terminal or its
  response end, truncated, schema-invalid).
* **wrong_arguments**: dispatched arguments differ from the generated ones.
* **expired**: a call of a ``late_binding`` turn whose ``turn.started`` really reached the log
  later than the worker's binding wait after its stream (the driver's clock says the bind was
  acknowledged more than ``binding_wait`` seconds after the stream's write began), and whose
  ledger ends ``permission_denied``: inert, never dispatched, counted apart from *lost*. Any
  other call that had to dispatch and did not is *lost*, whatever its ledger says and whatever
  faults the run had: a worker that forgot a turn's binding in a restore is caught.
* **ledger_mismatch**: the ledger's ``dispatched`` entries and the dispatch records disagree
  (they are written in one transaction).
* **cancels_unaudited**: a cancellation the gateway wrote that has no ``applied`` audit record.
* **status_mismatch**: a call whose terminal user status (``dispatched``, ``cancelled``,
  ``failed``; several records of one call must agree) does not say what its ledger entry says,
  or a terminal status without a ledger entry: what the user is told must be what happened.
* **proposals_missing**: a call that needs confirmation whose proposal the gateway never saw
  (the driver's wait timed out: it could not be confirmed), or whose proposal the driver saw
  (its turn was acknowledged) but the ``proposals`` topic no longer holds (a lost record).
* **duplicate_dispatch_ids**: dispatch ids that occur on ``dispatch`` more than once (reported;
  any such call is also *duplicated*).
* **open_transactions**: a transaction still open on a partition of the run's topics once every
  worker and executor stopped (and each killed one's timed out): a hanging transaction, which
  holds every ``read_committed`` reader of its partition (read by ``DescribeProducers``).
* **wrong_reason**: a call of a fully acknowledged turn whose last ledger entry is not the one its
  fate implies (a cancelled call must end ``user_stop``, a cut one ``incomplete`` or never open,
  a schema-breaking one ``schema_invalid``, an open-ended one stays without an entry).

Recovery per fault: the longest wait, over the partitions that dispatched anything after the
fault, from the fault to that partition's first dispatch record after it (record timestamps);
and ``after_back_seconds``, the same wait counted from the moment the faulted part was running
again (for a broker: answering), so a restart's own length is told apart from the processor's.
A fault during which another one began is marked ``overlapped`` and left out of the maxima.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson

from processor.core.policy import Limits
from processor.kafka.tail import read_records
from processor.settings import Settings
from tests.chaos.faults import Fault
from tests.chaos.workload import Expect, Fate, Plan

CallKey = tuple[str, str, str]

# The last ledger entry each fate allows ("none": the call never had an entry).
LEDGER_REASONS: dict[Fate, frozenset[str]] = {
    Fate.NORMAL: frozenset({"dispatched"}),
    Fate.LATE_BINDING: frozenset({"dispatched"}),
    Fate.CANCEL_BEFORE_TERMINAL: frozenset({"user_stop"}),
    Fate.CANCEL_BETWEEN_TERMINALS: frozenset({"user_stop"}),
    Fate.TRUNCATED_CLOSED: frozenset({"incomplete", "none"}),  # a call cut before it started
    Fate.TRUNCATED_OPEN: frozenset({"none", "idle_timeout"}),  # idle_timeout: a long run
    Fate.SCHEMA_INVALID: frozenset({"schema_invalid"}),
    Fate.CONFIRMED: frozenset({"dispatched"}),
    Fate.DENIED: frozenset({"confirmation_denied"}),
    Fate.CANCEL_BEFORE_CONFIRM: frozenset({"user_stop"}),
    Fate.CANCEL_AFTER_END: frozenset({"dispatched", "user_stop"}),  # a race with the worker
}


@dataclass
class Verdict:
    calls: int = 0
    must_dispatch: int = 0
    dispatched: int = 0
    lost: list[CallKey] = field(default_factory=list)
    duplicated: list[CallKey] = field(default_factory=list)
    unsafe: list[CallKey] = field(default_factory=list)
    wrong_arguments: list[CallKey] = field(default_factory=list)
    expired: list[CallKey] = field(default_factory=list)
    ledger_mismatch: int = 0
    cancels_unaudited: int = 0
    wrong_reason: list[tuple[CallKey, str, str]] = field(default_factory=list)
    status_mismatch: list[tuple[CallKey, str, list[str]]] = field(default_factory=list)
    proposals_missing: int = 0
    duplicate_dispatch_ids: int = 0
    details: list[dict[str, Any]] = field(default_factory=list)  # forensics of each duplicate
    status_details: list[dict[str, Any]] = field(default_factory=list)  # and of each mismatch
    lost_details: list[dict[str, Any]] = field(default_factory=list)  # and of each lost call
    indeterminate: int = 0
    ledger_reasons: dict[str, int] = field(default_factory=dict)
    recovery: list[dict[str, Any]] = field(default_factory=list)
    # transactions still open on the run's topics once every member stopped (topic-partition,
    # producer id, first offset): each holds read_committed readers of its partition
    open_transactions: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.unsafe
            or self.wrong_arguments
            or self.ledger_mismatch
            or self.cancels_unaudited
            or self.wrong_reason
            or self.status_mismatch
            or self.proposals_missing
            or self.open_transactions
        )

    def summary(self) -> dict[str, Any]:
        worst: dict[str, float] = {}
        worst_back: dict[str, float] = {}
        for r in self.recovery:
            if r.get("overlapped"):
                continue
            if r["seconds"] is not None:
                worst[r["kind"]] = max(worst.get(r["kind"], 0.0), r["seconds"])
            if r.get("after_back_seconds") is not None:
                back = r["after_back_seconds"]
                worst_back[r["kind"]] = max(worst_back.get(r["kind"], 0.0), back)
        return {
            "calls": self.calls,
            "must_dispatch": self.must_dispatch,
            "dispatched": self.dispatched,
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "unsafe": len(self.unsafe),
            "wrong_arguments": len(self.wrong_arguments),
            "expired": len(self.expired),
            "indeterminate": self.indeterminate,
            "ledger_mismatch": self.ledger_mismatch,
            "cancels_unaudited": self.cancels_unaudited,
            "wrong_reason": len(self.wrong_reason),
            "status_mismatch": len(self.status_mismatch),
            "proposals_missing": self.proposals_missing,
            "duplicate_dispatch_ids": self.duplicate_dispatch_ids,
            "open_transactions": self.open_transactions[:10],
            "max_recovery_seconds": {k: round(v, 1) for k, v in sorted(worst.items())},
            "max_after_back_seconds": {k: round(v, 1) for k, v in sorted(worst_back.items())},
            "examples": {
                "lost": self.lost[:5],
                "duplicated": self.duplicated[:5],
                "unsafe": self.unsafe[:5],
                "wrong_arguments": self.wrong_arguments[:5],
                "wrong_reason": self.wrong_reason[:5],
                "status_mismatch": self.status_mismatch[:5],
            },
            "duplicate_details": self.details[:5],
            "status_details": self.status_details[:5],
            "lost_details": self.lost_details[:5],
        }


async def read_topic(settings: Settings, role: str) -> list[tuple[int, float, dict[str, Any]]]:
    """(partition, record time in seconds, value) of every committed record of an output."""
    out = []
    async for record in read_records(settings, settings.topics.output(role)):
        value = orjson.loads(record.value)
        value["_offset"] = record.offset  # for the report of a defect, never compared
        out.append((record.partition, record.timestamp / 1000, value))
    return out


async def check(
    settings: Settings,
    plan: Plan,
    faults: list[Fault],
    cancels: list[str],
    others_status: frozenset[str] = frozenset(),
    proposal_timeouts: list[CallKey] | None = None,
    binding_wait: float = Limits.binding_wait_seconds,
) -> Verdict:
    """``others_status``: ids of status records the run's executors wrote (what became of a
    call after its dispatch), left to their own verdict (:mod:`tests.chaos.executors`).
    ``proposal_timeouts``: calls whose proposal the driver waited for in vain."""
    dispatch = await read_topic(settings, "dispatch")
    ledger = await read_topic(settings, "ledger")
    audit = await read_topic(settings, "audit")
    status = [
        s for s in await read_topic(settings, "status") if s[2]["status_id"] not in others_status
    ]
    proposals = await read_topic(settings, "proposals")
    return judge(
        plan,
        faults,
        cancels,
        dispatch,
        ledger,
        audit,
        status,
        proposals=proposals,
        proposal_timeouts=proposal_timeouts or [],
        binding_wait=binding_wait,
    )


def judge(
    plan: Plan,
    faults: list[Fault],
    cancels: list[str],
    dispatch: list[tuple[int, float, dict[str, Any]]],
    ledger: list[tuple[int, float, dict[str, Any]]],
    audit: list[tuple[int, float, dict[str, Any]]],
    status: list[tuple[int, float, dict[str, Any]]],
    *,
    proposals: list[tuple[int, float, dict[str, Any]]] | None = None,
    proposal_timeouts: list[CallKey] | None = None,
    binding_wait: float = Limits.binding_wait_seconds,
) -> Verdict:
    """Pure: the verdict from the plan, the faults and the records read. ``proposals`` None:
    the proposals topic was not read (only the driver's timeouts are judged)."""
    expect = plan.expectations()
    arguments = plan.arguments()
    v = Verdict(calls=len(expect))
    v.must_dispatch = sum(1 for e in expect.values() if e is Expect.ONCE)
    v.indeterminate = sum(1 for e in expect.values() if e is Expect.AT_MOST_ONCE)

    def key(r: dict[str, Any]) -> CallKey:
        return (r["tenant"], r["turn_id"], r["call_id"])

    counts = Counter(key(r) for _, _, r in dispatch)
    v.dispatched = len(counts)
    ids = Counter(r.get("dispatch_id") for _, _, r in dispatch if r.get("dispatch_id"))
    v.duplicate_dispatch_ids = sum(1 for n in ids.values() if n > 1)
    for k, r in ((key(r), r) for _, _, r in dispatch):
        if k in arguments and r["arguments"] != arguments[k] and k not in v.wrong_arguments:
            v.wrong_arguments.append(k)
    reasons: dict[CallKey, str] = {}
    for _, _, r in ledger:
        reasons[key(r)] = r.get("terminal_reason") or r.get("state", "?")
    v.ledger_reasons = dict(Counter(reasons.get(k, "none") for k in expect))
    late = {
        (t.tenant, t.turn_id, c)
        for t in plan.turns
        if t.bound_late(binding_wait)
        for c in t.call_ids
    }
    for k, e in sorted(expect.items()):
        n = counts.get(k, 0)
        if n > 1:
            v.duplicated.append(k)
        if e is Expect.NEVER and n:
            v.unsafe.append(k)
        elif e is Expect.ONCE and not n:
            if reasons.get(k) == "permission_denied" and k in late:
                v.expired.append(k)  # the binding reached the log after the binding wait
            else:
                v.lost.append(k)
    fates = plan.fates()
    for k, reason in ((k, reasons.get(k, "none")) for k in sorted(expect)):
        fate, acked = fates[k]
        if acked and reason not in LEDGER_REASONS[fate] and k not in v.expired:
            v.wrong_reason.append((k, str(fate), reason))
    told: dict[CallKey, set[str]] = defaultdict(set)
    for _, _, r in status:
        if r.get("state") in ("dispatched", "cancelled", "failed"):
            told[key(r)].add(r["state"])
    ledger_state = {key(r): r.get("state", "?") for _, _, r in ledger}
    for k in sorted(set(told) | set(ledger_state)):
        want = _USER_STATE.get(ledger_state.get(k, "none"), "none")
        if told.get(k, {"none"}) != {want}:
            v.status_mismatch.append((k, ledger_state.get(k, "none"), sorted(told.get(k, set()))))

    def ledger_rows(k: CallKey) -> list[tuple[Any, ...]]:
        """Where each ledger record of ``k`` lies, and what it says."""
        return [
            (p, round(t, 3), r.get("_offset"), r.get("state"), r.get("terminal_reason"))
            for p, t, r in ledger
            if key(r) == k
        ]

    for k in v.lost[:5]:  # what the ledger says of each lost call (nothing: no entry at all)
        v.lost_details.append(
            {
                "call": k,
                "ledger": ledger_rows(k),
                "status": [(p, round(t, 3), r.get("state")) for p, t, r in status if key(r) == k],
            }
        )
    for k, _, _ in v.status_mismatch[:5]:  # where each record is, to find it in the log
        v.status_details.append(
            {
                "call": k,
                "status": [
                    (p, round(t, 3), r.get("_offset"), r.get("state"), r.get("status_id"))
                    for p, t, r in status
                    if key(r) == k
                ],
                "ledger": ledger_rows(k),
            }
        )
    for k in v.duplicated[:5]:
        v.details.append(
            {
                "call": k,
                "dispatch": [
                    (p, round(t, 3), r.get("_offset"), r.get("dispatch_id"))
                    for p, t, r in dispatch
                    if key(r) == k
                ],
                "ledger": [
                    (p, round(t, 3), r.get("state"), r.get("terminal_reason"))
                    for p, t, r in ledger
                    if key(r) == k
                ],
            }
        )
    dispatched_in_ledger = {key(r) for _, _, r in ledger if r.get("state") == "dispatched"}
    v.ledger_mismatch = len(dispatched_in_ledger ^ set(counts))
    applied = {r["command_id"] for _, _, r in audit if r.get("outcome") in ("applied", "duplicate")}
    v.cancels_unaudited = sum(1 for c in cancels if c not in applied)
    missing = set(proposal_timeouts or ())
    if proposals is not None:
        proposed = {key(r) for _, _, r in proposals}
        missing |= {
            (t.tenant, t.turn_id, c)
            for t in plan.turns
            if t.fate.confirming and t.acked
            for c in t.call_ids
            if (t.tenant, t.turn_id, c) not in proposed
        }
    v.proposals_missing = len(missing)
    v.recovery = recovery(faults, dispatch)
    return v


# A ledger state and the terminal user status that must go with it (ledger has no "preparing").
_USER_STATE = {"dispatched": "dispatched", "cancelled": "cancelled", "failed": "failed"}


def recovery(
    faults: list[Fault], dispatch: list[tuple[int, float, dict[str, Any]]]
) -> list[dict[str, Any]]:
    by_partition: dict[int, list[float]] = defaultdict(list)
    for partition, ts, _ in dispatch:
        by_partition[partition].append(ts)
    for times in by_partition.values():
        times.sort()
    out = []
    starts = sorted(f.happened_at for f in faults)
    for fault in faults:
        waits = [
            next(t for t in times if t > fault.happened_at) - fault.happened_at
            for times in by_partition.values()
            if times and times[-1] > fault.happened_at
        ]
        back = [
            next(t for t in times if t > fault.back_at) - fault.back_at
            for times in by_partition.values()
            if times and times[-1] > fault.back_at
        ]
        out.append(
            {
                "kind": str(fault.kind),
                "worker": fault.worker,
                "at": round(fault.at, 1),
                "seconds": round(max(waits), 2) if waits else None,
                "down_seconds": round(fault.back_at - fault.happened_at, 1),
                "after_back_seconds": round(max(back), 2) if back else None,
                # another fault began before this one's recovery ended: its time is both's
                "overlapped": any(
                    fault.happened_at < t < fault.happened_at + max(waits, default=0.0)
                    for t in starts
                ),
            }
        )
    return out
