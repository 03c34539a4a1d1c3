"""A share-group member (Kafka's KIP-932, "queues for Kafka"): poll, process, and acknowledge
each record on its own, after its transaction.

In a share group the broker hands out records, not partitions: any number of members read the
same partitions, and each record is locked to the one member that received it. The member then
acknowledges it, in explicit mode, one of three ways:

- ACCEPT, once its transaction committed (applied, or found a duplicate by its marker);
- REJECT, once its dead letter was confirmed (it is never delivered again);
- RELEASE, when it was not processed (the database went away): another delivery, maybe to
  another member, tries again, after a pause that doubles each time in a row. Every delivery
  counts, and the broker archives a record delivered group.share.delivery.count.limit times (10
  on the launcher's brokers): dropped for the group with no trace. So on a record's last delivery
  the member dead-letters it instead (reason `delivery_limit`) and rejects it once the dead letter
  is confirmed; only an unconfirmed dead letter still releases it.

A record whose lock expires before it is acknowledged (`share.record.lock.duration.ms`, 30 s by
default) goes to another member while the first may still be at work on it: the same message is
processed twice at once, as a matter of course. The marker, claimed in the same transaction as
the change, lets exactly one of them apply it; the other finds it taken and counts a duplicate.
The late member's acknowledgement is no longer the record's: the broker refuses it when it still
holds the record otherwise (INVALID_RECORD_STATE, logged and counted) and it changes nothing when
the other member's acceptance came first; either way nothing is lost or applied twice.

There is no per-key order and no offset to rewind: a share group suits consumers whose changes
do not depend on their order (the sales projection, the notifications), not the saga's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException, Message, ShareConsumer, TopicPartition

from .. import metrics
from ..dead_letters import DeadLetterPublisher, DeadLetterUnconfirmed
from ..kafka_client import client_config
from .deliveries import ClientFailed, Delivery, decode_all, process
from .processor import MessageProcessor, TerminalFailure

log = logging.getLogger(__name__)

DELIVERY_LIMIT = "delivery_limit"
"""A dead letter's reason: its record was not processed in as many deliveries as the broker allows."""


def share_group_id(consumer_name: str) -> str:
    """The share group a consumer's share members join: not the consumer group's id, which Kafka
    keeps for that group (a share member asking for it fails for good with GROUP_ID_NOT_FOUND), so
    a consumer switches between the two and back. Its markers stay the consumer name's: a switch
    reads its topics again from the start, and every message it had applied is a duplicate."""
    return f"{consumer_name}.share"


@dataclass(frozen=True)
class ShareLoopConfig:
    bootstrap_servers: str
    topics: tuple[str, ...]
    group_id: str
    """The share group (`share_group_id`: never a consumer group's id)."""
    batch_size: int = 1
    """Records per database transaction (batched mode above 1)."""
    poll_timeout_seconds: float = 0.5
    delivery_limit: int = 10
    """The brokers' group.share.delivery.count.limit: a record not processed on its delivery of
    this number is dead-lettered and rejected, not released (the broker would archive it)."""
    retry_backoff_cap_seconds: float = 5.0
    """The longest pause after releasing records the database could not take (doubling from 0.1 s):
    each release counts a delivery, and on a record's `delivery_limit`-th it is dead-lettered."""
    kafka: dict[str, Any] = field(default_factory=dict)
    """Extra librdkafka settings."""

    def consumer_settings(self) -> dict[str, Any]:
        return {
            **client_config(self.bootstrap_servers),
            "group.id": self.group_id,
            "share.acknowledgement.mode": "explicit",
        } | self.kafka


class ShareGroupLoop:
    """One share-group member: its processor, its dead-letter topic, its acknowledgements."""

    def __init__(
        self,
        config: ShareLoopConfig,
        processor: MessageProcessor,
        dead_letters: DeadLetterPublisher,
        consumer_factory: Callable[[dict[str, Any]], ShareConsumer] = ShareConsumer,
        on_close: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.processor = processor
        self.processors = [processor]
        self.dead_letters = dead_letters
        self.name = processor.config.consumer_name
        self._consumer = consumer_factory(config.consumer_settings())
        self._on_close = on_close
        self._stopping = False
        self._retry_round = 0
        self.handled = 0
        """Deliveries acknowledged so far (accepted or rejected)."""

    def stop(self) -> None:
        """Finish the poll in hand, then leave (SIGTERM calls this)."""
        self._stopping = True

    def run(self, until: Callable[[], bool] = lambda: False) -> None:
        """Consume until stop() or `until()`; then close, sending what is acknowledged."""
        self._consumer.subscribe(list(self.config.topics))
        log.info("consuming %s as a share group", ", ".join(self.config.topics), extra={"consumer": self.name})
        consuming = metrics.SHARE_MEMBERS.labels(self.name)
        consuming.inc()
        try:
            while not self._stopping and not until():
                messages = self._poll()
                if messages:
                    self.handle(messages)
        finally:
            consuming.dec()
            self._consumer.close()
            self.processor.close()
            self._on_close()

    def _poll(self) -> Sequence[Message]:
        try:
            return list(self._consumer.poll(self.config.poll_timeout_seconds))
        except KafkaException as error:
            if error.args[0].fatal():
                raise ClientFailed(
                    f"the share consumer failed for good: {error.args[0].str()} (is {self.config.group_id!r} a"
                    " consumer group's id? a share group needs one of its own)"
                ) from error
            log.warning("share poll failed: %s", error, extra={"consumer": self.name})
            return []

    def handle(self, messages: Sequence[Message]) -> None:
        """Process one poll's records a transaction at a time; acknowledge every one of them (the
        client polls again only then), and send the acknowledgements."""
        deliveries = decode_all(messages, self.name)
        redelivered = sum(1 for d in deliveries if (d.message.delivery_count() or 1) > 1)
        if redelivered:
            metrics.SHARE_REDELIVERIES.labels(self.name).inc(redelivered)
        size = self.config.batch_size
        start = 0
        while start < len(deliveries) and not self._stopping:
            chunk = deliveries[start : start + size]
            done = process(self.processor, self.dead_letters, chunk, self.name)
            self.processor.faults.hit("after_commit_before_ack")
            for delivery in done:
                self._consumer.acknowledge(delivery.message, _acknowledgement(delivery))
            self.handled += len(done)
            start += len(done)
            if len(done) < len(chunk):
                break  # the database went away: the rest goes back to the group
        released = deliveries[start:]
        for delivery in released:
            self._consumer.acknowledge(delivery.message, self._give_back(delivery))
        self._send_acknowledgements()
        if released and not self._stopping:
            self._back_off(len(released))
        else:
            self._retry_round = 0

    def _give_back(self, delivery: Delivery) -> AcknowledgeType:
        """RELEASE a record not processed, but on its last delivery: its dead letter, then REJECT
        (the database may be away: the dead letter, on Kafka, is its only trace)."""
        count = delivery.message.delivery_count() or 1
        if count < self.config.delivery_limit:
            return AcknowledgeType.RELEASE
        message_id = delivery.event.message_id if delivery.event else None
        try:
            self.dead_letters.publish(
                delivery.message,
                DELIVERY_LIMIT,
                "DeliveryLimitReached",
                f"not processed in {count} deliveries (the last the broker allows): the database could not take it",
                message_id,
            )
        except DeadLetterUnconfirmed as unconfirmed:
            log.error("%s; released on its last delivery", unconfirmed, extra={"consumer": self.name})
            return AcknowledgeType.RELEASE
        log.error(
            "message %s dead-lettered after %d deliveries",
            message_id,
            count,
            extra={"consumer": self.name},
        )
        return AcknowledgeType.REJECT

    def _back_off(self, released: int) -> None:
        """Pause before the next poll, longer each time in a row, so that records released while the
        database is away do not use up their deliveries at once."""
        self._retry_round += 1
        pause = min(self.config.retry_backoff_cap_seconds, 0.1 * 2**self._retry_round)
        log.warning("%d record(s) released; polling again in %.1f s", released, pause, extra={"consumer": self.name})
        time.sleep(pause)

    def _send_acknowledgements(self) -> None:
        try:
            results: dict[TopicPartition, KafkaException | None] = self._consumer.commit_sync()
        except KafkaException as error:  # sent again with the next poll; a lost one is a redelivery
            log.warning("acknowledgements not confirmed: %s", error, extra={"consumer": self.name})
            return
        for partition, refusal in results.items():
            if refusal is not None:
                metrics.SHARE_ACKNOWLEDGEMENTS_REFUSED.labels(self.name).inc()
                log.warning(
                    "acknowledgements on %s/%d refused: %s (a record whose lock expired is another member's now)",
                    partition.topic,
                    partition.partition,
                    refusal,
                    extra={"consumer": self.name},
                )


def _acknowledgement(delivery: Delivery) -> AcknowledgeType:
    """REJECT for what was dead-lettered, ACCEPT for what committed (applied or a duplicate)."""
    return AcknowledgeType.REJECT if isinstance(delivery.result, TerminalFailure) else AcknowledgeType.ACCEPT
