"""The execution-time fence (pure): control facts in, "may this dispatch run now?" out."""

from __future__ import annotations

from typing import Any

from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.authn import AllowUnsigned
from processor.core.events import (
    CallConfirmed,
    CallDenied,
    Dispatch,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    TurnStarted,
    encode,
)
from processor.executor.fence import (
    ApplyOutcome,
    FenceState,
    RefusalCode,
    Requirements,
)
from processor.kafka.partitioner import partition_for
from processor.ops.signing import Keyring, OperatorSigner, generate_keypair

NOW = 1_700_000_000.0
PRIV, PUB = generate_keypair()
ROGUE_PRIV, _ROGUE_PUB = generate_keypair()
KEYRING = Keyring.from_document(
    {
        "keys": [
            {"key_id": "ops-acme", "operator": "alice", "public_key": PUB, "tenants": ["acme"]},
        ]
    }
)
SIGNER = OperatorSigner(PRIV, key_id="ops-acme", issued_by="alice")
FORGER = OperatorSigner(ROGUE_PRIV, key_id="ops-acme", issued_by="alice")

_ids = iter(range(10**9))


def cid() -> str:
    return f"cmd-{next(_ids)}"


def dispatch(**overrides: Any) -> Dispatch:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "turn_id": "t1",
        "response_id": "r1",
        "item_id": "i1",
        "call_id": "c1",
        "dispatch_id": "d1",
        "tool": "book_slot",
        "tool_version": "1",
        "arguments": {"party_size": 2},
        "args_digest": "digest-1",
        "actor": "user-1",
        "provider": "openai",
        "terminal_event_id": "e9",
        "confirmation_ref": None,
        "ts": NOW,
    }
    fields.update(overrides)
    return Dispatch(**fields)


def started(turn: str = "t1", actor: str = "user-1", tenant: str = "acme") -> TurnStarted:
    return TurnStarted(
        command_id=cid(),
        issued_by="gateway",
        issued_at=NOW,
        tenant=tenant,
        turn_id=turn,
        actor=actor,
    )


def cancelled(turn: str = "t1", reason: str = "user_stop") -> TurnCancelled:
    return TurnCancelled(
        command_id=cid(),
        issued_by="gateway",
        issued_at=NOW,
        tenant="acme",
        turn_id=turn,
        reason=reason,
    )


def _call_command(**overrides: Any) -> dict[str, Any]:
    """The fields of a call.confirmed / call.denied for call key (acme, t1, r1, i1, c1)."""
    fields: dict[str, Any] = {
        "command_id": cid(),
        "issued_by": "gateway",
        "issued_at": NOW,
        "tenant": "acme",
        "turn_id": "t1",
        "response_id": "r1",
        "item_id": "i1",
        "call_id": "c1",
        "actor": "user-1",
    }
    return {**fields, **overrides}


def confirmed(**overrides: Any) -> CallConfirmed:
    return CallConfirmed(**_call_command(**{"args_digest": "digest-1", **overrides}))


def denied(**overrides: Any) -> CallDenied:
    return CallDenied(**_call_command(**overrides))


def signed(cls: Any, signer: OperatorSigner = SIGNER, ttl: float = 300.0, **target: Any) -> Any:
    command = cls(
        command_id=cid(),
        issued_by=signer.issued_by,
        issued_at=NOW,
        expires_at=NOW + ttl,
        reason="incident 42",
        **target,
    )
    return signer.sign(command)


def bound_fence(**kwargs: Any) -> FenceState:
    fence = FenceState(**{"verifier": KEYRING, **kwargs})
    assert fence.apply(started(), NOW) is ApplyOutcome.APPLIED
    return fence


def code(fence: FenceState, d: Dispatch | None = None, **req: Any) -> RefusalCode | None:
    refusal = fence.check(d or dispatch(), NOW + 1, Requirements(**req))
    return refusal.code if refusal else None


# ------------------------------------------------------------------------------ basics


def test_bound_turn_runs() -> None:
    assert code(bound_fence()) is None


def test_unbound_turn_never_runs() -> None:
    assert code(FenceState(verifier=KEYRING)) is RefusalCode.TURN_NOT_BOUND


def test_dispatch_actor_must_be_the_bound_actor() -> None:
    assert code(bound_fence(), dispatch(actor="mallory")) is RefusalCode.ACTOR_MISMATCH


def test_actor_rebind_is_ignored() -> None:
    fence = bound_fence()
    assert fence.apply(started(actor="mallory"), NOW) is ApplyOutcome.REJECTED
    assert code(fence) is None
    assert code(fence, dispatch(actor="mallory")) is RefusalCode.ACTOR_MISMATCH


def test_cancellation_is_absorbing_and_turn_scoped() -> None:
    fence = bound_fence()
    event = cancelled()
    fence.apply(event, NOW)
    refusal = fence.check(dispatch(), NOW, None)
    assert refusal is not None
    assert refusal.code is RefusalCode.TURN_CANCELLED
    assert refusal.command_id == event.command_id
    fence.apply(started(), NOW)  # nothing revives it
    assert code(fence) is RefusalCode.TURN_CANCELLED
    # a new turn starts with a fresh identity
    fence.apply(started(turn="t2"), NOW)
    assert code(fence, dispatch(turn_id="t2", dispatch_id="d2")) is None


def test_quarantine_hits_only_its_response() -> None:
    fence = bound_fence()
    q = signed(ResponseQuarantined, tenant="acme", turn_id="t1", response_id="r1")
    assert fence.apply(q, NOW) is ApplyOutcome.APPLIED
    assert code(fence) is RefusalCode.QUARANTINED
    assert code(fence, dispatch(response_id="r2")) is None


def test_tool_disable_enable_for_tenant() -> None:
    fence = bound_fence(canonical_tool=lambda name: name)  # a registry that knows both tools
    fence.apply(signed(ToolDisabled, tool="book_slot", tenant="acme"), NOW)
    assert code(fence) is RefusalCode.TOOL_DISABLED
    assert code(fence, dispatch(tool="get_weather")) is None
    fence.apply(signed(ToolEnabled, tool="book_slot", tenant="acme"), NOW)
    assert code(fence) is None


def test_global_tool_disable_needs_a_global_key() -> None:
    fence = bound_fence()
    outcome = fence.apply(signed(ToolDisabled, tool="book_slot", tenant=None), NOW)
    assert outcome is ApplyOutcome.REJECTED  # the acme key is out of scope for every tenant
    assert code(fence) is None
    unsigned_ok = bound_fence(verifier=AllowUnsigned())
    unsigned_ok.apply(signed(ToolDisabled, tool="book_slot", tenant=None), NOW)
    assert code(unsigned_ok) is RefusalCode.TOOL_DISABLED
    unsigned_ok.apply(started(tenant="globex"), NOW)
    assert code(unsigned_ok, dispatch(tenant="globex")) is RefusalCode.TOOL_DISABLED


def test_tool_alias_is_canonicalised() -> None:
    fence = bound_fence(canonical_tool=lambda n: {"bookSlot": "book_slot"}.get(n, n))
    fence.apply(signed(ToolDisabled, tool="bookSlot", tenant="acme"), NOW)
    assert code(fence) is RefusalCode.TOOL_DISABLED


def test_tenant_stop_and_resume() -> None:
    fence = bound_fence()
    fence.apply(signed(TenantStopped, tenant="acme"), NOW)
    assert code(fence) is RefusalCode.TENANT_STOPPED
    fence.apply(signed(TenantResumed, tenant="acme"), NOW)
    assert code(fence) is None


# ------------------------------------------------------------------------------ authentication


def test_forged_unsigned_expired_out_of_scope_commands_change_nothing() -> None:
    fence = bound_fence()
    unsigned = TenantStopped(
        command_id=cid(), issued_by="alice", issued_at=NOW, expires_at=NOW + 60, tenant="acme"
    )
    forged = signed(TenantStopped, signer=FORGER, tenant="acme")
    tampered = signed(TenantStopped, tenant="acme").model_copy(update={"reason": "other"})
    expired = signed(TenantStopped, ttl=10, tenant="acme")
    cross_tenant = signed(TenantStopped, tenant="globex")
    assert fence.apply(unsigned, NOW) is ApplyOutcome.REJECTED
    assert fence.apply(forged, NOW) is ApplyOutcome.REJECTED
    assert fence.apply(tampered, NOW) is ApplyOutcome.REJECTED
    assert fence.apply(expired, NOW + 11) is ApplyOutcome.REJECTED  # appended after expiry
    assert fence.apply(cross_tenant, NOW) is ApplyOutcome.REJECTED
    assert code(fence) is None
    assert code(fence, dispatch(tenant="globex")) is RefusalCode.TURN_NOT_BOUND


def test_replayed_resume_does_not_undo_a_later_stop() -> None:
    fence = bound_fence()
    stop = signed(TenantStopped, tenant="acme")
    resume = signed(TenantResumed, tenant="acme")
    stop_again = signed(TenantStopped, tenant="acme")
    for event in (stop, resume, stop_again):
        assert fence.apply(event, NOW) is ApplyOutcome.APPLIED
    assert fence.apply(resume, NOW) is ApplyOutcome.REPLAYED
    assert code(fence) is RefusalCode.TENANT_STOPPED


def test_replayed_permissive_command_with_an_old_timestamp_is_expired() -> None:
    fence = bound_fence()
    resume = signed(TenantResumed, ttl=300, tenant="acme")
    stop = signed(TenantStopped, ttl=300, tenant="acme")
    later = NOW + 3600
    assert fence.apply(stop, later - 10) is ApplyOutcome.REJECTED  # expired when appended
    fence.apply(signed(TenantStopped, ttl=300, tenant="acme"), NOW + 100)
    fence.apply(started(turn="t9"), later)  # the partition's clock moves on
    # the resume is replayed with its original (forged, in-window) timestamp: rejected
    assert fence.apply(resume, NOW + 100) is ApplyOutcome.REJECTED
    assert code(fence) is RefusalCode.TENANT_STOPPED
    # a restrictive command with an old timestamp still applies (the fence only gets stricter)
    quarantine = signed(ResponseQuarantined, tenant="acme", turn_id="t1", response_id="r1")
    assert fence.apply(quarantine, NOW + 100) is ApplyOutcome.APPLIED


def test_undecodable_and_fragment_records_are_ignored() -> None:
    fence = bound_fence()
    assert fence.apply_record(b"not json", NOW) is ApplyOutcome.UNDECODABLE
    assert fence.apply_record(encode(started(turn="t9")), NOW) is ApplyOutcome.APPLIED


# ------------------------------------------------------------------------------ confirmation


def test_confirmation_right_digest_runs() -> None:
    fence = bound_fence()
    c = confirmed()
    fence.apply(c, NOW)
    d = dispatch(confirmation_ref=c.command_id)
    assert code(fence, d, requires_confirmation=True, confirmation_max_age_seconds=300) is None


def test_confirmation_wrong_digest_wrong_actor_missing_expired() -> None:
    fence = bound_fence()
    wrong_digest = confirmed(args_digest="digest-other")
    wrong_actor = confirmed(actor="mallory")
    other_call = confirmed(call_id="c2")
    old = confirmed(issued_at=NOW - 1000)
    for event in (wrong_digest, wrong_actor, other_call, old):
        fence.apply(event, NOW)
    req = {"requires_confirmation": True, "confirmation_max_age_seconds": 300.0}
    ref = dispatch
    assert (
        code(fence, ref(confirmation_ref=wrong_digest.command_id), **req)
        is RefusalCode.CONFIRMATION_MISMATCH
    )
    assert (
        code(fence, ref(confirmation_ref=wrong_actor.command_id), **req)
        is RefusalCode.CONFIRMATION_WRONG_ACTOR
    )
    assert (
        code(fence, ref(confirmation_ref=other_call.command_id), **req)
        is RefusalCode.CONFIRMATION_MISMATCH
    )
    assert code(fence, ref(confirmation_ref=old.command_id), **req) is (
        RefusalCode.CONFIRMATION_EXPIRED
    )
    assert code(fence, ref(confirmation_ref="nope"), **req) is RefusalCode.CONFIRMATION_MISSING
    assert code(fence, ref(), **req) is RefusalCode.CONFIRMATION_MISSING
    assert code(fence, ref()) is None  # a tool without confirmation needs none


def test_denial_by_the_bound_actor_wins_over_an_earlier_confirmation() -> None:
    fence = bound_fence()
    c = confirmed()
    fence.apply(c, NOW)
    assert fence.apply(denied(actor="mallory"), NOW) is ApplyOutcome.REJECTED
    assert code(fence, dispatch(confirmation_ref=c.command_id)) is None
    fence.apply(denied(), NOW)
    assert code(fence, dispatch(confirmation_ref=c.command_id)) is RefusalCode.CONFIRMATION_DENIED


def test_a_denial_before_the_binding_and_the_dispatch_refuses_the_call() -> None:
    """Issue 38, item 1: a denial committed at any time before the call runs stops it, with or
    without a confirmation, also when it came before the turn's binding."""
    fence = FenceState(verifier=KEYRING)
    fence.apply(denied(), NOW)
    fence.apply(started(), NOW)
    c = confirmed()
    fence.apply(c, NOW)
    assert code(fence) is RefusalCode.CONFIRMATION_DENIED
    assert code(fence, dispatch(confirmation_ref=c.command_id)) is RefusalCode.CONFIRMATION_DENIED
    assert code(fence, dispatch(call_id="c2")) is None  # one call key only


def test_repeated_confirmation_id_is_a_replay() -> None:
    fence = bound_fence()
    c = confirmed()
    assert fence.apply(c, NOW) is ApplyOutcome.APPLIED
    assert fence.apply(c.model_copy(update={"args_digest": "x"}), NOW) is ApplyOutcome.REPLAYED
    assert code(fence, dispatch(confirmation_ref=c.command_id)) is None


def test_stale_dispatch_and_forget() -> None:
    fence = bound_fence()
    old_cancel = cancelled(turn="t-old").model_copy(update={"issued_at": NOW - 10_000})
    assert fence.apply(old_cancel, NOW - 10_000) is ApplyOutcome.APPLIED
    assert fence.forget(NOW - 5_000) >= 1
    old = dispatch(turn_id="t-old", ts=NOW - 10_000)
    assert code(fence, old, max_dispatch_age_seconds=5_000) is RefusalCode.STALE_DISPATCH


# ------------------------------------------------------------------------------ properties

TENANTS = ("acme", "globex")
TURNS = ("t1", "t2")
TOOLS = ("book_slot", "get_weather")


def _control_events() -> st.SearchStrategy[Any]:
    tenant = st.sampled_from(TENANTS)
    turn = st.sampled_from(TURNS)
    tool = st.sampled_from(TOOLS)
    return st.one_of(
        st.builds(lambda t, u: started(turn=u, tenant=t), tenant, turn),
        st.builds(
            lambda t, u: TurnCancelled(
                command_id=cid(), issued_by="g", issued_at=NOW, tenant=t, turn_id=u
            ),
            tenant,
            turn,
        ),
        st.builds(lambda t: signed(TenantStopped, tenant=t), tenant),
        st.builds(lambda t: signed(TenantResumed, tenant=t), tenant),
        st.builds(lambda t, x: signed(ToolDisabled, tool=x, tenant=t), tenant, tool),
        st.builds(lambda t, x: signed(ToolEnabled, tool=x, tenant=t), tenant, tool),
        st.builds(
            lambda t, u: signed(ResponseQuarantined, tenant=t, turn_id=u, response_id="r1"),
            tenant,
            turn,
        ),
    )


def _forgeries() -> st.SearchStrategy[Any]:
    tenant = st.sampled_from(TENANTS)
    tool = st.sampled_from(TOOLS)
    return st.one_of(
        st.builds(lambda t: signed(TenantStopped, signer=FORGER, tenant=t), tenant),
        st.builds(lambda t: signed(TenantResumed, signer=FORGER, tenant=t), tenant),
        st.builds(lambda x: signed(ToolEnabled, signer=FORGER, tool=x, tenant="acme"), tool),
        st.builds(
            lambda t: TenantResumed(
                command_id=cid(), issued_by="alice", issued_at=NOW, expires_at=NOW + 5, tenant=t
            ),
            tenant,
        ),
    )


def _verdicts(fence: FenceState) -> list[RefusalCode | None]:
    out = []
    for tenant in TENANTS:
        for turn in TURNS:
            for tool in TOOLS:
                d = dispatch(tenant=tenant, turn_id=turn, tool=tool)
                refusal = fence.check(d, NOW, None)
                out.append(refusal.code if refusal else None)
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(_control_events(), max_size=12), st.data())
def test_forged_commands_never_change_a_verdict(events: list[Any], data: st.DataObject) -> None:
    clean = FenceState(verifier=KEYRING)
    noisy = FenceState(verifier=KEYRING)
    for event in events:
        clean.apply(event, NOW)
        for forged in data.draw(st.lists(_forgeries(), max_size=2)):
            assert noisy.apply(forged, NOW) is ApplyOutcome.REJECTED
        noisy.apply(event, NOW)
    assert _verdicts(clean) == _verdicts(noisy)


@settings(max_examples=150, deadline=None)
@given(st.lists(_control_events(), max_size=12), st.data())
def test_replays_never_change_a_verdict(events: list[Any], data: st.DataObject) -> None:
    clean = FenceState(verifier=KEYRING)
    replayed = FenceState(verifier=KEYRING)
    history: list[Any] = []
    for event in events:
        clean.apply(event, NOW)
        replayed.apply(event, NOW)
        history.append(event)
        if data.draw(st.booleans()):
            replayed.apply(data.draw(st.sampled_from(history)), NOW)
    assert _verdicts(clean) == _verdicts(replayed)


@settings(max_examples=150, deadline=None)
@given(st.lists(_control_events(), max_size=12), st.sampled_from(TURNS))
def test_cancellation_is_absorbing_whatever_follows(events: list[Any], turn: str) -> None:
    fence = FenceState(verifier=AllowUnsigned())
    fence.apply(started(turn=turn), NOW)
    fence.apply(cancelled(turn=turn), NOW)
    for event in events:
        fence.apply(event, NOW)
    assert fence.check(dispatch(turn_id=turn), NOW, None) is not None


@given(st.binary(max_size=64))
def test_partition_for_is_in_range(key: bytes) -> None:
    assert 0 <= partition_for(key, 6) < 6


def test_murmur2_known_values() -> None:
    """The partitioner agrees with the Java client's test values (Utils.murmur2)."""
    java = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, value in java.items():
        assert aiokafka_murmur2(key) & 0x7FFFFFFF == value & 0x7FFFFFFF
        assert partition_for(key, 7) == (value & 0x7FFFFFFF) % 7
