"""Issue 29, item 2: a tool's identity is its (namespace, name), in every part that names one.

The registry resolves an exact (namespace, name) match; the Assembler carries the namespace from
``call.started`` to the dispatch, proposal, status and ledger records and its changelog; tool
switches (which name no namespace) stop a name in every namespace; the executor's handlers and
its fence tell ``crm``'s ``transfer`` from the bare one. The provider streams are in
``tests/adapters/test_namespaces.py``, the executor on a real broker in
``tests/integration/test_executor_namespaces.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.errors import RecordRejected, RegistryError
from processor.core.events import (
    Dispatch,
    Ledger,
    Proposal,
    Status,
    ToolDisabled,
    decode_input,
    encode,
)
from processor.core.policy import Limits
from processor.core.registry import Registry
from processor.executor.fence import FenceState, RefusalCode
from processor.executor.handlers import Call as HandlerCall
from processor.executor.handlers import Handlers
from processor.executor.records import (
    EntryState,
    ExecutionEntry,
    ExecutionOutcome,
    ExecutionResult,
)
from tests.unit.scenario import Call, Run, turn_started

OBJECT: dict[str, Any] = {"type": "object"}
ARGS = '{"amount": 10}'


def tool(name: str = "transfer", namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "parameters": OBJECT, **extra}
    if namespace is not None:
        entry["namespace"] = namespace
    return entry


def reg(*tools: dict[str, Any]) -> Registry:
    return Registry.from_document({"tools": list(tools)})


def run(*tools: dict[str, Any]) -> Run:
    return Run(assembler=Assembler(reg(*tools), Limits()))


# ------------------------------------------------------------------------------ registry


def test_resolution_is_an_exact_match_on_namespace_and_name() -> None:
    r = reg(tool(version="bare"), tool(namespace="crm", version="crm"))
    bare, crm = r.resolve("transfer"), r.resolve("transfer", "crm")
    assert bare is not None and crm is not None
    assert (bare.declaration.namespace, bare.declaration.version) == (None, "bare")
    assert (crm.declaration.namespace, crm.declaration.version) == ("crm", "crm")
    assert r.resolve("transfer", "erp") is None  # a namespace the registry does not know
    assert r.namespaces == frozenset({"crm"})
    only_crm = reg(tool(namespace="crm"))
    assert only_crm.resolve("transfer") is None  # a bare call never finds a namespaced tool
    assert reg(tool()).resolve("transfer", "crm") is None  # nor the reverse


def test_aliases_live_in_their_tools_namespace() -> None:
    r = reg(tool(namespace="crm", aliases=["move_money"]), tool("move_money"))
    alias = r.resolve("move_money", "crm")
    assert alias is not None
    assert (alias.declaration.name, alias.alias_used) == ("transfer", "move_money")
    bare = r.resolve("move_money")
    assert bare is not None and bare.declaration.namespace is None and bare.alias_used is None
    assert r.resolve("move_money", "erp") is None


def test_a_name_twice_in_one_namespace_is_refused_but_not_across_namespaces() -> None:
    reg(tool(), tool(namespace="crm"), tool(namespace="erp"))  # three tools
    with pytest.raises(RegistryError, match="declared twice in namespace 'crm'"):
        reg(tool(namespace="crm"), tool("send", namespace="crm", aliases=["transfer"]))


@pytest.mark.parametrize("bad", ["", 7, {"a": 1}, "a\x07b", "x" * 129, ["crm"]])
def test_a_namespace_the_wire_cannot_carry_is_refused_at_load(bad: Any) -> None:
    with pytest.raises(RegistryError, match="'namespace' must be"):
        reg(tool(namespace=bad))


def test_a_tools_file_declares_a_namespace(tmp_path: Any) -> None:
    from processor.registry_file import load_registry

    path = tmp_path / "tools.yaml"
    path.write_text(
        "tools:\n"
        "  - name: transfer\n    namespace: crm\n    parameters: {type: object}\n"
        "  - name: transfer\n    parameters: {type: object}\n"
    )
    r = load_registry(path)
    assert {(t.namespace, t.name) for t in r.tools} == {("crm", "transfer"), (None, "transfer")}


# ------------------------------------------------------------------------------ wire


def test_call_started_namespace_has_the_tool_names_constraints() -> None:
    call = Call(namespace="crm")
    started = call.start("transfer")
    assert decode_input(encode(started)) == started
    for bad in ("", "a\x00b", "n" * 129, 7):
        data = {**started.model_dump(mode="json"), "namespace": bad}
        with pytest.raises(RecordRejected, match="namespace"):
            decode_input(orjson.dumps(data))
    bare = Call().start("transfer")
    assert b"namespace" not in encode(bare)  # optional: absent means a bare tool
    assert decode_input(encode(bare)).namespace is None  # type: ignore[union-attr]


# ------------------------------------------------------------------------------ assembler


def namespaced(run_: Run, namespace: str | None, call_id: str = "c1") -> Call:
    call = Call(call_id=call_id, item_id=call_id, response_id=f"r-{call_id}", namespace=namespace)
    run_.feed(turn_started(), *call.stream(ARGS, tool="transfer"))
    return call


def test_a_namespaced_call_of_an_unknown_namespace_fails_closed_with_a_clear_ledger() -> None:
    r = run(tool())  # only the bare transfer
    namespaced(r, "crm")
    assert r.dispatches == []
    entry = r.ledger("c1")
    assert (entry.state, entry.terminal_reason, entry.validation_result) == (
        "failed",
        "unknown_tool",
        "unknown_namespace",
    )
    assert (entry.tool, entry.namespace) == ("transfer", "crm")
    [status] = [s for s in r.statuses("c1") if s.state == "failed"]
    assert status.namespace == "crm"


def test_a_known_namespace_without_that_tool_is_an_unknown_tool() -> None:
    r = run(tool("send", namespace="crm"), tool())
    namespaced(r, "crm")
    assert r.dispatches == []
    assert r.ledger("c1").validation_result == "unknown_tool"


def test_dispatch_proposal_status_and_ledger_carry_the_namespace() -> None:
    r = run(tool(version="bare"), tool(namespace="crm", version="crm-1"))
    namespaced(r, "crm")
    [dispatch] = r.dispatches
    assert (dispatch.tool, dispatch.namespace, dispatch.tool_version) == (
        "transfer",
        "crm",
        "crm-1",
    )
    assert r.ledger("c1").namespace == "crm"
    assert {s.namespace for s in r.of(Status)} == {"crm"}
    confirm = run(tool(namespace="crm", requires_confirmation=True))
    namespaced(confirm, "crm")
    [proposal] = confirm.of(Proposal)
    assert (proposal.tool, proposal.namespace) == ("transfer", "crm")


def test_call_started_repeated_with_another_namespace_is_a_conflict() -> None:
    r = run(tool(namespace="crm"), tool(namespace="erp"))
    call = Call(namespace="crm")
    r.feed(turn_started(), call.start("transfer"))
    other = Call(namespace="erp").start("transfer")
    r.feed(other, *call.stream(ARGS, tool="transfer")[1:])
    assert r.dispatches == []
    assert r.ledger("call_0").terminal_reason == "duplicate_conflict"


def disable(name: str, command_id: str = "off-1") -> ToolDisabled:
    return ToolDisabled(
        command_id=command_id, issued_by="ops", issued_at=100.0, tool=name, tenant="acme"
    )


def test_a_tool_switch_names_no_namespace_and_stops_the_name_in_every_namespace() -> None:
    tools = (tool(), tool(namespace="crm"), tool("send", namespace="crm", aliases=["wire"]))
    r = Run(assembler=Assembler(reg(*tools), Limits(), verifier=AllowUnsigned()))
    r.feed(disable("transfer"), disable("wire", "off-2"))
    namespaced(r, "crm", "c1")
    namespaced(r, None, "c2")
    call = Call(call_id="c3", item_id="c3", response_id="r-c3", namespace="crm")
    r.feed(*call.stream(ARGS, tool="send"))
    assert r.dispatches == []
    assert {r.ledger(c).terminal_reason for c in ("c1", "c2", "c3")} == {"tool_disabled"}


def test_a_switch_in_the_printed_form_stops_that_namespaces_tool() -> None:
    """Issue 38, item 14: ``tool.disabled crm.transfer`` (the form ``tail`` and ``replay``
    print) stops crm's transfer, at the worker and at the executor's fence, and only it."""
    tools = (tool(), tool(namespace="crm"), tool("send", namespace="crm", aliases=["wire"]))
    registry = reg(*tools)
    r = Run(assembler=Assembler(registry, Limits(), verifier=AllowUnsigned()))
    r.feed(disable("crm.transfer"), disable("crm.wire", "off-2"))
    namespaced(r, "crm", "c1")
    namespaced(r, None, "c2")
    call = Call(call_id="c3", item_id="c3", response_id="r-c3", namespace="crm")
    r.feed(*call.stream(ARGS, tool="send"))
    assert [d.call_id for d in r.dispatches] == ["c2"]
    assert {r.ledger(c).terminal_reason for c in ("c1", "c3")} == {"tool_disabled"}

    def switch_names(name: str, namespace: str | None) -> frozenset[str] | None:
        resolution = registry.resolve(name, namespace)
        return registry.switch_names(resolution.declaration) if resolution else None

    def canonical(name: str) -> str | None:
        resolution = registry.resolve(name)
        return resolution.declaration.name if resolution else None

    crm = run(*tools)
    namespaced(crm, "crm", "c1")
    namespaced(crm, None, "c2")
    fence = FenceState(
        verifier=AllowUnsigned(), canonical_tool=canonical, switch_names=switch_names
    )
    fence.apply(turn_started(), 100.0)
    fence.apply(disable("crm.transfer"), 100.0)
    verdicts = {d.call_id: fence.check(d, 101.0) for d in crm.dispatches}
    assert verdicts["c2"] is None
    refusal = verdicts["c1"]
    assert refusal is not None and refusal.code is RefusalCode.TOOL_DISABLED


def test_the_namespace_survives_the_changelog() -> None:
    tools = (tool(), tool(namespace="crm", version="crm"))
    first = Assembler(reg(*tools), Limits())
    call = Call(namespace="crm")
    events = [turn_started(), *call.stream(ARGS, tool="transfer")]
    for event in events[:2]:  # started and the first delta
        first.handle(event, 100.0)
    store = {c.key: c.value for c in first.drain_changes()}
    again = Assembler(reg(*tools), Limits())
    for key, value in store.items():
        again.restore(key, value)
    out = [o for e in events[2:] for o in again.handle(e, 100.0)]
    [dispatch] = [o for o in out if isinstance(o, Dispatch)]
    assert (dispatch.namespace, dispatch.tool_version) == ("crm", "crm")
    assert [o.namespace for o in out if isinstance(o, Ledger)] == ["crm"]


def test_a_bare_calls_changelog_is_unchanged_by_namespaces() -> None:
    """A snapshot written only when set: older changelogs and newer ones read the same."""
    assembler = Assembler(reg(tool()), Limits())
    for event in [turn_started(), Call().start("transfer")]:
        assembler.handle(event, 100.0)
    assert all(b"namespace" not in (c.value or b"") for c in assembler.drain_changes())


# ------------------------------------------------------------------------------ executor


async def _noop(call: HandlerCall) -> Mapping[str, Any] | None:
    return None


def make_dispatch(namespace: str | None) -> Dispatch:
    r = run(tool(), tool(namespace="crm"))
    namespaced(r, namespace)
    [dispatch] = r.dispatches
    return dispatch


def test_a_handler_for_the_bare_tool_never_takes_a_namespaced_dispatch() -> None:
    handlers = Handlers()
    handlers.register("transfer", _noop)
    crm = make_dispatch("crm")
    assert crm.namespace == "crm"
    assert not handlers.handles(crm.tool, crm.namespace)
    assert handlers.lookup(crm.tool, crm.tool_version, crm.namespace) is None
    handlers.register("transfer", _noop, namespace="crm")
    registration = handlers.lookup(crm.tool, crm.tool_version, crm.namespace)
    assert registration is not None and registration.namespace == "crm"
    bare = make_dispatch(None)
    found = handlers.lookup(bare.tool, bare.tool_version, bare.namespace)
    assert found is not None and found.namespace is None
    assert handlers.tools() == ["transfer"]
    assert handlers.identities() == [(None, "transfer"), ("crm", "transfer")]
    assert HandlerCall.from_dispatch(crm).namespace == "crm"


def test_execution_records_carry_the_namespace() -> None:
    crm = make_dispatch("crm")
    entry = ExecutionEntry.for_dispatch(crm, "g", "x", EntryState.CLAIMED, 1.0)
    assert entry.namespace == "crm"
    result = ExecutionResult.from_entry(
        entry, outcome=ExecutionOutcome.SUCCEEDED, executor_id="x", ts=1.0
    )
    assert result.namespace == "crm"
    bare = ExecutionEntry.for_dispatch(make_dispatch(None), "g", "x", entry.state, 1.0)
    assert b"namespace" not in encode(bare)


def test_the_fence_stops_a_namespaced_dispatch_by_its_name_and_aliases() -> None:
    registry = reg(tool(), tool("send", namespace="crm", aliases=["wire"]))

    def switch_names(name: str, namespace: str | None) -> frozenset[str] | None:
        resolution = registry.resolve(name, namespace)
        return registry.switch_names(resolution.declaration) if resolution else None

    def canonical(name: str) -> str | None:
        resolution = registry.resolve(name)
        return resolution.declaration.name if resolution else None

    r = run(tool(), tool("send", namespace="crm", aliases=["wire"]))
    call = Call(namespace="crm")
    r.feed(turn_started(), *call.stream(ARGS, tool="send"))
    [dispatch] = r.dispatches
    fence = FenceState(
        verifier=AllowUnsigned(), canonical_tool=canonical, switch_names=switch_names
    )
    fence.apply(turn_started(), 100.0)
    assert fence.check(dispatch, 101.0) is None
    fence.apply(disable("wire"), 100.0)  # the alias, declared in crm only
    refusal = fence.check(dispatch, 101.0)
    assert refusal is not None and refusal.code is RefusalCode.TOOL_DISABLED


def test_replay_lines_name_the_namespace() -> None:
    from processor.cli.offline import output_line, text_line

    crm, bare = make_dispatch("crm"), make_dispatch(None)
    assert text_line(crm).startswith(b"DISPATCH  crm.transfer(")
    assert text_line(bare).startswith(b"DISPATCH  transfer(")
    assert orjson.loads(output_line(crm))["namespace"] == "crm"
    assert "namespace" not in orjson.loads(output_line(bare))  # as on the wire
