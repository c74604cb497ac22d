"""``processor doctor transactions``: its flags, and the verdict on each open transaction
(:func:`processor.kafka.txn_remedies.judge`, pure). The broker side, with the markers written,
is ``tests/integration/test_doctor_transactions.py``.

Issue 38 items 2 and 3: the doctor aborted every transaction idle past ``--older-than`` (a
negative or NaN one too), whatever its coordinator had decided and whoever it belonged to.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from processor.cli.parser import build_parser
from processor.kafka.txn_admin import OpenTransaction, Previous
from processor.kafka.txn_remedies import Verdict, judge, own_transactional_ids
from processor.settings import Settings


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf", "NaN", "1e400", "soon"])
def test_older_than_must_be_a_finite_number_of_seconds(value: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["doctor", "transactions", "--older-than", value])
    assert exit_.value.code == 2  # usage
    assert "--older-than" in err.getvalue()


def test_older_than_zero_and_the_end_flags_parse() -> None:
    args = build_parser().parse_args(
        ["doctor", "transactions", "--older-than", "0", "--abort", "--yes"]
    )
    assert (args.older_than, args.end, args.yes) == (0.0, True, True)


PID, EPOCH, START, TIMEOUT = 7, 3, 1_000_000, 60_000
TXN = OpenTransaction("p.dispatch", 1, PID, EPOCH, 0, 42, last_timestamp=0)
LATE = START + TIMEOUT + 1  # past the transaction's own timeout (no grace)


def _coordinator(state: str, epoch: int = EPOCH) -> dict[int, tuple[str, Previous]]:
    return {PID: ("app-1", Previous(PID, state, epoch, TIMEOUT, START, frozenset()))}


@pytest.mark.parametrize(
    ("owners", "now", "verdict"),
    [
        ({}, LATE, Verdict.FOREIGN),  # another application's: never touched
        (_coordinator("Ongoing"), LATE * 10, Verdict.OPEN),  # its coordinator ends it
        (_coordinator("CompleteCommit"), LATE, Verdict.COMMIT),
        (_coordinator("PrepareCommit"), LATE, Verdict.COMMIT),
        (_coordinator("CompleteAbort"), LATE, Verdict.ABORT),
        (_coordinator("PrepareAbort"), LATE, Verdict.ABORT),
        (_coordinator("CompleteCommit"), LATE - 2, Verdict.ENDING),  # within its timeout
        (_coordinator("CompleteAbort"), LATE - 2, Verdict.ENDING),
        # the coordinator moved on: how it ended is no longer known, no marker is guessed
        (_coordinator("Empty", EPOCH + 1), LATE, Verdict.UNDECIDED),
        (_coordinator("CompleteCommit", EPOCH + 1), LATE, Verdict.UNDECIDED),
        (_coordinator("CompleteAbort", EPOCH + 1), LATE, Verdict.UNDECIDED),
        (_coordinator("Empty"), LATE, Verdict.UNDECIDED),
        (_coordinator("Dead"), LATE, Verdict.UNDECIDED),
    ],
)
def test_the_verdict_follows_the_coordinator(
    owners: dict[int, tuple[str, Previous]], now: int, verdict: Verdict
) -> None:
    finding = judge(TXN, owners, now, grace_ms=0)
    assert finding.verdict is verdict, finding.why
    assert finding.acts == (verdict in (Verdict.COMMIT, Verdict.ABORT))


def test_the_grace_is_counted_past_the_transaction_s_own_timeout() -> None:
    owners = _coordinator("CompleteCommit")
    assert judge(TXN, owners, LATE, grace_ms=5000).verdict is Verdict.ENDING
    assert judge(TXN, owners, LATE + 5000, grace_ms=5000).verdict is Verdict.COMMIT


def test_only_this_deployment_s_transactional_ids_are_candidates() -> None:
    settings = Settings(application_id="shop-assembler")
    ids = own_transactional_ids(settings, 2, 3, ["shop-exec", "shop-mcp", "shop-exec"])
    assert ids == ["shop-assembler-0", "shop-assembler-1"] + [
        f"{g}.executor.{p}" for g in ("shop-exec", "shop-mcp") for p in range(3)
    ]
