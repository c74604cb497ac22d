"""Named scenarios of ARCHITECTURE.md: each asserts action safety (what may reach dispatch).

User-visible status is asserted separately, in test_assembler_status.py.
"""

from __future__ import annotations

import pytest

from processor.core.events import (
    Audit,
    CallKey,
    Proposal,
    ResponseQuarantined,
    ResponseStatus,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
)
from processor.core.states import CallState
from tests.unit.scenario import Call, Run, turn_cancelled, turn_started

WEATHER = '{"city": "Paris"}'


def op_fields(cid: str) -> dict[str, object]:
    return {"command_id": cid, "issued_by": "oncall", "issued_at": 100.0, "reason": "incident 7"}


def assert_no_dispatch_before_end(run: Run, call: Call, events: list[object]) -> None:
    """Feed all but the terminal event; nothing may have been dispatched for the call."""
    for event in events[:-1]:
        run.feed(event)  # type: ignore[arg-type]
    assert not [d for d in run.dispatches if d.call_id == call.call_id]


class TestHappyPaths:
    def test_single_call_dispatches_once_after_terminal(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started())
        events = call.stream(WEATHER, pieces=5)
        assert_no_dispatch_before_end(run, call, events)
        run.feed(events[-1])
        [dispatch] = run.dispatches
        assert dispatch.arguments == {"city": "Paris"}
        assert (dispatch.tool, dispatch.call_id, dispatch.turn_id) == (
            "get_weather",
            "call_0",
            "turn-1",
        )
        assert dispatch.actor == "alice" and dispatch.dispatch_id
        assert run.assembler.call_state(call.key) is CallState.DISPATCHED

    def test_two_calls_interleaved_never_mix(self) -> None:
        run = Run()
        a, b = Call(call_id="call_a", item_id="i0"), Call(call_id="call_b", item_id="i1")
        run.feed(turn_started())
        ea = a.stream('{"city": "Oslo"}', 4, complete=False)
        eb = b.stream('{"city": "Lima"}', 4, complete=False)
        for x, y in zip(ea[:-1], eb[:-1], strict=True):
            run.feed(x, y)
        assert run.dispatches == []
        run.feed(eb[-1], ea[-1])
        assert run.dispatches == []  # both validated; their response has not completed yet
        run.feed(a.done())
        assert {d.call_id: d.arguments["city"] for d in run.dispatches} == {
            "call_b": "Lima",
            "call_a": "Oslo",
        }

    def test_same_call_id_in_two_responses_are_two_calls(self) -> None:
        run = Run()
        run.feed(turn_started())
        one, two = Call(response_id="r1"), Call(response_id="r2")
        run.feed(*one.stream('{"city": "A"}'), *two.stream('{"city": "B"}'))
        assert sorted(d.arguments["city"] for d in run.dispatches) == ["A", "B"]

    def test_out_of_order_deltas_are_reassembled_by_seq(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.start())
        run.feed(call.delta(3, '"}'), call.delta(1, '{"city'), call.delta(2, '": "Rome'))
        run.feed(call.end(4), call.done())
        assert run.dispatches[0].arguments == {"city": "Rome"}

    def test_no_argument_call_is_a_valid_empty_object(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(actor="root"), call.start("admin_reset", actor="root"))
        run.feed(call.delta(1, "{}"), call.end(2), call.done())
        assert run.dispatches[0].arguments == {}

    def test_fragments_before_turn_binding_wait_for_it(self) -> None:
        run, call = Run(), Call()
        run.feed(*call.stream(WEATHER))
        assert run.dispatches == []
        assert run.assembler.call_state(call.key) is CallState.TERMINAL_CANDIDATE
        run.feed(turn_started())
        assert len(run.dispatches) == 1

    def test_unbound_turn_expires_without_dispatch(self) -> None:
        run, call = Run(), Call()
        run.feed(*call.stream(WEATHER))
        run.tick(100.0 + run.assembler.limits.binding_wait_seconds + 1)
        run.feed(turn_started())
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "permission_denied"


class TestDuplicatesAndGaps:
    def test_identical_duplicate_deltas_are_ignored_and_counted(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.start(), call.delta(1, '{"city": '))
        run.feed(call.delta(1, '{"city": '), call.delta(2, '"Bern"}'), call.delta(2, '"Bern"}'))
        run.feed(call.end(3), call.done())
        assert run.dispatches[0].arguments == {"city": "Bern"}
        assert run.ledger("call_0").duplicate_count == 2

    def test_conflicting_duplicate_fails_the_call(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.start(), call.delta(1, '{"city": "Bern"}'))
        run.feed(call.delta(1, '{"city": "Evil"}'), call.end(2))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "duplicate_conflict"

    def test_terminal_before_a_missing_fragment_is_a_sequence_gap(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.start(), call.delta(1, '{"city": '), call.end(3))
        run.feed(call.delta(2, '"Bern"}'))  # the missing piece arrives too late
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "sequence_gap"

    def test_delta_beyond_terminal_position_is_a_gap(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.start(), call.delta(1, "{"), call.delta(3, "}"), call.end(2))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "sequence_gap"

    def test_terminal_without_start_fails(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.delta(1, WEATHER), call.end(2))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "sequence_gap"

    def test_reordering_window_is_bounded(self) -> None:
        run, call = Run(), Call()
        window = run.assembler.limits.max_reorder_window
        run.feed(turn_started(), call.start())
        run.feed(*[call.delta(seq, " ") for seq in range(2, window + 3)])
        assert run.ledger("call_0").terminal_reason == "sequence_gap"


class TestMalformedAndInvalid:
    def test_malformed_json_fails_early_during_collecting(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.start(), call.delta(1, '{"city": '))
        run.feed(call.delta(2, "]"))  # no object member can start with ]
        assert run.ledger("call_0").terminal_reason == "malformed_json"
        run.feed(call.delta(3, '"x"}'), call.end(4))  # late events change nothing
        assert run.dispatches == []
        assert len([le for le in run.outputs if getattr(le, "type", "") == "ledger"]) == 1

    def test_incomplete_json_at_terminal_fails(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.start(), call.delta(1, '{"city": "Pa'), call.end(2))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "malformed_json"

    @pytest.mark.parametrize(
        "text",
        [
            '{"city": "a", "city": "b"}',  # duplicate member (I-JSON)
            '{"city": "x", "n": 9007199254740993}',  # integer beyond 2**53
            '["Paris"]',  # top level is not an object
        ],
    )
    def test_strict_json_rules(self, text: str) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), *call.stream(text))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason in ("malformed_json", "schema_invalid")

    def test_schema_invalid_names_rule_not_value(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), *call.stream('{"city": "SECRET-VALUE", "extra": 1}'))
        entry = run.ledger("call_0")
        assert entry.terminal_reason == "schema_invalid"
        assert "additionalProperties" in (entry.validation_result or "")
        assert "SECRET" not in entry.model_dump_json()

    def test_format_is_checked(self) -> None:
        run, call = Run(), Call()
        run.feed(
            turn_started(),
            *call.stream('{"date": "2026-13-45", "party_size": 2}', tool="book_slot"),
        )
        assert run.ledger("call_0").terminal_reason == "schema_invalid"

    def test_unknown_tool_fails_and_is_never_guessed(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), *call.stream(WEATHER, tool="get_wether"))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "unknown_tool"

    def test_size_limit(self) -> None:
        from processor.core.assembler import Assembler
        from processor.core.policy import Limits
        from tests.unit.scenario import registry

        run, call = Run(Assembler(registry(), Limits(max_call_bytes=32))), Call()
        run.feed(turn_started(), *call.stream('{"city": "' + "x" * 64 + '"}'))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "size_limit"

    def test_provider_final_arguments_must_match(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.start(), call.delta(1, WEATHER))
        run.feed(call.end(2, arguments='{"city": "Berlin"}'))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "arguments_mismatch"

    def test_provider_final_arguments_may_be_reserialised(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), call.start(), call.delta(1, WEATHER))
        run.feed(call.end(2, arguments='{"city":"Paris"}'), call.done())
        assert len(run.dispatches) == 1


class TestBindingAndPermission:
    def test_call_actor_must_be_the_turns_authenticated_actor(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(actor="alice"), call.start(actor="mallory"))
        run.feed(call.delta(1, WEATHER), call.end(2))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "permission_denied"

    def test_tool_allowed_actors(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(actor="alice"), *call.stream("{}", 1, tool="admin_reset"))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "permission_denied"

    def test_turn_cannot_be_rebound_to_another_actor(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(actor="alice"), turn_started(actor="mallory"))
        assert [a.rejection for a in run.of(Audit)] == ["actor_rebind"]
        run.feed(*call.stream(WEATHER))
        assert run.dispatches[0].actor == "alice"


class TestCancellation:
    def test_cancellation_before_terminal_prevents_dispatch(self) -> None:
        run, call = Run(), Call()
        events = call.stream(WEATHER)
        run.feed(turn_started(), *events[:-1], turn_cancelled())
        run.feed(events[-1])
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "user_stop"

    def test_late_terminal_for_a_cancelled_turn(self) -> None:
        run, late = Run(), Call(call_id="call_late")
        run.feed(turn_started(), turn_cancelled(reason="connection_lost"))
        run.feed(*late.stream(WEATHER))
        assert run.dispatches == []
        assert run.ledger("call_late").terminal_reason == "connection_lost"

    def test_new_user_turn_while_old_fragments_arrive(self) -> None:
        run = Run()
        old, new = Call(turn_id="turn-1"), Call(turn_id="turn-2")  # same call_id "call_0"
        old_events = old.stream('{"city": "Old"}')
        run.feed(turn_started("turn-1"), *old_events[:2])
        run.feed(turn_started("turn-2"), turn_cancelled("turn-1", reason="superseded"))
        run.feed(*new.stream('{"city": "New"}'))
        run.feed(*old_events[2:])  # the old tuple keeps arriving
        assert [(d.turn_id, d.arguments) for d in run.dispatches] == [("turn-2", {"city": "New"})]
        assert run.ledger("call_0", "turn-1").terminal_reason == "superseded"
        assert run.assembler.call_state(new.key) is CallState.DISPATCHED

    def test_old_tuple_cannot_affect_newer_turn(self) -> None:
        run = Run()
        old, new = Call(turn_id="turn-1"), Call(turn_id="turn-2")
        run.feed(turn_started("turn-2"), new.start(), new.delta(1, '{"city": '))
        # an old turn's conflicting delta at the same call id and position
        run.feed(old.start(), old.delta(1, '{"evil": '), turn_cancelled("turn-1"))
        run.feed(new.delta(2, '"Kyiv"}'), new.end(3), new.done())
        assert [d.arguments for d in run.dispatches] == [{"city": "Kyiv"}]

    def test_reconnection_replay_does_not_dispatch_twice(self) -> None:
        run, call = Run(), Call()
        events = call.stream(WEATHER)
        run.feed(turn_started(), *events, *events)
        assert len(run.dispatches) == 1
        # every call event of the replay is late; the repeated response end is not a call event
        assert run.assembler.late_events == len(events) - 1

    def test_reconnection_replay_after_cancel_stays_cancelled(self) -> None:
        run, call = Run(), Call()
        events = call.stream(WEATHER)
        run.feed(turn_started(), *events[:2], turn_cancelled(reason="connection_lost"))
        run.feed(*events)  # the adapter reconnects and replays everything
        assert run.dispatches == []

    def test_response_ended_makes_open_calls_inert(self) -> None:
        run, call = Run(), Call()
        events = call.stream(WEATHER)
        run.feed(turn_started(), *events[:-1], call.response_ended(ResponseStatus.INCOMPLETE))
        run.feed(events[-1])
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "incomplete"

    def test_response_failed_refuses_new_calls_of_that_response(self) -> None:
        run, call = Run(), Call(call_id="call_after")
        run.feed(turn_started(), call.response_ended(ResponseStatus.ERROR), *call.stream(WEATHER))
        assert run.dispatches == []
        assert run.ledger("call_after").terminal_reason == "response_failed"

    def test_idle_timeout(self) -> None:
        run, call = Run(), Call()
        events = call.stream(WEATHER)
        run.feed(turn_started(), *events[:-2])  # everything but call.ended and the response end
        run.tick(100.0 + run.assembler.limits.idle_timeout_seconds + 1)
        run.feed(*events[-2:])
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "idle_timeout"


class TestOperatorCommands:
    def test_emergency_stop_during_collecting(self) -> None:
        run, call, other = Run(), Call(), Call(tenant="globex", call_id="g")
        events = call.stream(WEATHER)
        run.feed(
            turn_started(), turn_started(tenant="globex"), *events[:-1], *other.stream(WEATHER)[:-1]
        )
        run.feed(TenantStopped(tenant="acme", **op_fields("stop-1")))  # type: ignore[arg-type]
        run.feed(events[-1], other.stream(WEATHER)[-1])
        assert [d.tenant for d in run.dispatches] == ["globex"]
        [audit] = [a for a in run.of(Audit) if a.command_id == "stop-1"]
        assert audit.affected == [call.key] and audit.reason == "incident 7"

    def test_emergency_stop_during_terminal_validation(self) -> None:
        """Terminal candidates waiting for their binding, and proposals waiting for consent."""
        run, waiting, proposed = Run(), Call(call_id="w"), Call(call_id="p", turn_id="turn-2")
        run.feed(*waiting.stream(WEATHER))  # terminal, parked: turn-1 not bound yet
        run.feed(
            turn_started("turn-2"),
            *proposed.stream('{"date": "2026-12-24", "party_size": 2}', tool="book_slot"),
        )
        [proposal] = run.of(Proposal)
        run.feed(TenantStopped(tenant="acme", **op_fields("stop-2")))  # type: ignore[arg-type]
        run.feed(turn_started("turn-1"), proposed.confirm(proposal.args_digest))
        assert run.dispatches == []
        assert run.ledger("w").terminal_reason == "tenant_stopped"
        assert run.ledger("p", "turn-2").terminal_reason == "tenant_stopped"

    def test_stopped_tenant_refuses_new_calls_until_resumed(self) -> None:
        run = Run()
        during, after = Call(call_id="during", turn_id="t2"), Call(call_id="after", turn_id="t3")
        run.feed(turn_started("t2"), turn_started("t3"))
        run.feed(TenantStopped(tenant="acme", **op_fields("stop-3")))  # type: ignore[arg-type]
        run.feed(*during.stream(WEATHER))
        run.feed(TenantResumed(tenant="acme", **op_fields("resume-3")))  # type: ignore[arg-type]
        run.feed(*during.stream(WEATHER), *after.stream(WEATHER))  # a replay of `during` too
        assert [d.call_id for d in run.dispatches] == ["after"]

    def test_quarantine_a_response(self) -> None:
        run = Run()
        bad, good = Call(call_id="b", response_id="r-bad"), Call(call_id="g", response_id="r-good")
        run.feed(turn_started(), *bad.stream(WEATHER)[:2], *good.stream(WEATHER)[:2])
        cmd = ResponseQuarantined(
            tenant="acme", turn_id="turn-1", response_id="r-bad", **op_fields("q1")
        )  # type: ignore[arg-type]
        run.feed(cmd, *bad.stream(WEATHER)[2:], *good.stream(WEATHER)[2:])
        assert [d.call_id for d in run.dispatches] == ["g"]

    def test_disable_and_enable_a_tool_by_alias(self) -> None:
        run = Run()
        first, second = Call(call_id="c1"), Call(call_id="c2", response_id="resp-2")
        run.feed(turn_started(), *first.stream(WEATHER, tool="getWeather")[:2])
        run.feed(ToolDisabled(tool="get_weather", tenant=None, **op_fields("d1")))  # type: ignore[arg-type]
        run.feed(*first.stream(WEATHER, tool="getWeather")[2:])
        run.feed(ToolEnabled(tool="getWeather", tenant=None, **op_fields("e1")))  # type: ignore[arg-type]
        run.feed(*second.stream(WEATHER))
        assert [d.call_id for d in run.dispatches] == ["c2"]
        assert run.ledger("c1").terminal_reason == "tool_disabled"

    def test_replayed_command_is_audited_and_ignored(self) -> None:
        run = Run()
        stop = TenantStopped(tenant="acme", **op_fields("stop-9"))  # type: ignore[arg-type]
        resume = TenantResumed(tenant="acme", **op_fields("resume-9"))  # type: ignore[arg-type]
        run.feed(stop, resume, stop, resume)
        # a safety command repeated identically is a no-op (``duplicate``); a grant is a replay
        assert [(a.outcome, a.rejection) for a in run.of(Audit)] == [
            ("applied", None),
            ("applied", None),
            ("duplicate", None),
            ("rejected", "replayed"),
        ]
        assert "acme" not in run.assembler.control.stopped_tenants


class TestRenameAndConfirmation:
    def test_tool_renamed_mid_release_resolves_explicit_alias(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), *call.stream(WEATHER, tool="getWeather"))
        [dispatch] = run.dispatches
        assert (dispatch.tool, dispatch.tool_version) == ("get_weather", "2")
        assert run.ledger("call_0").alias_used == "getWeather"

    def _proposed(self) -> tuple[Run, Call, Proposal]:
        run, call = Run(), Call()
        run.feed(
            turn_started(),
            *call.stream('{"date": "2026-12-24", "party_size": 4}', tool="book_slot"),
        )
        [proposal] = run.of(Proposal)
        assert run.dispatches == []
        return run, call, proposal

    def test_right_digest_dispatches_once(self) -> None:
        run, call, proposal = self._proposed()
        run.feed(call.confirm(proposal.args_digest))
        run.feed(call.confirm(proposal.args_digest, cid="conf-2"))  # repeated
        [dispatch] = run.dispatches
        assert dispatch.confirmation_ref == "conf-1"
        assert dispatch.args_digest == proposal.args_digest
        assert [a.rejection for a in run.of(Audit)] == [None, "not_awaiting_confirmation"]

    def test_reconnect_replay_while_awaiting_confirmation_changes_nothing(self) -> None:
        run, call, proposal = self._proposed()
        run.feed(*call.stream('{"date": "2026-12-24", "party_size": 4}', tool="book_slot"))
        assert run.assembler.call_state(call.key) is CallState.VALIDATED
        run.feed(call.confirm(proposal.args_digest))
        assert [d.arguments for d in run.dispatches] == [{"date": "2026-12-24", "party_size": 4}]

    def test_stale_digest_never_dispatches(self) -> None:
        run, call, _ = self._proposed()
        run.feed(call.confirm("sha256:" + "0" * 64))
        assert run.dispatches == []
        assert [a.rejection for a in run.of(Audit)] == ["digest_mismatch"]
        assert run.assembler.call_state(call.key) is CallState.VALIDATED

    def test_wrong_actor_never_dispatches(self) -> None:
        run, call, proposal = self._proposed()
        run.feed(call.confirm(proposal.args_digest, actor="mallory"))
        assert run.dispatches == []

    def test_expired_confirmation_never_dispatches(self) -> None:
        run, call, proposal = self._proposed()
        run.feed(call.confirm(proposal.args_digest), now=proposal.expires_at + 1)
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "confirmation_expired"

    def test_unanswered_confirmation_expires_on_tick(self) -> None:
        run, call, proposal = self._proposed()
        run.tick(proposal.expires_at + 1)
        run.feed(call.confirm(proposal.args_digest))
        assert run.dispatches == []

    def test_denied(self) -> None:
        run, call, proposal = self._proposed()
        run.feed(call.deny(), call.confirm(proposal.args_digest))
        assert run.dispatches == []
        assert run.ledger("call_0").terminal_reason == "confirmation_denied"

    def test_cancelled_turn_never_dispatches_a_confirmed_call(self) -> None:
        run, call, proposal = self._proposed()
        run.feed(turn_cancelled(), call.confirm(proposal.args_digest))
        assert run.dispatches == []


class TestBoundsAndRecords:
    def test_open_buffer_limit_per_tenant(self) -> None:
        from processor.core.assembler import Assembler
        from processor.core.policy import Limits
        from tests.unit.scenario import registry

        run = Run(Assembler(registry(), Limits(max_open_buffers_per_tenant=2)))
        calls = [Call(call_id=f"c{i}") for i in range(3)]
        run.feed(turn_started(), *[c.start() for c in calls])
        assert run.ledger("c2").terminal_reason == "buffer_limit"
        assert run.assembler.open_buffers == 2
        run.feed(*[e for c in calls for e in c.stream(WEATHER, complete=False)[1:]])
        run.feed(calls[0].done())
        assert sorted(d.call_id for d in run.dispatches) == ["c0", "c1"]
        assert run.assembler.open_buffers == 0

    def test_dead_letter_for_undecodable_records(self) -> None:
        from processor.core.assembler import RecordSource

        run = Run()
        source = RecordSource("fragments", 3, 42)
        for payload, reason in [
            (b"not json", "undecodable"),
            (b'{"v": 2, "type": "call.delta"}', "unknown_version"),
            (b'{"v": 1, "type": "call.teleport"}', "unknown_type"),
            (b'{"v": 1, "type": "call.delta", "seq": 1}', "invalid_record"),
        ]:
            [dl] = run.assembler.handle(payload, 100.0, source=source)
            assert (dl.reason, dl.partition, dl.offset, dl.payload_bytes) == (
                reason,
                3,
                42,
                len(payload),
            )

    def test_dispatch_id_is_stable_across_runs(self) -> None:
        ids = []
        for _ in range(2):
            run, call = Run(), Call()
            run.feed(turn_started(), *call.stream(WEATHER))
            ids.append(run.dispatches[0].dispatch_id)
        assert ids[0] == ids[1]

    def test_inert_state_is_forgotten_after_retention_only(self) -> None:
        run, call = Run(), Call()
        run.feed(turn_started(), *call.stream(WEATHER))
        run.tick(100.0 + run.assembler.limits.retention_seconds - 1)
        assert call.key.as_tuple in run.assembler.inert
        assert run.assembler.call_state(call.key) is CallState.DISPATCHED
        run.tick(100.0 + run.assembler.limits.retention_seconds + 1)
        assert call.key.as_tuple not in run.assembler.inert
        assert run.assembler.call_state(call.key) is CallState.ABSENT
        # a turn goes once every event it could have had is stale: the skew allowance later
        skew = run.assembler.limits.max_clock_skew_seconds
        run.tick(100.0 + run.assembler.limits.retention_seconds + skew + 1)
        assert run.assembler.control.turns == {}

    def test_keys_are_full_tuples(self) -> None:
        key = Call().key
        assert isinstance(key, CallKey)
        assert key.as_tuple == ("acme", "turn-1", "resp-1", "item-0", "call_0")
