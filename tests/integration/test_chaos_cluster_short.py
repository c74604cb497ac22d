"""The chaos suite's short run on three brokers, in ``make test``: the cluster starts, the
cluster's faults are survived, and the checker passes.

A three-node KRaft cluster of the run's own (``scripts/kafka-local --nodes 3``: combined
broker+controller nodes; topics with replication 3 and ``min.insync.replicas=2``), two workers,
120 turns over 30 s, and two broker faults during the load that leave a quorum standing: ``kill
-9`` of the broker that leads the most dispatch/fragments/changelog partitions (restarted 5 s
later), and a zombie broker (SIGSTOP past the broker session and replica lag timeouts, then
SIGCONT). The long runs (``python -m tests.chaos --brokers 3``) add the controller kill, the
rolling restart and the whole-cluster kill. Ports: ``KAFKA_CHAOS_CLUSTER_PORT`` (six from there:
three client ports, then three controller ports), else the first free six from 29300.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.chaos.faults import FaultKind, free_port_base
from tests.chaos.run import Options, run

pytestmark = pytest.mark.integration


@pytest.mark.timeout(600)
def test_three_brokers_survive_a_leader_kill_and_a_zombie_broker(tmp_path: Path) -> None:
    port = int(os.environ.get("KAFKA_CHAOS_CLUSTER_PORT") or free_port_base())
    options = Options(
        seed=5,
        turns=120,
        duration=30.0,
        faults=2,
        kinds=[FaultKind.LEADER, FaultKind.ZOMBIE],
        workdir=tmp_path,
        broker_port=port,
        brokers=3,
        settle_seconds=120.0,
    )
    report = asyncio.run(run(options))
    summary = report.verdict.summary()

    assert report.verdict.ok, str(summary)  # whole, with the details of what failed
    assert report.verdict.must_dispatch > 30, summary  # the load was real
    # nothing was excused: no late-bound call expired (no binding waited 30 s here)
    assert report.verdict.expired == [], summary
    assert report.verdict.duplicate_dispatch_ids == 0, summary
    assert sorted(str(f.kind) for f in report.faults) == ["leader", "zombie"]
    # each hit a broker of the cluster, which was running again afterwards
    assert all(f.worker.startswith("broker-") for f in report.faults), report.faults
    assert all(f.happened_at > 0 and f.back_at > f.happened_at for f in report.faults)
    # the group dispatched again after every fault
    assert all(r["seconds"] is not None for r in report.verdict.recovery), report.verdict.recovery
    assert report.unexpected_exits == []
    # every topic of the run, and the offsets and transaction state topics: 3 replicas, 2 in sync
    assert "__transaction_state" in report.replication, report.replication
    assert "__consumer_offsets" in report.replication, report.replication
    assert len(report.replication) == 13, report.replication
    assert set(report.replication.values()) == {(3, "2")}, report.replication
