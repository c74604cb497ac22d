"""Pytest plugin: tests whose scenario mostly waits on the clock, driven side by side (issue 39).

Listed in ``tests/conftest.py``'s ``pytest_plugins``. A test marked
``@pytest.mark.side_by_side(scenario=...)``, ``scenario(workdir, bootstrap)`` a coroutine function
(``bootstrap()`` is the shared broker, asked for only by a scenario that uses it), takes the
``side_by_side`` fixture: what its scenario returned (a chaos run's report) and its work dir; what
the scenario raised (a failed assertion of a scenario that asserts as it goes) is raised there,
in that test only.

The scenarios of every selected marked test start together on one event loop the first time
one of them is asked for (``side_by_side_runs``, session scope), the way ``make chaos`` runs
would share a machine: each with its own topics, groups, transactional ids, work dir, and
brokers and ports of its own when it has any (``free_port()``, ``free_port_base()``); each
chaos run plans its faults from its own load's start and its checker reads only its own
topics. A test then judges its own outcome exactly as it did when it ran alone. Selecting one
test (``-k``) runs its scenario alone.

Mark only what leaves the CPU idle: side by side costs CPU while the scenarios start their
processes. The three runs of ``test_chaos_short.py`` together took 60 s on two cores (53 to 57 s
each alone), idle 40-60 % after their first ten seconds. The three-broker chaos run
(``test_chaos_cluster_short.py``) is not marked: its three JVMs on top of them held both cores
at 100 % for 80 s (114 s for the four, against 60 s and 76 s apart), a load under which the
runs' timing would no longer be a deployment's.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

Scenario = Callable[[Path, Callable[[], str]], Awaitable[Any]]


@dataclass(frozen=True)
class SideBySide:
    value: Any  # what the scenario returned
    workdir: Path  # the scenario's work dir (its processes' logs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "side_by_side(scenario): the test judges what scenario(workdir, bootstrap) returns; "
        "the selected scenarios are driven side by side (tests/side_by_side.py)",
    )


@pytest.fixture(scope="session")
def side_by_side_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Any, Path]]:
    """Node id → (what the scenario returned or raised; its work dir), for every selected test
    marked ``side_by_side``, the scenarios driven together."""
    scenarios: dict[str, Scenario] = {}
    for item in request.session.items:
        marker = item.get_closest_marker("side_by_side")
        if marker is not None:
            scenarios[item.nodeid] = marker.kwargs["scenario"]

    def bootstrap() -> str:
        return str(request.getfixturevalue("kafka_bootstrap"))

    workdirs = {
        nodeid: tmp_path_factory.mktemp(re.sub(r"\W+", "-", nodeid.split("::")[-1])[:60])
        for nodeid in scenarios
    }

    async def together() -> list[Any]:
        return await asyncio.gather(
            *(scenario(workdirs[nodeid], bootstrap) for nodeid, scenario in scenarios.items()),
            return_exceptions=True,
        )

    outcomes = asyncio.run(together())
    return {
        nodeid: (outcome, workdirs[nodeid])
        for nodeid, outcome in zip(scenarios, outcomes, strict=True)
    }


@pytest.fixture
def side_by_side(
    request: pytest.FixtureRequest, side_by_side_runs: dict[str, tuple[Any, Path]]
) -> SideBySide:
    """This test's scenario's outcome (its ``side_by_side`` marker); what it raised, raised."""
    if request.node.get_closest_marker("side_by_side") is None:
        pytest.fail("the side_by_side fixture needs a @pytest.mark.side_by_side(scenario=...)")
    outcome, workdir = side_by_side_runs[request.node.nodeid]
    if isinstance(outcome, BaseException):
        raise outcome
    return SideBySide(outcome, workdir)
