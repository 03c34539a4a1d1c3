"""Dead letters, read from every consumer's dead-letter topic: not anomalies (each waits on its
topic with its reason, nothing lost), but listed by the auditor and shown by the panel."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from effectively_once.dead_letters import dead_letter_headers
from effectively_once.kafka_client import client_config
from services.topology import CONSUMERS, TOPIC_PARTITIONS


@dataclass(frozen=True)
class DeadLetter:
    consumer: str
    reason: str
    error_class: str
    error: str
    message_id: str
    original: str
    """topic/partition@offset of the message as it was delivered."""
    at: str
    key: str
    location: str = ""
    """dlq-topic/partition@offset: where the dead letter itself is (a re-drive reads it there)."""


def dead_letter_of(message: Any) -> DeadLetter:
    headers = dead_letter_headers(message)
    return DeadLetter(
        consumer=headers.get("consumer", message.topic().removeprefix("dlq.")),
        reason=headers.get("reason", "?"),
        error_class=headers.get("error-class", "?"),
        error=headers.get("error", "")[:200],
        message_id=headers.get("message-id", ""),
        original=f"{headers.get('original-topic', '?')}/{headers.get('original-partition', '?')}"
        f"@{headers.get('original-offset', '?')}",
        at=headers.get("dead-lettered-at", ""),
        key=(message.key() or b"").decode(errors="replace"),
        location=f"{message.topic()}/{message.partition()}@{message.offset()}",
    )


def read_to_end(bootstrap_servers: str, topics: list[str], take: Callable[[Any], None], timeout: float = 30) -> None:
    """Read every partition of `topics` from the beginning to its end (as it was when reached),
    handing each message to `take`. No group is joined and nothing is committed."""
    consumer = Consumer(
        {
            **client_config(bootstrap_servers),
            "group.id": "effectively-once-reader",  # never joins: partitions are assigned
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 20,  # a reader to the end: answer at once, not after 500 ms per fetch
            "log_level": 3,
        }
    )
    partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for topic in topics for p in range(TOPIC_PARTITIONS)]
    consumer.assign(partitions)
    at_end: set[tuple[str, int]] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{', '.join(topics)} were not read to their end within {timeout:.0f} s")
            for message in consumer.consume(500, 0.1):
                error = message.error()
                if error is None:
                    take(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add((message.topic() or "", message.partition() or 0))
    finally:
        consumer.close()


def read_dead_letters(bootstrap_servers: str, timeout: float = 30) -> list[DeadLetter]:
    """Every dead letter on every consumer's dead-letter topic."""
    letters: list[DeadLetter] = []
    topics = [consumer.dead_letter_topic for consumer in CONSUMERS]
    read_to_end(bootstrap_servers, topics, lambda message: letters.append(dead_letter_of(message)), timeout)
    return letters


def dead_letter_report(letters: list[DeadLetter]) -> Iterable[str]:
    """Dead letters are not anomalies (nothing was lost: each waits on its topic with its reason),
    but each is listed, grouped by consumer and reason."""
    yield f"DEAD LETTERS: {len(letters)}"
    groups = Counter((letter.consumer, letter.reason) for letter in letters)
    for (consumer, reason), count in sorted(groups.items()):
        yield f"  {consumer}: {reason} × {count}"
        for letter in [x for x in letters if (x.consumer, x.reason) == (consumer, reason)][:5]:
            yield f"    {letter.original} message {letter.message_id or '(none)'}: {letter.error_class}: {letter.error}"
