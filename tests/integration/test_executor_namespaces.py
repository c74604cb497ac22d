"""Issue 29, item 2, on a real broker: an executor runs a dispatch only with the handler of the
dispatch's own tool identity, (namespace, name). A handler registered for the bare ``transfer``
never runs ``crm``'s ``transfer`` (that dispatch is left to the group that handles it)."""

from __future__ import annotations

import pytest

from processor.executor.handlers import Handlers
from tests.integration.conftest import Runtime, turn_started
from tests.integration.executor_harness import (
    Executor,
    Recorder,
    group_of,
    make_dispatch,
    running,
    wait_results,
    write_dispatch,
)

pytestmark = pytest.mark.integration


@pytest.mark.partitions(1)
async def test_a_bare_handler_never_runs_a_namespaced_dispatch(runtime: Runtime) -> None:
    rt = runtime
    crm = make_dispatch("acme", "turn-1", "call_crm", tool="transfer")
    crm = crm.model_copy(update={"namespace": "crm"})
    bare = make_dispatch("acme", "turn-1", "call_bare", tool="transfer")
    await rt.control(turn_started("acme", "turn-1"))
    await write_dispatch(rt, crm, bare)
    bare_only = Recorder("transfer")
    async with running(Executor(rt.settings, bare_only.handlers, group=group_of(rt, "bare"))):
        [result] = await wait_results(rt.settings, 1)
    assert [c.key.call_id for c in bare_only.calls] == ["call_bare"]
    assert (result.call_id, result.namespace) == ("call_bare", None)

    crm_only = Recorder()
    crm_only.handlers = Handlers()
    crm_only.handlers.register(
        "transfer", crm_only.handle, namespace="crm", requires_confirmation=False
    )
    async with running(Executor(rt.settings, crm_only.handlers, group=group_of(rt, "crm"))):
        got = await wait_results(rt.settings, 2)
    assert [(c.key.call_id, c.namespace) for c in crm_only.calls] == [("call_crm", "crm")]
    assert {(r.call_id, r.namespace, r.executor_group) for r in got} == {
        ("call_bare", None, group_of(rt, "bare")),
        ("call_crm", "crm", group_of(rt, "crm")),
    }
