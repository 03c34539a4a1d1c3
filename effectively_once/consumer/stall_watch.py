"""A partition the member holds, with messages waiting, that nothing has consumed for a while.

The group coordinator can go away mid-rebalance (a broker frozen, then back): a member may come
out of it with a partition assigned and never fetched, its committed offset unknown, its messages
waiting for ever while every metric of the member looks healthy. The watch notices and repairs:

- every partition remembers when the member last handled one of its messages (or found it caught
  up); one that has gone `after` seconds without is asked about: its log's end against the
  member's position (or committed offset, or the log's start when it has none);
- with messages waiting, it is *stalled*: `eo_consumer_partition_stalled` says so, a warning
  names it, and the member seeks it to where it should resume (and resumes it, should the
  client have paused it); still stalled `after` seconds later, the member leaves the group and
  joins it again (`eo_consumer_stall_recoveries_total` counts both);
- a topic held back on purpose (the lab controls' hold) is not stalled.

Nothing here is acknowledged or skipped: a seek to the committed offset redelivers at worst, and
the markers make that a duplicate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from .. import metrics

log = logging.getLogger(__name__)

Partition = tuple[str, int]


@dataclass
class _Watched:
    since: float
    """When the member last handled a message of it, found it caught up, or acted on it."""
    recoveries: int = 0
    """Recoveries tried since it stalled: the first seeks, the next ones rejoin."""


class StallWatch:
    def __init__(self, consumer_name: str, after_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = consumer_name
        self.after = after_seconds
        self._clock = clock
        self._watched: dict[Partition, _Watched] = {}
        self._stalled_gauge = metrics.PARTITION_STALLED
        self._recoveries = metrics.STALL_RECOVERIES

    def assigned(self, partitions: Collection[TopicPartition]) -> None:
        now = self._clock()
        for partition in partitions:
            self._watched[(partition.topic, partition.partition)] = _Watched(now)

    def revoked(self, partitions: Collection[TopicPartition]) -> None:
        for partition in partitions:
            self._forget((partition.topic, partition.partition))

    def forget_all(self) -> None:
        for where in list(self._watched):
            self._forget(where)

    def progressed(self, where: Partition) -> None:
        """A message of the partition was handled: it flows."""
        watched = self._watched.get(where)
        if watched is None:
            return
        if watched.recoveries:
            log.info("%s/%d is consumed again", *where, extra={"consumer": self.name})
            self._stalled_gauge.labels(self.name, where[0], str(where[1])).set(0)
        watched.since, watched.recoveries = self._clock(), 0

    def stalled(self) -> list[Partition]:
        return sorted(where for where, watched in self._watched.items() if watched.recoveries)

    def check(self, consumer: Consumer, held: Collection[str] = ()) -> bool:
        """Look at the partitions quiet for `after` seconds; seek a stalled one, or, stalled
        again, return True: the member should leave the group and join it again."""
        now, rejoin = self._clock(), False
        for where, watched in list(self._watched.items()):
            if now - watched.since < self.after:
                continue
            watched.since = now
            if where[0] in held:
                continue
            waiting = self._waiting(consumer, where)
            if not waiting:
                if watched.recoveries:
                    self.progressed(where)
                continue
            watched.recoveries += 1
            self._stalled_gauge.labels(self.name, where[0], str(where[1])).set(1)
            if watched.recoveries == 1:
                self._seek(consumer, where, waiting)
            else:
                log.warning(
                    "%s/%d is still stalled with %d message(s) waiting: leaving the group to join it again",
                    *where,
                    waiting,
                    extra={"consumer": self.name},
                )
                self._recoveries.labels(self.name, "rejoin").inc()
                rejoin = True
        return rejoin

    def _waiting(self, consumer: Consumer, where: Partition) -> int | None:
        """Messages between where the member would resume and the log's end; None when unknown."""
        partition = TopicPartition(*where)
        try:
            low, high = consumer.get_watermark_offsets(partition, timeout=5, cached=False)
            position = consumer.position([partition])[0].offset
            if position < 0:
                position = consumer.committed([partition], timeout=5)[0].offset
        except KafkaException as error:
            log.info("could not ask about %s/%d: %s", *where, error, extra={"consumer": self.name})
            return None
        return max(0, high - (position if position >= 0 else low))

    def _seek(self, consumer: Consumer, where: Partition, waiting: int) -> None:
        partition = TopicPartition(*where)
        try:
            committed = consumer.committed([partition], timeout=5)[0].offset
            resume = committed if committed >= 0 else OFFSET_BEGINNING
            consumer.resume([partition])
            consumer.seek(TopicPartition(where[0], where[1], resume))
        except KafkaException as error:
            log.warning("could not seek stalled %s/%d: %s", *where, error, extra={"consumer": self.name})
            return
        log.warning(
            "%s/%d stalled: %d message(s) waiting, none consumed for %.0f s; seeking it to %s",
            *where,
            waiting,
            self.after,
            "its committed offset" if resume >= 0 else "its beginning (nothing committed)",
            extra={"consumer": self.name},
        )
        self._recoveries.labels(self.name, "seek").inc()

    def _forget(self, where: Partition) -> None:
        watched = self._watched.pop(where, None)
        if watched is not None and watched.recoveries:
            self._stalled_gauge.labels(self.name, where[0], str(where[1])).set(0)
