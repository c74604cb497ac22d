"""Commands are judged by when they were written, not by when a lagging worker reads them."""

from __future__ import annotations

from pathlib import Path

from processor.core.assembler import Assembler
from processor.core.events import Audit, Dispatch, Proposal, TenantStopped
from processor.core.policy import Limits
from processor.ops.signing import Keyring, OperatorSigner, generate_keypair
from tests.unit.scenario import Call, registry, turn_started

ISSUED = 1_000.0


def signed_stop(tmp_path: Path) -> tuple[Keyring, TenantStopped]:
    private_pem, public_b64 = generate_keypair()
    keyring = Keyring.from_document(
        {"keys": [{"key_id": "k1", "operator": "oncall", "public_key": public_b64, "tenants": ["acme"]}]},
        source="test",
    )
    stop = TenantStopped(
        tenant="acme", command_id="stop-1", issued_by="oncall", issued_at=ISSUED,
        expires_at=ISSUED + 300, reason="incident",
    )  # fmt: skip
    return keyring, OperatorSigner(private_pem, "k1", "oncall").sign(stop)


def test_a_stop_read_late_still_applies_when_it_was_written_in_time(tmp_path: Path) -> None:
    keyring, stop = signed_stop(tmp_path)
    assembler = Assembler(registry(), Limits(), verifier=keyring)
    late = ISSUED + 400  # the worker reads it after its TTL
    [audit] = assembler.handle(stop, late, record_time=ISSUED + 1)
    assert isinstance(audit, Audit) and audit.rejection is None
    call = Call(ts=late)
    outputs = assembler.handle(turn_started(), late)
    for event in call.stream('{"city": "Oslo"}'):
        outputs += assembler.handle(event, late)
    assert not [o for o in outputs if isinstance(o, Dispatch)]


def test_a_stop_written_after_its_expiry_is_rejected(tmp_path: Path) -> None:
    keyring, stop = signed_stop(tmp_path)
    assembler = Assembler(registry(), Limits(), verifier=keyring)
    [audit] = assembler.handle(stop, ISSUED + 1, record_time=ISSUED + 301)
    assert audit.rejection == "expired"


def test_a_confirmation_read_late_counts_when_written_before_the_expiry() -> None:
    assembler, call = Assembler(registry(), Limits()), Call(call_id="p")
    outputs = assembler.handle(turn_started(), 100.0)
    for event in call.stream('{"date": "2026-12-24", "party_size": 2}', tool="book_slot"):
        outputs += assembler.handle(event, 100.0)
    [proposal] = [o for o in outputs if isinstance(o, Proposal)]
    confirm = call.confirm(proposal.args_digest)
    read_late = proposal.expires_at + 500
    outputs = assembler.handle(confirm, read_late, record_time=proposal.expires_at - 1)
    assert len([o for o in outputs if isinstance(o, Dispatch)]) == 1


def test_a_confirmation_written_after_the_expiry_is_refused() -> None:
    assembler, call = Assembler(registry(), Limits()), Call(call_id="p")
    outputs = assembler.handle(turn_started(), 100.0)
    for event in call.stream('{"date": "2026-12-24", "party_size": 2}', tool="book_slot"):
        outputs += assembler.handle(event, 100.0)
    [proposal] = [o for o in outputs if isinstance(o, Proposal)]
    outputs = assembler.handle(
        call.confirm(proposal.args_digest), proposal.expires_at - 5, record_time=proposal.expires_at + 1
    )
    assert not [o for o in outputs if isinstance(o, Dispatch)]
