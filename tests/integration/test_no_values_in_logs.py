"""No argument values in a real worker's logs or ``/metrics`` (issue 30, item 8).

The formatter's redaction has its own unit test; this runs a real worker on the real broker at
DEBUG with calls whose arguments hold secret-looking values, in every way a call can go (it
dispatches, fails its schema on a value or on a key, is malformed, names an unknown tool) and
records whose keys and values hold them (dead letters), then asserts that no secret appears in
the worker's captured log lines or its ``/metrics``, nor in ``ledger``, ``status``, ``audit`` and
``deadletter``, which promise the same.
"""

from __future__ import annotations

import uuid

import orjson
import pytest

from processor.core.events import encode, turn_key
from tests.integration.conftest import Runtime, call_events, turn_started, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.partitions(2)]


def _secret(name: str) -> str:
    return f"sk-live-{name}-{uuid.uuid4().hex}"


async def test_secret_argument_values_reach_no_log_line_and_no_metric(runtime: Runtime) -> None:
    rt = runtime
    worker = rt.start_worker(PROCESSOR_LOG_LEVEL="DEBUG")
    await worker.wait_ready()
    secrets = {name: _secret(name) for name in ("ok", "key", "enum", "cut", "unknown", "dead")}
    s = secrets
    calls = {
        "ok": (orjson.dumps({"city": s["ok"]}).decode(), "get_weather"),  # dispatched
        "key": (orjson.dumps({"city": "Oslo", s["key"]: 1}).decode(), "get_weather"),  # a key
        "enum": (orjson.dumps({"city": "Oslo", "units": s["enum"]}).decode(), "get_weather"),
        "cut": ('{"city": "' + s["cut"] + '", "units": c}', "get_weather"),  # malformed
        "unknown": (orjson.dumps({"city": s["unknown"]}).decode(), "no_such_tool"),
    }
    turns = [("acme", f"t-{name}") for name in calls]
    await rt.control(*(turn_started(tenant, turn) for tenant, turn in turns))
    for (tenant, turn), (args, tool) in zip(turns, calls.values(), strict=True):
        await rt.publish(call_events(tenant, turn, "call_0", args, tool=tool))
    sample = orjson.loads(encode(call_events("acme", "t-ok", "call_9", "{}")[1]))
    key = turn_key("acme", "t-ok").encode()
    for hostile in (
        {**sample, f"api_key={secrets['dead']}": 1},  # a key is payload too
        {**sample, "seq": secrets["dead"]},  # a value of the wrong type
        {**sample, "type": secrets["dead"]},  # an unknown type
    ):
        await rt.raw_fragment(orjson.dumps(hostile), key=key)

    async def ledgers() -> list[dict[str, object]] | None:
        found = await rt.read("ledger")
        return found if len(found) >= len(calls) else None

    ledger = await wait_until(ledgers, timeout=60, what="a ledger record per call")
    reasons = {r["turn_id"]: r["terminal_reason"] for r in ledger}
    assert reasons == {
        "t-ok": "dispatched", "t-key": "schema_invalid", "t-enum": "schema_invalid",
        "t-cut": "malformed_json", "t-unknown": "unknown_tool",
    }  # fmt: skip
    [dispatch] = await rt.dispatches()
    assert dispatch["arguments"] == {"city": secrets["ok"]}  # the values were really there
    await rt.wait_caught_up()
    dead = await rt.read("deadletter")
    assert len(dead) == 3

    metrics = await worker.metrics()
    log = worker.log()
    assert "toolcall_" in metrics and len(log.splitlines()) > 5  # both were really read
    outputs = {role: orjson.dumps(await rt.read(role)).decode() for role in
               ("ledger", "status", "audit", "deadletter")}  # fmt: skip
    for name, secret in secrets.items():
        shown = secret.removeprefix("sk-live-")
        for where, text in {"log": log, "/metrics": metrics, **outputs}.items():
            assert shown not in text, f"the {name!r} secret reached {where}"
