"""The two rules of CONSUMER_WORKERS, over generated polls: a key's messages stay together and in
order, and a partition's stored offset never passes a message that is not done."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from effectively_once.consumer.lanes import acknowledged_prefix, split_by_key


@dataclass(frozen=True)
class _Message:
    partition_number: int
    offset_number: int

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self.partition_number

    def offset(self) -> int:
        return self.offset_number


keyed = st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 1000)), max_size=60)


@given(items=keyed, lanes=st.integers(1, 8))
def test_each_keys_items_go_to_one_lane_in_their_order(items: list[tuple[str, int]], lanes: int) -> None:
    split = split_by_key(items, lanes, key=lambda item: item[0])
    assert len(split) == lanes and sorted(x for lane in split for x in lane) == sorted(items)
    for key in {k for k, _ in items}:
        holding = [lane for lane in split if any(k == key for k, _ in lane)]
        assert len(holding) == 1
        assert [x for x in holding[0] if x[0] == key] == [x for x in items if x[0] == key]


polls = st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=40)


@given(poll=polls, start=st.integers(0, 10_000))
def test_the_stored_offset_is_the_end_of_each_partitions_acknowledged_prefix(
    poll: list[tuple[int, bool]], start: int
) -> None:
    counters: dict[int, int] = {}
    deliveries: list[tuple[Any, bool]] = []
    for partition, done in poll:
        offset = start + counters.get(partition, 0)
        counters[partition] = counters.get(partition, 0) + 1
        deliveries.append((_Message(partition, offset), done))
    stored, gaps = acknowledged_prefix(cast(list[Any], deliveries))
    stored_at = {tp.partition: tp.offset for tp in stored}
    for partition in counters:
        in_order = [(m.offset(), done) for m, done in deliveries if m.partition() == partition]
        first_not_done = next((offset for offset, done in in_order if not done), None)
        if first_not_done is None:
            assert stored_at[partition] == in_order[-1][0] + 1 and partition not in {p for _, p in gaps}
        else:
            assert ("t", partition) in gaps
            assert stored_at.get(partition, first_not_done) == first_not_done  # never past it
            assert (partition in stored_at) == (first_not_done > in_order[0][0])
