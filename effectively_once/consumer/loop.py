"""The Kafka side of the runtime: poll, process, dead-letter, and only then acknowledge.

Acknowledging means storing the offset (`enable.auto.offset.store=false`); librdkafka commits
stored offsets in the background and on close. Nothing is stored for a message until its
transaction committed or its dead letter was confirmed, nor past an earlier message of its
partition that is not (CONSUMER_WORKERS: lanes.py). On a rebalance, what is stored is
committed before the partitions go (revoke); when partitions are lost, nothing is committed.
With cooperative-sticky assignment (the default) a rebalance revokes only the partitions that move;
librdkafka assigns and unassigns them incrementally after these callbacks return. A partition
assigned and never consumed while messages wait on it (a coordinator gone mid-rebalance) is found
between polls and repaired (stall_watch.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from .. import metrics
from ..dead_letters import DeadLetterPublisher
from ..kafka_client import client_config
from ..outcomes import Outcome
from .deliveries import ClientFailed, Delivery, decode_all, key, process
from .lanes import KeyOrderedLanes, acknowledged_prefix
from .processor import MessageProcessor
from .stall_watch import StallWatch

log = logging.getLogger(__name__)

FIRST_JOIN_SECONDS = 5.0
"""How long a member's first join is taken to last at most. The group answers it (an assignment,
or a refusal of a static id still held) well within that; under the consumer protocol a member
given no partition hears nothing at all, and counts as joined once this has passed."""


@dataclass(frozen=True)
class LoopConfig:
    bootstrap_servers: str
    topics: tuple[str, ...]
    batch_size: int = 1
    """Messages per database transaction (batched mode above 1)."""
    poll_size: int = 500
    """Messages taken from the client per poll; each transaction's are acknowledged after it."""
    instance_id: str | None = None
    """Static group membership: a restarted process takes its partitions back, at once under the
    classic protocol, once the broker's session for the killed process ended under the consumer
    protocol (the restarted one is refused the id until then: `refused_join_wait_seconds`)."""
    group_id: str | None = None
    """The consumer group; None: the consumer name (one group per consumer)."""
    poll_timeout_seconds: float = 0.5
    retry_backoff_cap_seconds: float = 5.0
    refused_join_wait_seconds: float = 60.0
    """How long a member the group refuses before it was ever assigned a partition goes on joining
    again with a fresh client before it gives up (ClientFailed). Under the consumer protocol
    a static member that was killed keeps its instance id in the group until the broker's session
    for it ends (6 s on the launcher's nodes), and the broker refuses the id to the restarted
    process meanwhile, as a fatal error of the client."""
    refused_join_retry_seconds: float = 1.0
    """The pause before a refused member joins again with a fresh client."""
    stall_after_seconds: float = 60.0
    """A partition with messages waiting that the member has not consumed for this long is stalled:
    reported, then sought to its committed offset, then the member rejoins the group."""
    assignment: str = "cooperative-sticky"
    """librdkafka's `partition.assignment.strategy`. Cooperative-sticky: a rebalance moves only the
    partitions that change owner, and the others go on being consumed meanwhile. "range,roundrobin"
    (eager) for a classic group shared with a client that has no cooperative protocol (the
    TypeScript inventory consumer's)."""
    group_protocol: Literal["classic", "consumer"] = "consumer"
    """librdkafka's `group.protocol`: "consumer" (KIP-848: the broker assigns, incrementally and
    stickily, and holds the session and heartbeat settings; `assignment` picks its assignor: range
    for "range,roundrobin", uniform for cooperative-sticky) or "classic" (the client's assignor,
    its own session timeout)."""
    kafka: dict[str, Any] = field(default_factory=dict)
    """Extra librdkafka settings."""

    def consumer_settings(self, group_id: str, statistics: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The member's librdkafka settings; `statistics`: its own statistics.interval.ms and
        stats_cb, which the request counting (kafka_requests) is added to, not put in place of."""
        settings: dict[str, Any] = {
            **client_config(self.bootstrap_servers, statistics),
            "group.id": group_id,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
        if self.group_protocol == "consumer":  # librdkafka refuses the classic settings with it
            settings["group.protocol"] = "consumer"
            settings["group.remote.assignor"] = "range" if self.assignment.startswith("range") else "uniform"
        else:
            settings["session.timeout.ms"] = 6000
            settings["heartbeat.interval.ms"] = 1000
            settings["partition.assignment.strategy"] = self.assignment
        if self.instance_id:
            settings["group.instance.id"] = self.instance_id
        return settings | self.kafka


class ConsumerLoop:
    """One consumer group member: its processor, its dead-letter topic, its offsets."""

    def __init__(
        self,
        config: LoopConfig,
        processor: MessageProcessor,
        dead_letters: DeadLetterPublisher,
        consumer_factory: Callable[[dict[str, Any]], Consumer] = Consumer,
        on_close: Callable[[], None] = lambda: None,
        between_polls: Callable[[Consumer], None] | None = None,
        workers: Sequence[MessageProcessor] = (),
        held_on_purpose: Callable[[], Collection[str]] = frozenset,
        before_transaction: Callable[[Consumer, Sequence[Message]], None] | None = None,
    ) -> None:
        self.config = config
        self.processor = processor
        self.processors = [processor, *workers]
        """One per worker (CONSUMER_WORKERS), each with its own connection; the first is `processor`."""
        self._lanes = KeyOrderedLanes(len(self.processors)) if workers else None
        self.dead_letters = dead_letters
        self.name = processor.config.consumer_name
        self._new_consumer: Callable[[], Consumer] = lambda: consumer_factory(
            config.consumer_settings(
                config.group_id or self.name, {"statistics.interval.ms": 5000, "stats_cb": self._on_statistics}
            )
        )
        self._consumer = self._new_consumer()
        self._ever_assigned = False
        self._refused_since: float | None = None
        self._subscribed_at: float | None = None
        self._on_close = on_close
        self._oldest_unacknowledged = metrics.OLDEST_UNACKNOWLEDGED_SECONDS.labels(self.name)
        self._stopping = False
        self.between_polls = between_polls
        """Called with the Kafka consumer before each poll (the lab controls' hook; none in production)."""
        self.held_on_purpose = held_on_purpose
        """Topics this member holds back on purpose (the lab controls' hold): quiet, not stalled."""
        self.before_transaction = before_transaction
        """Called with the Kafka consumer and a transaction's messages before it begins (the lab's
        ack-before-commit mistake; none in production)."""
        self.stall_watch = StallWatch(self.name, config.stall_after_seconds)
        self._retry_round = 0
        self._look_ahead = True
        """Whether the next poll's committed markers are read first: after a poll that held a
        duplicate (a run of redeliveries), and on the first poll, where redeliveries come."""
        self.handled = 0
        """Deliveries acknowledged so far (committed or dead-lettered)."""

    def stop(self) -> None:
        """Finish the message in hand, then leave (SIGTERM calls this)."""
        self._stopping = True

    def _subscribe(self) -> None:
        self._subscribed_at = time.monotonic()
        self._consumer.subscribe(
            list(self.config.topics), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def run(self, until: Callable[[], bool] = lambda: False) -> None:
        """Consume until stop() or `until()`; then close, committing what is stored."""
        self._subscribe()
        log.info(
            "consuming %s",
            ", ".join(self.config.topics),
            extra={"consumer": self.name, "strategy": self.processor.config.strategy.value},
        )
        try:
            while not self._stopping and not until():
                if self.between_polls is not None:
                    self.between_polls(self._consumer)
                if self.stall_watch.check(self._consumer, self.held_on_purpose()):
                    self._rejoin()
                try:
                    messages = self._next_messages()
                    if messages:
                        self.handle(messages)
                except ClientFailed as failed:
                    self._join_again_if_refused_at_join(failed)
        finally:
            if self._lanes is not None:
                self._lanes.close()
            self._consumer.close()
            for processor in self.processors:
                processor.close()
            self._on_close()

    def _on_statistics(self, raw: str) -> None:
        """librdkafka's statistics (every 5 s, from a poll): each assigned partition's lag."""
        try:
            statistics = json.loads(raw)
            for topic, detail in statistics.get("topics", {}).items():
                for partition, numbers in detail.get("partitions", {}).items():
                    lag = numbers.get("consumer_lag", -1)
                    fetching = numbers.get("fetch_state") not in (None, "none", "stopped")
                    if partition != "-1" and fetching and lag >= 0:
                        metrics.LAG_MESSAGES.labels(self.name, topic, partition).set(lag)
        except (ValueError, AttributeError, TypeError) as error:
            log.debug("unreadable statistics: %s", error)

    def _next_messages(self) -> list[Message]:
        """What the client holds already; when it holds nothing, wait for the first message only.

        consume(n, timeout) waits until it has n messages or the timeout passes, which at a low
        rate adds up to the whole timeout to every hop of the saga; poll() returns the moment one
        message is there, and consume(n, 0) takes what else is buffered without waiting.
        """
        size = max(self.config.batch_size, self.config.poll_size)
        messages: list[Message] = self._consumer.consume(size, 0)
        if messages:
            return messages
        first = self._consumer.poll(self.config.poll_timeout_seconds)
        if first is None:
            return []
        return [first, *self._consumer.consume(size - 1, 0)]

    # Rebalances -----------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._ever_assigned = True
        self.stall_watch.assigned(partitions)

    def still_joining(self) -> bool:
        """Whether the member has not joined its group yet: it has held no assignment since it
        started, and either the group refused it (a process started again after a crash, waiting
        for the broker to let its static id go) or its first join is under way (the refusal, if
        one comes, is the answer to that join: until then the member is joining all the same)."""
        if self._ever_assigned:
            return False
        if self._refused_since is not None or self._subscribed_at is None:
            return True
        return time.monotonic() - self._subscribed_at < FIRST_JOIN_SECONDS

    def _join_again_if_refused_at_join(self, failed: ClientFailed) -> None:
        """A client that failed before the member was ever assigned a partition (the broker still
        holds a killed process's static instance id) is replaced by a fresh one, which joins again
        `refused_join_retry_seconds` later, until `refused_join_wait_seconds` have passed; a
        failure after an assignment ends the loop (ClientFailed), as does one past that wait.
        Nothing was consumed by the failed client, so nothing is lost or acknowledged by this."""
        now = time.monotonic()
        if self._refused_since is None:
            self._refused_since = now
        if self._ever_assigned or now - self._refused_since > self.config.refused_join_wait_seconds:
            raise failed
        log.warning(
            "the group refused this member (%s); joining again with a fresh client in %.1f s",
            failed,
            self.config.refused_join_retry_seconds,
            extra={"consumer": self.name},
        )
        self._consumer.close()
        time.sleep(self.config.refused_join_retry_seconds)
        self._consumer = self._new_consumer()
        self._subscribe()

    def _rejoin(self) -> None:
        """Leave the group and join it again (a stalled partition the seek did not repair):
        what is stored is committed first, as on any revoke."""
        with contextlib.suppress(KafkaException):
            self._consumer.commit(asynchronous=False)
        self._consumer.unsubscribe()
        self.stall_watch.forget_all()
        self._subscribe()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.stall_watch.revoked(partitions)
        for partition in partitions:  # another member reports these now
            with contextlib.suppress(KeyError):
                metrics.LAG_MESSAGES.remove(self.name, partition.topic, str(partition.partition))
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as error:
            if error.args[0].code() != KafkaError._NO_OFFSET:
                log.warning("commit on revoke failed: %s", error, extra={"consumer": self.name})

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.stall_watch.revoked(partitions)
        log.warning(
            "partitions lost; nothing committed for them: they will be redelivered",
            extra={"consumer": self.name},
        )

    # Messages -------------------------------------------------------------------------------

    def handle(self, messages: Sequence[Message]) -> None:
        """Process one poll's messages, a transaction at a time, acknowledging after each; with
        workers, over the key-ordered lanes, acknowledging each partition's done prefix after all.
        Their partitions flow (the stall watch hears it on receipt and once they are handled)."""
        received = {(m.topic() or "", m.partition() or 0) for m in messages}
        for where in received:
            self.stall_watch.progressed(where)
        try:
            self._handle(messages)
        finally:
            for where in received:
                self.stall_watch.progressed(where)

    def _handle(self, messages: Sequence[Message]) -> None:
        deliveries = decode_all(messages, self.name)
        if not deliveries:
            return
        oldest = min(d.message.timestamp()[1] for d in deliveries) / 1000
        self._oldest_unacknowledged.set(max(0.0, time.time() - oldest))
        positions = {
            id(d.event): (d.message.topic() or "", d.message.partition() or 0, d.message.offset() or 0)
            for d in deliveries
            if d.event is not None
        }
        for processor in self.processors:
            processor.recorder.positions = positions
        self._find_duplicates_ahead(deliveries)
        if self._lanes is not None and self.processor.path.batches:  # a teaching path goes in order
            self._handle_in_lanes(deliveries)
            return
        size = self.config.batch_size
        for start in range(0, len(deliveries), size):
            if self._stopping:
                return  # the rest is not acknowledged: the group redelivers it
            if not self._handle_transaction(deliveries[start : start + size]):
                self._rewind([d.message for d in deliveries[start:] if not d.acknowledged])
                return
        self._oldest_unacknowledged.set(0)
        self._retry_round = 0

    def _find_duplicates_ahead(self, deliveries: list[Delivery]) -> None:
        """Mark the deliveries already applied, found in one read, when a run of redeliveries may
        be under way; remember whether this poll held a duplicate (set again in `_process`)."""
        events = [d.event for d in deliveries if d.event is not None]
        look, self._look_ahead = self._look_ahead and len(events) > 1, False
        if not look:
            return
        found = self.processor.duplicates_ahead(events)
        for delivery in deliveries:
            if delivery.event is not None and delivery.event.message_id in found:
                delivery.result = Outcome.DUPLICATE
                self._look_ahead = True

    def _handle_in_lanes(self, deliveries: list[Delivery]) -> None:
        """One poll's deliveries over the workers: a key's messages in order on one worker, keys in
        parallel; then each partition's offset is stored at the end of its acknowledged prefix
        only, and a partition with a gap is sought back to it (what came after it is delivered
        again, and the markers make it a duplicate)."""
        assert self._lanes is not None
        size = self.config.batch_size

        def work(processor: MessageProcessor, lane: list[Delivery]) -> None:
            for start in range(0, len(lane), size):
                chunk = lane[start : start + size]
                if self._stopping or len(self._process(processor, chunk)) < len(chunk):
                    return  # the rest of this lane waits: a key's later message never overtakes

        self._lanes.run(self.processors, deliveries, work, key=key)
        self.processor.faults.hit("after_commit_before_ack")
        prefix, gaps = acknowledged_prefix([(d.message, d.acknowledged) for d in deliveries])
        if prefix:
            self._consumer.store_offsets(offsets=prefix)
        self.handled += sum(1 for d in deliveries if d.acknowledged)
        if gaps:
            self._rewind([d.message for d in deliveries if not d.acknowledged])
        else:
            self._oldest_unacknowledged.set(0)
            self._retry_round = 0

    def _handle_transaction(self, deliveries: list[Delivery]) -> bool:
        """One transaction's worth of deliveries; False when some were left unacknowledged."""
        if self.before_transaction is not None:
            self.before_transaction(self._consumer, [delivery.message for delivery in deliveries])
        done = self._process(self.processor, deliveries)
        self.processor.faults.hit("after_commit_before_ack")
        if done:
            self._acknowledge([delivery.message for delivery in done])
        self.handled += len(done)
        return len(done) == len(deliveries)

    def _process(self, processor: MessageProcessor, deliveries: list[Delivery]) -> list[Delivery]:
        """deliveries.process, remembering whether a duplicate came (the next poll looks ahead)."""
        done = process(processor, self.dead_letters, deliveries, self.name)
        if any(d.result is Outcome.DUPLICATE for d in deliveries):
            self._look_ahead = True
        return done

    def _acknowledge(self, messages: Sequence[Message]) -> None:
        """Store the offset after each partition's last message (committed in the background)."""
        next_offsets: dict[tuple[str, int], int] = {}
        for message in messages:
            next_offsets[(message.topic() or "", message.partition() or 0)] = (message.offset() or 0) + 1
        self._consumer.store_offsets(
            offsets=[TopicPartition(topic, partition, offset) for (topic, partition), offset in next_offsets.items()]
        )

    def _rewind(self, pending: Sequence[Message]) -> None:
        """Seek every partition back to its first unacknowledged message, then back off."""
        first: dict[tuple[str, int], int] = {}
        for message in pending:
            first.setdefault((message.topic() or "", message.partition() or 0), message.offset() or 0)
        for (topic, partition), offset in first.items():
            self._consumer.seek(TopicPartition(topic, partition, offset))
        self._retry_round += 1
        pause = min(self.config.retry_backoff_cap_seconds, 0.1 * 2**self._retry_round)
        log.warning(
            "%d message(s) not acknowledged; trying again in %.1f s",
            len(pending),
            pause,
            extra={"consumer": self.name},
        )
        time.sleep(pause)
