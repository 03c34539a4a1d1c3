"""Controls for the workshop's labs, outside the correct path: rewind a group member, hold a
topic back, shorten the dedup horizon, switch a member to a teaching strategy, commit offsets
before the transaction (the ack-before-commit mistake).

A member's loop gets them through its hooks (`between_polls`, `before_transaction`,
`held_on_purpose`; `LabAttachment` in this package's `__init__` plugs them in): requests from the
control endpoint's thread wait in queues until the next poll, because only the polling thread may
seek or pause. A production process plugs in nothing and has none of this.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import timedelta
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from ..consumer.loop import ConsumerLoop
from ..consumer.processor import Path, path_for
from ..consumer.share_loop import ShareGroupLoop
from ..consumer.transaction import CorrectPath
from ..outcomes import Strategy
from ..retention import purge_markers
from ..telemetry import Telemetry
from . import strategy_store
from .rewind_target import rewind_target

log = logging.getLogger(__name__)
Partitions = list[dict[str, Any]]

JOINING_GRACE_SECONDS = 15.0
"""How long a rewind waits for a member still joining (its first join under way, or a process
started again after a crash, refused its static id until the broker lets it go) before it answers
that the member has no partition. A member that joined answers at once, partitions or none."""


class LabControls:
    """One group member's rewinds and holds, served between its polls."""

    def __init__(self, name: str, telemetry: Telemetry) -> None:
        self.name, self.telemetry = name, telemetry
        self.joining: Callable[[], bool] = lambda: False
        """Whether the member is still joining its group (its loop's `still_joining`)."""
        self.strategy_of: Callable[[], Strategy] = lambda: Strategy.CORRECT
        """The strategy the member runs now, read from its processor (LabAttachment.runtime ties
        the two): under ack-before-commit, `before_transaction` acknowledges first."""
        self._rewinds: queue.Queue[tuple[int | None, Future[Partitions], float]] = queue.Queue()
        """(time to rewind to, the answer, when it was asked: monotonic clock)."""
        self._hold_requests: queue.Queue[tuple[str, float, Future[Partitions]]] = queue.Queue()
        self._held: dict[str, float] = {}
        """Topic -> when its hold ends (monotonic clock)."""

    def request_rewind(self, to_timestamp_ms: int | None = None) -> Future[Partitions]:
        """Seek the member's partitions back: to the beginning, or to the first message at or after
        `to_timestamp_ms` unless the member has not reached it yet (then it stays: a rewind never
        skips). Everything after is delivered again, for real. A member still joining (its first
        join under way, or refused its static id after a restart) is served once it joined, or
        after JOINING_GRACE_SECONDS. (A group's committed offsets cannot be changed from outside
        while it has members, so the members move themselves; the future resolves with the
        partitions and their new offsets.)"""
        future: Future[Partitions] = Future()
        self._rewinds.put((to_timestamp_ms, future, time.monotonic()))
        return future

    def request_hold(self, topic: str, seconds: float) -> Future[Partitions]:
        """Hold `topic` back for `seconds` (0: release it now): its partitions are paused, so its
        messages wait on the broker while other topics flow (the out-of-order lab)."""
        future: Future[Partitions] = Future()
        self._hold_requests.put((topic, seconds, future))
        return future

    def held_on_purpose(self) -> frozenset[str]:
        """The topics held back now: quiet on purpose, never stalled (the loop's stall watch)."""
        return frozenset(self._held)

    def before_transaction(self, consumer: Consumer, messages: Sequence[Message]) -> None:
        """The ack-before-commit mistake, when the member runs it: the offsets are stored and
        committed before the transaction even begins, so a crash inside it loses the messages."""
        if self.strategy_of() is not Strategy.ACK_BEFORE_COMMIT:
            return
        for message in messages:
            consumer.store_offsets(message=message)
        consumer.commit(asynchronous=False)

    def holds(self) -> dict[str, float]:
        """Topic -> seconds its hold has left."""
        now = time.monotonic()
        return {topic: round(max(0.0, until - now), 1) for topic, until in dict(self._held).items()}

    def between_polls(self, consumer: Consumer) -> None:
        """The hook: serve what was asked since the last poll, and keep holds up."""
        waiting: list[tuple[int | None, Future[Partitions], float]] = []
        while not self._rewinds.empty():
            to_timestamp_ms, future, asked = self._rewinds.get_nowait()
            if self.joining() and time.monotonic() - asked < JOINING_GRACE_SECONDS:
                waiting.append((to_timestamp_ms, future, asked))  # still joining: served once it joined
                continue
            try:
                future.set_result(self._rewind(consumer, to_timestamp_ms))
            except KafkaException as error:
                future.set_exception(error)
        for request in waiting:
            self._rewinds.put(request)
        if self._held or not self._hold_requests.empty():
            self._serve_holds(consumer)

    def _rewind(self, consumer: Consumer, to_timestamp_ms: int | None) -> Partitions:
        """Seek each assigned partition back (rewind_target: never forward, never to a lazy end)."""
        assignment = [TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment()]
        if not assignment:
            return []
        at_time: dict[tuple[str, int], int | None] = {(tp.topic, tp.partition): None for tp in assignment}
        if to_timestamp_ms is not None:
            found = consumer.offsets_for_times(
                [TopicPartition(tp.topic, tp.partition, to_timestamp_ms) for tp in assignment], timeout=10
            )
            at_time = {(tp.topic, tp.partition): tp.offset for tp in found}
        targets = [
            TopicPartition(tp.topic, tp.partition, rewind_target(at_time[(tp.topic, tp.partition)], stands_at))
            for tp, stands_at in zip(assignment, self._stands_at(consumer, assignment), strict=True)
        ]
        for target in targets:
            consumer.seek(target)
        moved = [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "offset": "beginning" if tp.offset == OFFSET_BEGINNING else tp.offset,
            }
            for tp in targets
        ]
        log.warning(
            "rewound %d partition(s); what follows is delivered again", len(moved), extra={"consumer": self.name}
        )
        self.telemetry.emit("rewind", consumer=self.name, partitions=moved, to_timestamp_ms=to_timestamp_ms)
        return moved

    @staticmethod
    def _stands_at(consumer: Consumer, partitions: list[TopicPartition]) -> list[int | None]:
        """Where the member stands in each partition: its position (between polls, everything
        before it was handled), else its group's committed offset, else None."""
        stands = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(partitions) if tp.offset >= 0}
        unknown = [tp for tp in partitions if (tp.topic, tp.partition) not in stands]
        if unknown:
            committed = consumer.committed(unknown, timeout=10)
            stands.update({(tp.topic, tp.partition): tp.offset for tp in committed if tp.offset >= 0})
        return [stands.get((tp.topic, tp.partition)) for tp in partitions]

    def _serve_holds(self, consumer: Consumer) -> None:
        """Start and end holds, and pause every assigned partition of a held topic again (pausing
        is local and idempotent; a rebalance hands partitions over unpaused)."""
        now = time.monotonic()
        requested: list[tuple[str, Future[Partitions]]] = []
        while not self._hold_requests.empty():
            topic, seconds, future = self._hold_requests.get_nowait()
            self._held[topic] = now + seconds
            requested.append((topic, future))
        assigned = [TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment()]
        for topic in [t for t, until in self._held.items() if until <= now]:
            del self._held[topic]
            resumed = [tp for tp in assigned if tp.topic == topic]
            if resumed:
                consumer.resume(resumed)
            log.info("released %s", topic, extra={"consumer": self.name})
        to_pause = [tp for tp in assigned if tp.topic in self._held]
        if to_pause:
            consumer.pause(to_pause)
        for topic, future in requested:
            held = topic in self._held
            partitions = sorted(tp.partition for tp in assigned if tp.topic == topic)
            if held:
                log.warning("holding back %s (%d partition(s))", topic, len(partitions), extra={"consumer": self.name})
            future.set_result([{"topic": topic, "partition": p, "held": held} for p in partitions])


class LabProcess:
    """The members of one consumer process, as its control endpoint sees them."""

    def __init__(
        self,
        consumer_name: str,
        members: list[tuple[ConsumerLoop | ShareGroupLoop, LabControls]],
        database_url: str,
        telemetry: Telemetry,
        configured_horizon: timedelta | None = None,
        paths: Mapping[Strategy, Callable[[], Path]] | None = None,
    ):
        self.consumer_name = consumer_name
        self.members = members
        self._database_url = database_url
        self._telemetry = telemetry
        self._configured_horizon = configured_horizon
        self._paths = dict(paths or {Strategy.CORRECT: CorrectPath})
        """The paths the process was given: what a switch may choose."""

    @property
    def _first(self) -> ConsumerLoop | ShareGroupLoop:
        return self.members[0][0]

    def _refuse_for_a_share_group(self, what: str) -> None:
        if isinstance(self._first, ShareGroupLoop):
            raise ValueError(
                f"{self.consumer_name} consumes as a share group: it has no partitions of its own to {what}"
                " (a record is handed out, locked and acknowledged on its own; docs/share-groups.md)"
            )

    def strategy(self) -> str:
        return self._first.processor.config.strategy.value

    def strategies(self) -> list[str]:
        return [strategy.value for strategy in self._paths]

    def set_strategy(self, strategy: str) -> None:
        """Switch every member, and store the choice so a restart keeps it."""
        chosen = Strategy(strategy)
        path_for(chosen, self._paths)  # refused unless the process was given the path
        for loop, _ in self.members:
            for processor in loop.processors:  # every worker's, each on a path of its own
                processor.run_on(path_for(chosen, self._paths))
        with psycopg.connect(self._database_url, connect_timeout=5, autocommit=True) as connection:
            strategy_store.save(connection, self.consumer_name, chosen)
        self._telemetry.emit("strategy", consumer=self.consumer_name, strategy=chosen.value)

    def rewind(self, to_timestamp_ms: int | None) -> Partitions:
        """Ask every member to rewind, and answer once each has sought (at its next poll: a member
        inside a long transaction answers when it is done), each partition once: a partition that
        moved between two members while they answered (one of them still joining) was sought by
        both."""
        self._refuse_for_a_share_group("rewind")
        futures = [controls.request_rewind(to_timestamp_ms) for _, controls in self.members]
        log.info("rewind asked; each member seeks at its next poll", extra={"consumer": self.consumer_name})
        sought: dict[tuple[str, int], dict[str, Any]] = {}
        for future in futures:
            for partition in future.result(timeout=30):
                sought[(partition["topic"], partition["partition"])] = partition
        return list(sought.values())

    def hold(self, topic: str, seconds: float) -> Partitions:
        if topic not in self._first.config.topics:
            topics = ", ".join(self._first.config.topics)
            raise ValueError(f"{self.consumer_name} does not consume {topic!r}; it consumes {topics}")
        self._refuse_for_a_share_group("hold back")
        futures = [controls.request_hold(topic, seconds) for _, controls in self.members]
        held = [partition for future in futures for partition in future.result(timeout=30)]
        self._telemetry.emit("hold", consumer=self.consumer_name, topic=topic, seconds=seconds)
        return held

    def holds(self) -> dict[str, Any]:
        return {
            "consumer": self.consumer_name,
            "topics": list(self._first.config.topics),
            "held": self.members[0][1].holds(),
        }

    def horizon(self) -> dict[str, Any]:
        current = self._first.processor.config.dedup_horizon
        configured = self._configured_horizon
        return {
            "consumer": self.consumer_name,
            "seconds": current.total_seconds() if current else None,
            "configured_seconds": configured.total_seconds() if configured else None,
        }

    def set_horizon(self, seconds: float | None, purge: bool) -> dict[str, Any]:
        """Shorten (or restore, with None) the dedup horizon; with `purge`, delete the markers
        older than it at once rather than at the purger's next round. Not stored: a restart
        brings back the configured horizon."""
        horizon = timedelta(seconds=seconds) if seconds is not None else self._configured_horizon
        for loop, _ in self.members:
            for processor in loop.processors:
                processor.set_dedup_horizon(horizon)
        purged = 0
        if purge and horizon is not None:
            with psycopg.connect(self._database_url, connect_timeout=5, autocommit=True) as connection:
                purged = purge_markers(connection, horizon, consumer_name=self.consumer_name)
        self._telemetry.emit("horizon", consumer=self.consumer_name, seconds=seconds, purged=purged)
        return self.horizon() | {"purged": purged}
