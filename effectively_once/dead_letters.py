"""The dead-letter topic: where a message goes when no retry can apply it, with its reason.

The original bytes are kept as they were, so a re-drive carries the original message id and the
consumer's marker still deduplicates it. A dead letter counts only once the broker confirmed it:
until then the original message is not acknowledged.
"""

from __future__ import annotations

from datetime import UTC, datetime

from confluent_kafka import KafkaError, Message, Producer

from . import metrics

HEADER_PREFIX = "eo-"


class DeadLetterUnconfirmed(Exception):
    """The broker did not confirm the dead letter: the original must not be acknowledged."""


class DeadLetterPublisher:
    """Publishes one consumer's dead letters and waits for the broker's confirmation."""

    def __init__(self, producer: Producer, consumer_name: str, topic: str, timeout: float = 30) -> None:
        self._producer = producer
        self.consumer_name = consumer_name
        self.topic = topic
        self._timeout = timeout

    def publish(
        self,
        original: Message,
        reason: str,
        error_class: str,
        error_text: str,
        message_id: str | None,
    ) -> None:
        headers = {
            "reason": reason,
            "error-class": error_class,
            "error": error_text[:2000],
            "consumer": self.consumer_name,
            "original-topic": original.topic() or "",
            "original-partition": str(original.partition()),
            "original-offset": str(original.offset()),
            "message-id": message_id or "",
            "dead-lettered-at": datetime.now(UTC).isoformat(),
        }
        delivery: list[KafkaError | None] = []
        self._producer.produce(
            self.topic,
            value=original.value(),
            key=original.key(),
            headers=[(HEADER_PREFIX + name, value.encode()) for name, value in headers.items()],
            on_delivery=lambda error, _message: delivery.append(error),
        )
        self._producer.flush(self._timeout)
        if not delivery or delivery[0] is not None:
            raise DeadLetterUnconfirmed(
                f"dead letter to {self.topic} not confirmed: {delivery[0] if delivery else 'timed out'}"
            )
        metrics.DEAD_LETTERS.labels(self.consumer_name, reason).inc()


def dead_letter_headers(message: Message) -> dict[str, str]:
    """The runtime's headers of a dead letter, without their prefix."""
    found: dict[str, str] = {}
    for header in message.headers() or []:
        name, value = header[0], header[1]
        if name.startswith(HEADER_PREFIX):
            text = value.decode() if isinstance(value, bytes) else str(value or "")
            found[name.removeprefix(HEADER_PREFIX)] = text
    return found
