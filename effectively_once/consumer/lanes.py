"""Parallel processing inside one group member, in order per key (CONSUMER_WORKERS above 1).

A poll's messages are split into lanes, one per worker, by a stable hash of their key (the order
id): one key's messages all go to one lane, in the order they were polled, so they are processed
strictly one after another; different keys go on in parallel, each worker on its own database
connection. The poll is done when every lane is.

Offsets follow the acknowledged prefix only: for each partition, the offset stored is the end of
its run of acknowledged messages from the start. A message left unacknowledged (its database went
away, a worker stopped) holds its partition's offset back, even when later messages of that
partition were committed: after a crash those are delivered again, and their markers make them
duplicates. Nothing is ever acknowledged ahead of a message that is not done.

No poll happens while a lane runs, so a rebalance never meets work in flight: partitions are
revoked between polls, after the acknowledged prefix was stored.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from confluent_kafka import Message, TopicPartition

T = TypeVar("T")
W = TypeVar("W")


def lane_of(key: str | bytes, lanes: int) -> int:
    """The lane a key's messages go to: the same for a key in every poll and every process."""
    raw = key.encode() if isinstance(key, str) else key
    return zlib.crc32(raw) % lanes


def split_by_key(items: Sequence[T], lanes: int, key: Callable[[T], str | bytes]) -> list[list[T]]:
    """`items` in `lanes` lists: each key's items in one list, in their order."""
    split: list[list[T]] = [[] for _ in range(lanes)]
    for item in items:
        split[lane_of(key(item), lanes)].append(item)
    return split


def acknowledged_prefix(
    deliveries: Sequence[tuple[Message, bool]],
) -> tuple[list[TopicPartition], set[tuple[str, int]]]:
    """For (message, acknowledged) pairs: the offsets to store (each partition's next offset after
    its acknowledged prefix, where that prefix is not empty) and the partitions with a gap."""
    by_partition: dict[tuple[str, int], list[tuple[int, bool]]] = {}
    for message, acknowledged in deliveries:
        where = (message.topic() or "", message.partition() or 0)
        by_partition.setdefault(where, []).append((message.offset() or 0, acknowledged))
    offsets, gaps = [], set()
    for (topic, partition), seen in by_partition.items():
        seen.sort()
        next_offset = None
        for offset, acknowledged in seen:
            if not acknowledged:
                gaps.add((topic, partition))
                break
            next_offset = offset + 1
        if next_offset is not None:
            offsets.append(TopicPartition(topic, partition, next_offset))
    return offsets, gaps


class KeyOrderedLanes:
    """A worker thread per lane, kept for the member's life."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lane")

    def run(
        self,
        workers: Sequence[W],
        items: Sequence[T],
        work: Callable[[W, list[T]], None],
        key: Callable[[T], str | bytes],
    ) -> None:
        """`work(worker, lane)` for each non-empty lane, in parallel; returns when all are done
        (and raises what any of them raised)."""
        lanes = split_by_key(items, len(workers), key)
        futures = [self._pool.submit(work, worker, lane) for worker, lane in zip(workers, lanes, strict=True) if lane]
        for future in futures:
            future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
