"""Regressions of issue 9 (hostile input found in review) and issue 15 item 6 (command-id scope).

Each test names the item it guards; each failed on the code before the fix. The property tests
over arbitrary JSON and bytes live in ``test_decoders_total.py``.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from processor.adapters.base import TurnContext
from processor.adapters.openai_chat import OpenAIChatAdapter
from processor.core.assembler import Assembler
from processor.core.authn import AllowUnsigned
from processor.core.errors import AdapterError, RecordRejected
from processor.core.events import (
    Audit,
    CallDelta,
    CallKey,
    DeadLetter,
    Dispatch,
    Ledger,
    ResponseQuarantined,
    ResponseStatus,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    TurnCancelled,
    decode_input,
    decode_key,
    encode,
    encode_key,
    stable_id,
)
from processor.core.outputs import RecordSource
from processor.core.policy import Limits
from processor.executor.fence import ApplyOutcome, FenceState, RefusalCode, Requirements
from processor.kafka.partitioner import misrouted
from processor.ops.signing import Keyring, OperatorSigner, generate_keypair
from tests.unit.scenario import TOOLS, Call, Run, registry, turn_started

NOW = 1_700_000_000.0
SOURCE = RecordSource("control", 0, 1)
PRIV, PUB = generate_keypair()
OTHER_PRIV, OTHER_PUB = generate_keypair()
KEYRING = Keyring.from_document(
    {
        "keys": [
            {"key_id": "ops-1", "operator": "oncall", "public_key": PUB, "tenants": ["*"]},
            {"key_id": "ops-2", "operator": "other", "public_key": OTHER_PUB, "tenants": ["*"]},
        ]
    }
)
OPS = OperatorSigner(PRIV, key_id="ops-1", issued_by="oncall")
OTHER_OPS = OperatorSigner(OTHER_PRIV, key_id="ops-2", issued_by="other")
WEATHER = '{"city": "Paris"}'


def signed(cls: Any, command_id: str, signer: OperatorSigner = OPS, **target: Any) -> Any:
    fields: dict[str, Any] = {
        "command_id": command_id,
        "issued_by": signer.issued_by,
        "issued_at": 100.0,
        "expires_at": 400.0,
        "reason": "incident 7",
        **target,
    }
    return signer.sign(cls(**fields))


def cancel(command_id: str, turn_id: str = "turn-1", reason: str = "user_stop") -> TurnCancelled:
    return TurnCancelled(
        command_id=command_id,
        issued_by="gateway",
        issued_at=100.0,
        tenant="acme",
        turn_id=turn_id,
        reason=reason,
    )


def signed_run() -> Run:
    return Run(assembler=Assembler(registry(), Limits(), verifier=KEYRING))


def audits(run: Run) -> list[tuple[str, str, str | None]]:
    return [(a.command_type, a.outcome.value, a.rejection) for a in run.of(Audit)]


# =============================================================== 1. decoders are total


@pytest.mark.parametrize(
    "payload",
    [
        b'{"v":1,"type":[]}',
        b'{"v":1,"type":{}}',
        b'{"v":1,"type":{"a":1}}',
        b"{}",
        b'{"v":[],"type":"turn.cancelled"}',
        b'{"v":{},"type":[1]}',
    ],
)
def test_1_unhashable_type_is_a_dead_letter_not_a_crash(payload: bytes) -> None:
    with pytest.raises(RecordRejected):
        decode_input(payload)
    [dead] = Assembler(registry()).handle(payload, NOW, source=SOURCE)
    assert isinstance(dead, DeadLetter) and dead.reason in {"unknown_type", "unknown_version"}
    assert FenceState(verifier=KEYRING).apply_record(payload, NOW) is ApplyOutcome.UNDECODABLE
    assert misrouted(orjson.loads(payload), 0, 6) is None


# =============================================================== 2. identifiers and state keys

HOSTILE_VALID_IDS = ['q"uote', "back\\slash", "~[", '"],["', '{"a":1}', "x", "a:b/c", "]"]
"""Inside the alphabet, yet full of what a separator join or a quoting bug would trip on."""
HOSTILE_IDS = ["a\x1fb", "\x1f", "ünï☃", "\ud800", "\x00", "", " ", "a/b", "*", "x" * 300]
"""Outside the alphabet: refused at decode; the state keys must survive them all the same."""


@pytest.mark.parametrize(
    "field", ["tenant", "turn_id", "response_id", "item_id", "call_id", "command_id"]
)
@pytest.mark.parametrize("bad", ["a\x1fb", "with space", "ünï", "", "x" * 257, "tab\t"])
def test_2_identifiers_outside_the_alphabet_are_dead_letters(field: str, bad: str) -> None:
    call = Call()
    record: dict[str, Any] = orjson.loads(encode(call.confirm("sha256:x")))
    record[field] = bad
    with pytest.raises(RecordRejected) as caught:
        decode_input(orjson.dumps(record))
    assert caught.value.reason == "invalid_record"


@pytest.mark.parametrize("field", ["tenant", "turn_id", "response_id"])
def test_2_a_unit_separator_in_an_id_never_crashes_the_changelog(field: str) -> None:
    """The review's crash: U+001F in a response id made drain_changes raise ValueError."""
    assembler, call = Assembler(registry()), Call()
    records = [orjson.loads(encode(e)) for e in [turn_started(), *call.stream(WEATHER)]]
    records += [orjson.loads(encode(call.response_ended(ResponseStatus.COMPLETED)))]
    outputs = []
    for record in records:
        if field in record:
            record[field] = "r\x1fx"
        outputs += assembler.handle(orjson.dumps(record), 100.0, source=SOURCE)
        assembler.drain_changes()  # raised ValueError before the fix
    assert all(isinstance(o, DeadLetter) for o in outputs)
    assert assembler.calls == {}
    assert assembler.inert == {}


@pytest.mark.parametrize("tenant", ["a/b", "*"])
def test_2_a_tenant_has_no_slash_and_is_never_the_wildcard(tenant: str) -> None:
    record: dict[str, Any] = orjson.loads(encode(Call().start()))
    record["tenant"] = tenant
    with pytest.raises(RecordRejected):
        decode_input(orjson.dumps(record))


def test_2_real_provider_ids_fit_the_alphabet() -> None:
    ids = [
        "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
        "toolu_01EKqbqmZrGRXy18eN7m9kvY",
        "fc_bfb39741-3748",
        "resp_01830d662ab3",
        "_vr4aYiWEJnYodAPkujX0QM",
        "tooluse_lAG_zP8QRHmSYOwZzzaCqA",
        "#0",
        "synthetic:#1",
        "abc+/=",
        "chatcmpl-4f39f3af:0",
    ]
    for value in ids:
        Call(call_id=value, item_id=value, response_id=value, turn_id=value).start()


def test_2_an_adapter_fails_closed_on_an_id_outside_the_alphabet() -> None:
    adapter = OpenAIChatAdapter(TurnContext(tenant="acme", turn_id="t1", actor="alice"))
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call\x1fevil",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ],
    }
    with pytest.raises(AdapterError):
        adapter.feed(chunk)


@pytest.mark.parametrize("tenant", ["a/b", "", "a\x1fb", "ünï"])
def test_2_a_turn_context_outside_the_alphabet_fails_before_any_event(tenant: str) -> None:
    with pytest.raises(AdapterError) as caught:
        TurnContext(tenant=tenant, turn_id="t1", actor="alice")
    assert caught.value.reason == "bad_context"


@pytest.mark.parametrize("hostile", HOSTILE_VALID_IDS)
def test_2_the_changelog_round_trips_hostile_ids_in_every_key_part(hostile: str) -> None:
    tenant = hostile.replace("/", "|")
    ids = {
        "tenant": tenant,
        "turn_id": hostile,
        "response_id": hostile,
        "item_id": hostile,
        "call_id": hostile,
    }
    turn = {"tenant": tenant, "turn_id": hostile}
    open_call, ended_call = Call(**ids), Call(**{**ids, "call_id": hostile + "2"})
    events: list[Any] = [
        turn_started().model_validate({**turn_started().model_dump(), **turn}),
        *open_call.stream(WEATHER)[:2],
        *ended_call.stream(WEATHER),
        TurnCancelled.model_validate(
            {**cancel("c").model_dump(), **turn, "command_id": hostile, "turn_id": hostile + "9"}
        ),
        signed(ToolDisabled, hostile, tool=hostile, tenant=tenant),
        signed(
            ResponseQuarantined, hostile, tenant=tenant, turn_id=hostile, response_id=hostile + "q"
        ),
        signed(TenantStopped, hostile, tenant=tenant + "s"),
    ]
    first = Assembler(registry(), verifier=AllowUnsigned())
    changes = []
    for event in events:
        first.handle(event, 100.0)
        changes += first.drain_changes()
    assert any(c.key.startswith("text:") for c in changes)
    assert len(first.control.seen_commands) == 4
    second = Assembler(registry(), verifier=AllowUnsigned())
    for change in changes:
        second.restore(change.key, change.value)
    assert [b.snapshot() for b in second.calls.values()] == [
        b.snapshot() for b in first.calls.values()
    ]
    assert {k: b.texts for k, b in second.calls.items()} == {
        k: b.texts for k, b in first.calls.items()
    }
    assert second.inert == first.inert
    _same_control(first, second)


def _same_control(first: Assembler, second: Assembler) -> None:
    for table in ("turns", "responses", "disabled_tools", "stopped_tenants", "seen_commands"):
        assert getattr(second.control, table) == getattr(first.control, table), table


@pytest.mark.parametrize("hostile", HOSTILE_IDS)
def test_2_state_keys_survive_ids_that_validation_refuses(hostile: str) -> None:
    """Defense in depth: state written for any strings reads back exactly (keys and values)."""
    from processor.core.command_ids import SeenCommand, command_scope
    from processor.core.control import (
        ControlState,
        Flag,
        ResponseRecord,
        TurnRecord,
        command_state_key,
        decode_state_value,
        encode_state_value,
        response_state_key,
        tenant_state_key,
        tool_state_key,
        turn_state_key,
    )

    first = ControlState()
    first.turns[(hostile, hostile)] = TurnRecord(tenant=hostile, turn_id=hostile, actor=hostile)
    first.turns[(hostile + "x", "")] = TurnRecord(tenant=hostile + "x", turn_id="")
    first.responses[(hostile, hostile, hostile)] = ResponseRecord(quarantined=True)
    first.disabled_tools[(hostile, hostile)] = Flag(hostile, hostile, 1.0)
    first.stopped_tenants[hostile] = Flag(hostile, "r", 1.0)
    scope = command_scope(cancel("c").model_copy(update={"tenant": hostile, "command_id": hostile}))
    first.seen_commands[scope] = SeenCommand(at=1.0, digest="d")
    keys = [
        turn_state_key(hostile, hostile),
        turn_state_key(hostile + "x", ""),
        response_state_key(hostile, hostile, hostile),
        tool_state_key(hostile, hostile),
        tenant_state_key(hostile),
        command_state_key(scope),
    ]
    assert len(set(keys)) == len(keys)
    second = ControlState()
    for key in keys:
        key.encode("utf-8")  # every key can be a Kafka key
        value = first.snapshot_entry(key)
        assert value is not None, key
        second.restore_entry(key, decode_state_value(encode_state_value(value)))
    for table in ("turns", "responses", "disabled_tools", "stopped_tenants", "seen_commands"):
        assert getattr(second, table) == getattr(first, table), table


def test_2_encoded_keys_are_injective_where_a_separator_join_was_not() -> None:
    pairs = [(("a\x1fb", "c"), ("a", "b\x1fc")), (("a/b", "c"), ("a", "b/c")), (("\ud800",), ("",))]
    for one, other in pairs:
        assert encode_key(one) != encode_key(other)
        assert decode_key(encode_key(one)) == list(one)
        assert stable_id(*one) != stable_id(*other)
    assert decode_key(encode_key(("\ud83d\ude00", "\ud83d", "x"))) == [
        "\ud83d\ude00",
        "\ud83d",
        "x",
    ]


# =============================================================== 3. command-id namespace


def test_3_an_unsigned_record_cannot_burn_a_signed_stop() -> None:
    run, call = signed_run(), Call()
    run.feed(turn_started(), *call.stream(WEATHER)[:2])
    run.feed(cancel("OPS-42", turn_id="turn-other"))  # a gateway guesses the operator's id
    run.feed(signed(TenantStopped, "OPS-42", tenant="acme"))
    run.feed(*call.stream(WEATHER)[2:])
    assert run.dispatches == []
    assert run.ledger("call_0").terminal_reason == "tenant_stopped"
    assert ("tenant.stopped", "applied", None) in audits(run)
    # two commands sharing an id keep two audit entries (processor audit merges by audit_id)
    assert len({a.audit_id for a in run.of(Audit) if a.command_id == "OPS-42"}) == 2


def test_3_another_operator_or_tenant_cannot_burn_a_command_id() -> None:
    run = signed_run()
    run.feed(signed(TenantResumed, "OPS-7", signer=OTHER_OPS, tenant="acme"))
    run.feed(signed(TenantStopped, "OPS-7", tenant="globex"))
    run.feed(signed(TenantStopped, "OPS-7", tenant="acme"))
    assert set(run.assembler.control.stopped_tenants) == {"acme", "globex"}
    assert [o for _t, o, _r in audits(run)] == ["applied", "applied", "applied"]


def test_15_6_a_cancel_id_reused_by_another_turn_still_cancels() -> None:
    run, first, second = Run(), Call(call_id="c1"), Call(call_id="c2", turn_id="turn-2")
    run.feed(turn_started(), turn_started("turn-2"), *second.stream(WEATHER)[:2])
    run.feed(cancel("cancel-1", turn_id="turn-1"), cancel("cancel-1", turn_id="turn-2"))
    run.feed(*second.stream(WEATHER)[2:], *first.stream(WEATHER))
    assert run.dispatches == []
    assert run.ledger("c2").terminal_reason == "user_stop"


def test_15_6_safety_commands_always_apply_grants_stay_deduplicated() -> None:
    run = signed_run()
    stop = signed(TenantStopped, "OPS-1", tenant="acme")
    run.feed(stop, signed(TenantResumed, "OPS-2", tenant="acme"))
    run.feed(stop)  # an identical repeat: a no-op, audited duplicate
    assert "acme" not in run.assembler.control.stopped_tenants
    restop = OPS.sign(stop.model_copy(update={"reason": "incident 8", "signature": None}))
    run.feed(restop)  # the same id with different content: a conflict, applied all the same
    assert "acme" in run.assembler.control.stopped_tenants
    run.feed(signed(TenantResumed, "OPS-2", tenant="acme"))  # a grant's id again: refused
    assert "acme" in run.assembler.control.stopped_tenants
    assert audits(run) == [
        ("tenant.stopped", "applied", None),
        ("tenant.resumed", "applied", None),
        ("tenant.stopped", "duplicate", None),
        ("tenant.stopped", "conflict", None),
        ("tenant.resumed", "rejected", "replayed"),
    ]


def _fence_dispatch(**overrides: Any) -> Dispatch:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "turn_id": "turn-1",
        "response_id": "r1",
        "item_id": "i1",
        "call_id": "c1",
        "dispatch_id": "d1",
        "tool": "get_weather",
        "tool_version": "2",
        "arguments": {"city": "Paris"},
        "args_digest": "sha256:x",
        "actor": "alice",
        "provider": "test",
        "terminal_event_id": "e1",
        "ts": 100.0,
    }
    return Dispatch(**{**fields, **overrides})


def test_3_the_fence_follows_the_same_rule() -> None:
    fence = FenceState(verifier=KEYRING, canonical_tool=lambda n: n)
    fence.apply(turn_started(), 100.0)
    assert fence.apply(cancel("OPS-42", turn_id="other"), 100.0) is ApplyOutcome.APPLIED
    stop = signed(TenantStopped, "OPS-42", tenant="acme")
    assert fence.apply(stop, 100.0) is ApplyOutcome.APPLIED
    refusal = fence.check(_fence_dispatch(), 101.0)
    assert refusal is not None and refusal.code is RefusalCode.TENANT_STOPPED
    # a cancellation whose id was used by another turn is still seen at execution time
    fence = FenceState(verifier=KEYRING, canonical_tool=lambda n: n)
    fence.apply(turn_started(), 100.0)
    fence.apply(cancel("c-1", turn_id="turn-9"), 100.0)
    assert fence.apply(cancel("c-1"), 100.0) is ApplyOutcome.APPLIED
    assert fence.apply(cancel("c-1"), 100.0) is ApplyOutcome.DUPLICATE
    assert fence.apply(cancel("c-1", reason="superseded"), 100.0) is ApplyOutcome.CONFLICT
    refusal = fence.check(_fence_dispatch(), 101.0)
    assert refusal is not None and refusal.code is RefusalCode.TURN_CANCELLED


# =============================================================== 4. per-tool bounds, any order

SMALL_TOOLS = {
    "tools": [
        {**TOOLS["tools"][0], "limits": {"max_bytes": 4096, "max_deltas": 8}},
        *TOOLS["tools"][1:],
    ]
}


@pytest.mark.parametrize("start_at", ["first", "before_end", "never_before_deltas"])
def test_4_a_tools_byte_limit_holds_when_deltas_arrive_before_call_started(start_at: str) -> None:
    run, call = Run(assembler=Assembler(registry(SMALL_TOOLS), Limits())), Call()
    big = '{"city": "' + "x" * 200_000 + '"}'
    deltas = [call.delta(i + 1, big[i * 50_000 : (i + 1) * 50_000]) for i in range(5)]
    events: list[Any] = [turn_started(), *deltas, call.start(), call.end(6)]
    if start_at == "first":
        events = [turn_started(), call.start(), *deltas, call.end(6)]
    elif start_at == "before_end":
        events = [turn_started(), *deltas[:4], call.start(), deltas[4], call.end(6)]
    run.feed(*events)
    assert run.dispatches == []
    assert run.ledger("call_0").terminal_reason == "size_limit"


def test_4_a_tools_delta_count_holds_in_any_order() -> None:
    run, call = Run(assembler=Assembler(registry(SMALL_TOOLS), Limits())), Call()
    text = WEATHER + " " * 20
    deltas = [call.delta(i + 1, ch) for i, ch in enumerate(text)]
    run.feed(turn_started(), *deltas, call.start(), call.end(len(text) + 1))
    assert run.dispatches == []
    assert run.ledger("call_0").terminal_reason == "size_limit"


# =============================================================== 5. times and the fence


def _confirmed_record(issued_at: Any) -> bytes:
    record: dict[str, Any] = orjson.loads(
        encode(Call(item_id="i1", response_id="r1", call_id="c1").confirm("sha256:x"))
    )
    record["issued_at"] = issued_at
    return orjson.dumps(record)


@pytest.mark.parametrize("issued_at", ["nan", "inf", "-inf", "1e999", NOW + 3600, True, "100"])
def test_5_a_confirmation_with_a_bad_or_future_time_never_passes_the_fence(issued_at: Any) -> None:
    fence = FenceState(verifier=KEYRING, canonical_tool=lambda n: n)
    fence.apply(turn_started().model_copy(update={"issued_at": NOW}), NOW)
    assert fence.apply_record(_confirmed_record(issued_at), NOW) is ApplyOutcome.UNDECODABLE
    dispatch = _fence_dispatch(confirmation_ref="conf-1", ts=NOW)
    refusal = fence.check(dispatch, NOW + 1, Requirements(confirmation_max_age_seconds=60))
    assert refusal is not None and refusal.code is RefusalCode.CONFIRMATION_MISSING


def test_5_the_worker_dead_letters_a_future_record() -> None:
    assembler = Assembler(registry())
    payload = orjson.dumps({**orjson.loads(encode(Call(ts=NOW + 3600).start()))})
    [dead] = assembler.handle(payload, NOW, source=SOURCE)
    assert isinstance(dead, DeadLetter) and dead.reason == "future_time"
    # a producer's own record timestamp (CreateTime on fragments) does not vouch for it
    [dead] = assembler.handle(payload, NOW, source=SOURCE, record_time=NOW + 3600)
    assert isinstance(dead, DeadLetter) and dead.reason == "future_time"
    skewed = orjson.dumps({**orjson.loads(encode(Call(ts=NOW + 30).start()))})
    assert not any(isinstance(o, DeadLetter) for o in assembler.handle(skewed, NOW, source=SOURCE))


def test_5_the_fence_refuses_a_tool_disabled_by_alias_without_a_registry() -> None:
    fence = FenceState(verifier=KEYRING)  # no registry: it cannot tell an alias
    fence.apply(turn_started(), 100.0)
    fence.apply(signed(ToolDisabled, "d-1", tool="getWeather", tenant="acme"), 100.0)
    refusal = fence.check(_fence_dispatch(tool="get_weather"), 101.0)
    assert refusal is not None and refusal.code is RefusalCode.TOOL_DISABLED
    # a disabled tool the executor knows by its declared name is not an alias of another one
    fence = FenceState(verifier=KEYRING, known_tools=frozenset({"get_weather", "book_slot"}))
    fence.apply(turn_started(), 100.0)
    fence.apply(signed(ToolDisabled, "d-2", tool="book_slot", tenant="acme"), 100.0)
    assert fence.check(_fence_dispatch(tool="get_weather"), 101.0) is None
    fence.apply(signed(ToolDisabled, "d-3", tool="getWeather", tenant="acme"), 100.0)
    refusal = fence.check(_fence_dispatch(tool="get_weather"), 101.0)
    assert refusal is not None and refusal.code is RefusalCode.TOOL_DISABLED
    # with the registry, the alias resolves and other tools still run
    names = {"getWeather": "get_weather", "get_weather": "get_weather", "book_slot": "book_slot"}
    fence = FenceState(verifier=KEYRING, canonical_tool=names.get)
    fence.apply(turn_started(), 100.0)
    fence.apply(signed(ToolDisabled, "d-1", tool="getWeather", tenant="acme"), 100.0)
    refusal = fence.check(_fence_dispatch(tool="get_weather"), 101.0)
    assert refusal is not None and refusal.code is RefusalCode.TOOL_DISABLED
    assert fence.check(_fence_dispatch(tool="book_slot"), 101.0) is None


# =============================================================== 6. strict types, surrogates


@pytest.mark.parametrize(
    ("field", "value"),
    [("v", True), ("v", 1.0), ("seq", True), ("seq", "3"), ("ts", "100"), ("ts", True)],
)
def test_6_the_wire_contract_is_strict(field: str, value: Any) -> None:
    record: dict[str, Any] = orjson.loads(encode(Call().delta(3, "{")))
    record[field] = value
    with pytest.raises(RecordRejected):
        decode_input(orjson.dumps(record))


def test_6_times_accept_json_integers() -> None:
    record: dict[str, Any] = orjson.loads(encode(Call().delta(3, "{")))
    record["ts"] = 1_700_000_000
    event = decode_input(orjson.dumps(record))
    assert isinstance(event, CallDelta) and event.ts == 1_700_000_000.0


def test_6_a_lone_surrogate_in_argument_text_fails_the_call_inert() -> None:
    run, call = Run(), Call()
    run.feed(turn_started(), call.start(), call.delta(1, '{"city": "\ud800'))
    run.assembler.drain_changes()  # no encode path raises
    run.feed(call.delta(2, '"}'), call.end(3))
    assert run.dispatches == []
    [ledger] = [o for o in run.outputs if isinstance(o, Ledger)]
    assert ledger.terminal_reason == "malformed_json"
    for output in run.outputs:
        encode(output)
    surrogate = call.delta(1, "\ud800")
    with pytest.raises(RecordRejected):  # written with escapes, refused by the strict reader
        decode_input(encode(surrogate))


def test_6_the_call_key_encoding_never_raises() -> None:
    key = CallKey.model_construct(
        tenant="\ud800", turn_id="t", response_id="r", item_id="i", call_id="c"
    )
    assert decode_key(key.encoded()) == ["\ud800", "t", "r", "i", "c"]


def test_6_free_text_with_a_lone_surrogate_is_refused_so_signing_never_raises() -> None:
    """ctl builds commands from argv (surrogate-escaped on Linux): refuse, do not crash signing."""
    with pytest.raises(ValueError):
        TenantStopped(tenant="acme", command_id="c", issued_by="o", issued_at=1.0, reason="\udcff")


def test_2_ctl_refuses_an_id_outside_the_alphabet_with_a_clear_error() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "processor.cli", "ctl", "start-turn", "--tenant", "a/b",
         "--turn", "t1", "--actor", "alice", "--bootstrap-servers", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "invalid command: tenant: string_pattern_mismatch" in result.stderr
    assert "Traceback" not in result.stderr
