"""The worker's fetch top-up: two consecutive polls handed on as one batch."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord, TopicPartition

from processor.runtime.worker import merge_fetched

F0, F1, C0 = TopicPartition("f", 0), TopicPartition("f", 1), TopicPartition("c", 0)


def rec(tp: TopicPartition, offset: int) -> ConsumerRecord:
    return ConsumerRecord(tp.topic, tp.partition, offset, 0, 0, b"k", b"v", None, 1, 1, [])


def offsets(batch: dict[TopicPartition, list[ConsumerRecord]]) -> dict[TopicPartition, list[int]]:
    return {tp: [r.offset for r in rs] for tp, rs in batch.items()}


def test_each_partition_keeps_offset_order_and_nothing_is_lost() -> None:
    first = {F0: [rec(F0, 0), rec(F0, 1)], C0: [rec(C0, 7)]}
    then = {F0: [rec(F0, 2)], F1: [rec(F1, 0)]}
    merged = merge_fetched(first, then)
    assert offsets(merged) == {F0: [0, 1, 2], C0: [7], F1: [0]}
    assert offsets(first) == {F0: [0, 1], C0: [7]}  # the polls' own lists are left alone


def test_an_empty_top_up_changes_nothing() -> None:
    first = {F0: [rec(F0, 3)]}
    assert offsets(merge_fetched(first, {})) == {F0: [3]}
