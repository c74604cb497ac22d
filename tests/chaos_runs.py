"""Pytest plugin: the short chaos runs of ``make test``, driven side by side (issue 39).

Listed in ``tests/conftest.py``'s ``pytest_plugins``. A test that judges a chaos run is marked
``@pytest.mark.chaos_run(build=...)``, ``build(workdir, bootstrap)`` giving its
:class:`~tests.chaos.run.Options` (``bootstrap()`` is the shared broker, asked for only by a run
that uses it), and takes the ``chaos_run`` fixture: its run's :class:`ChaosRun`.

Each run mostly waits on the clock (a load written over tens of seconds, faults held for the
session and transaction timeouts, the drain), so the runs of every selected test start together
on one event loop the first time one of them is asked for (``chaos_runs``, session scope), as
``make chaos`` runs would on one machine: each with its own topics, group, transactional ids
and work dir; each fault is planned from its own run's load start and each checker reads only
its own run's topics. A test then judges its own run's report exactly as it did when it ran
alone; a run that raised fails only its test. Selecting one test (``-k``) runs its run alone.

Side by side costs CPU only while the runs start their processes: the three runs of
``test_chaos_short.py`` together took 60 s on two cores (53 to 57 s each alone), idle 40-60 %
after their first ten seconds. The three-broker run (``test_chaos_cluster_short.py``) is not
marked: its three JVMs on top of them held both cores at 100 % for 80 s (114 s for the four,
against 60 s and 76 s apart), a load under which the runs' timing would no longer be a
deployment's.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chaos.run import Options, Report, run

Build = Callable[[Path, Callable[[], str]], Options]


@dataclass(frozen=True)
class ChaosRun:
    report: Report
    workdir: Path  # the run's work dir: its workers' and executors' logs


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "chaos_run(build): the test judges the chaos run build(workdir, bootstrap) gives "
        "(tests/chaos_runs.py: the selected runs are driven side by side)",
    )


@pytest.fixture(scope="session")
def chaos_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Report | BaseException, Path]]:
    """Node id → (report, or what the run raised; work dir), for every selected test marked
    ``chaos_run``, the runs driven together."""
    builds: dict[str, Build] = {}
    for item in request.session.items:
        marker = item.get_closest_marker("chaos_run")
        if marker is not None:
            builds[item.nodeid] = marker.kwargs["build"]

    def bootstrap() -> str:
        return str(request.getfixturevalue("kafka_bootstrap"))

    workdirs = {
        nodeid: tmp_path_factory.mktemp(re.sub(r"\W+", "-", nodeid.split("::")[-1])[:60])
        for nodeid in builds
    }
    options = {nodeid: build(workdirs[nodeid], bootstrap) for nodeid, build in builds.items()}

    async def together() -> list[Report | BaseException]:
        return await asyncio.gather(*(run(o) for o in options.values()), return_exceptions=True)

    reports = asyncio.run(together())
    return {
        nodeid: (report, workdirs[nodeid]) for nodeid, report in zip(options, reports, strict=True)
    }


@pytest.fixture
def chaos_run(
    request: pytest.FixtureRequest, chaos_runs: dict[str, tuple[Report | BaseException, Path]]
) -> ChaosRun:
    """This test's chaos run (its ``chaos_run`` marker), or what the run raised, raised."""
    if request.node.get_closest_marker("chaos_run") is None:
        pytest.fail("the chaos_run fixture needs a @pytest.mark.chaos_run(build=...) marker")
    report, workdir = chaos_runs[request.node.nodeid]
    if isinstance(report, BaseException):
        raise report
    return ChaosRun(report, workdir)
