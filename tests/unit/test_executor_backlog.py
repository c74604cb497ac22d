"""The executor's backlog (processor.executor.backlog): records in hand, in offset order."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.executor.backlog import Backlog

P0, P1 = TopicPartition("d", 0), TopicPartition("d", 1)


def _records(tp: TopicPartition, offsets: range) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(tp.topic, tp.partition, o, 0, 0, None, b"", None, 0, 0, [])
        for o in offsets
    ]


def _offsets(records: list[ConsumerRecord]) -> list[int]:
    return [r.offset for r in records]


def test_what_is_not_decided_comes_back_first_in_offset_order() -> None:
    backlog = Backlog(high=100)
    backlog.add({P0: _records(P0, range(0, 5)), P1: _records(P1, range(10, 12))})
    taken = backlog.take(lambda tp: tp == P0)
    assert _offsets(taken[P0]) == [0, 1, 2, 3, 4] and P1 not in taken
    backlog.add({P0: _records(P0, range(5, 8))})  # a poll while the round runs
    backlog.put_back({P0: taken[P0][2:]})  # 0 and 1 decided
    assert _offsets(backlog.take(lambda tp: True)[P0]) == [2, 3, 4, 5, 6, 7]
    assert len(backlog) == 0


def test_a_dropped_partition_is_forgotten_and_the_others_kept() -> None:
    backlog = Backlog(high=100)
    backlog.add({P0: _records(P0, range(3)), P1: _records(P1, range(3))})
    assert backlog.drop(P0) == 0  # where a partition kept must be sought back to
    assert backlog.drop(P0) is None
    assert backlog.size(P0) == 0 and backlog.size(P1) == 3
    assert not backlog.ready(lambda tp: tp == P0) and backlog.ready(lambda tp: True)


def test_a_full_partition_is_paused_once_and_resumed_at_half() -> None:
    backlog = Backlog(high=4)
    backlog.add({P0: _records(P0, range(4)), P1: _records(P1, range(3))})
    assert backlog.to_pause() == [P0]
    assert backlog.to_pause() == []  # already paused here
    assert backlog.to_resume([P0, P1]) == []  # still full
    taken = backlog.take(lambda tp: tp == P0)
    backlog.put_back({P0: taken[P0][2:]})  # two left: half the high mark
    assert backlog.to_resume([P0, P1]) == [P0]
    backlog.add({P1: _records(P1, range(3, 5))})
    assert backlog.to_pause() == [P1]
    assert backlog.to_resume([P0]) == []  # P1 revoked meanwhile: forgotten, not resumed
    assert backlog.paused == set()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 5), st.booleans()), max_size=30))
def test_every_record_is_decided_once_in_offset_order(steps: list[tuple[int, int, bool]]) -> None:
    """Polls, rounds that decide a prefix of what they took and put the rest back, and seeks
    (drop, then the consumer's position again): what is decided is the partition's offsets,
    each once, in order."""
    backlog = Backlog(high=1000)
    position = 0  # the consumer's: the next offset a poll returns
    decided: list[int] = []
    for polled, decide, seek in steps:
        backlog.add({P0: _records(P0, range(position, position + polled))})
        position += polled
        taken = backlog.take(lambda tp: True).get(P0, [])
        decided += _offsets(taken[:decide])
        if seek and taken[decide:]:  # a failed transaction: fetched again from there
            backlog.drop(P0)
            position = taken[decide].offset
        else:
            backlog.put_back({P0: taken[decide:]})
    decided += _offsets(backlog.take(lambda tp: True).get(P0, []))
    assert decided == list(range(len(decided)))
