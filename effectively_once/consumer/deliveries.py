"""What a poll's records become, whichever kind of group handed them out (loop.py's consumer
group, share_loop.py's share group): each decoded into a delivery, or marked poison with its
reason; processed a transaction at a time; dead-lettered when it failed for good; and marked
acknowledgeable only once its transaction committed or its dead letter was confirmed."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message

from ..dead_letters import DeadLetterPublisher, DeadLetterUnconfirmed
from ..envelope import Envelope, PoisonMessage, decode
from ..outcomes import Outcome
from ..telemetry import ids
from .processor import MessageProcessor, TerminalFailure
from .transaction import acknowledgeable

log = logging.getLogger(__name__)


class ClientFailed(Exception):
    """librdkafka reported a fatal error (a static member fenced by its own rejoin after a broker
    restart, for one): the client will never consume again, so the loop ends and the process with
    it, for its supervisor to start a fresh one. Nothing is lost: only committed work was acknowledged."""


@dataclass
class Delivery:
    message: Message
    event: Envelope | None
    """None: the record could not be decoded (its `result` says why)."""
    result: Outcome | TerminalFailure | None = None
    acknowledged: bool = False


def headers(message: Message) -> list[tuple[str, bytes | None]]:
    """The record's headers as (name, bytes) pairs, in their order."""
    found = message.headers() or []
    pairs = found.items() if isinstance(found, dict) else found
    return [(name, value.encode() if isinstance(value, str) else value) for name, value in pairs]


def key(delivery: Delivery) -> str | bytes:
    """What orders a delivery: its event's key (the order id), else the Kafka message's key."""
    return delivery.event.key if delivery.event is not None else (delivery.message.key() or b"")


def decode_all(messages: Sequence[Message], consumer: str) -> list[Delivery]:
    """One poll's records as deliveries; the client's own events (end of partition, a transient
    error) are logged and left out, a fatal one ends the member (ClientFailed)."""
    deliveries: list[Delivery] = []
    for message in messages:
        error = message.error()
        if error is not None:
            if error.fatal() or error.code() == KafkaError._FATAL:  # the event itself says _FATAL
                raise ClientFailed(f"the Kafka client failed for good: {error.str()}")
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", error, extra={"consumer": consumer})
            continue
        try:
            deliveries.append(Delivery(message, decode(message.value(), headers(message), message.key())))
        except PoisonMessage as poison:
            deliveries.append(Delivery(message, None, TerminalFailure(poison.reason, poison, poison.message_id)))
    return deliveries


def process(
    processor: MessageProcessor, dead_letters: DeadLetterPublisher, deliveries: list[Delivery], consumer: str
) -> list[Delivery]:
    """Process one transaction's deliveries with `processor` (and dead-letter what failed for
    good); mark and return the ones that may be acknowledged: committed or dead-lettered, a prefix
    of `deliveries` (what follows the first that is neither waits for the database)."""
    processor.faults.context = {
        "consumer": consumer,
        "keys": ids([d.event.key for d in deliveries if d.event is not None]),
        "message_ids": ids([d.event.message_id for d in deliveries if d.event is not None]),
    }
    to_process = [d for d in deliveries if d.event is not None and d.result is None]
    if to_process:  # not the duplicates found ahead, already counted
        batch = processor.process_batch([d.event for d in to_process if d.event is not None])
        for delivery, result in zip(to_process, batch.results, strict=False):
            delivery.result = result
        if batch.retry_later:
            log.warning("database unavailable: %s", batch.retry_later, extra={"consumer": consumer})

    done: list[Delivery] = []
    try:
        for delivery in deliveries:
            if isinstance(delivery.result, TerminalFailure):
                dead_letter(processor, dead_letters, delivery, delivery.result)  # acknowledged once confirmed
            elif not acknowledgeable(delivery.result):
                break  # not processed: the database went away
            done.append(delivery)
    except DeadLetterUnconfirmed as unconfirmed:
        log.error("%s", unconfirmed, extra={"consumer": consumer})
    for delivery in done:
        delivery.acknowledged = True
    return done


def dead_letter(
    processor: MessageProcessor, dead_letters: DeadLetterPublisher, delivery: Delivery, failure: TerminalFailure
) -> None:
    """Publish the delivery's dead letter with its reason (confirmed, or DeadLetterUnconfirmed),
    then record the terminal failure."""
    message_id = delivery.event.message_id if delivery.event else failure.message_id
    dead_letters.publish(delivery.message, failure.reason, failure.error_class, failure.error_text, message_id)
    processor.record(
        delivery.event,
        Outcome.TERMINAL_FAILURE,
        reason=failure.reason,
        error_class=failure.error_class,
        kafka_key=(delivery.message.key() or b"").decode(errors="replace") or None,
        topic=delivery.message.topic(),
        partition=delivery.message.partition(),
        offset=delivery.message.offset(),
    )
