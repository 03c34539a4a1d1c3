"""Redeliveries, re-drives and poison, for real: messages produced to the platform's topics.

Republishing uses the event's outbox row, so the copy is byte for byte what the relay sent, with
its original message id. A storm sends many copies at once, spread over every partition of the
topic, so that several members of a consumer group receive the same message at the same moment:
the concurrent duplicate that a second relay, a re-keyed replay or a zombie member produces.

A re-drive reads a dead letter where it lies and sends its original bytes back to the topic it
came from: the same message id, so every consumer that already applied it counts a duplicate and
the one that could not apply it gets another chance. Its headers are the ones the relay derives
from the envelope (the id, the trace id), as the original's were.

A copy with one field changed is what a producer's bug sends: the same message id (envelope and
header) with another occurred_at, payload, trace id or an extra header. Every consumer that
applied the original counts it a duplicate with different content, and changes nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from chaos_panel.reading.records import OutboxEvent
from effectively_once.dead_letters import dead_letter_headers
from effectively_once.envelope import MAX_BODY_BYTES
from effectively_once.kafka_client import KEY_PARTITIONER, client_config
from services.topology import CONSUMERS, EVENT_TOPICS, ORDERS_EVENTS, TOPIC_PARTITIONS

COPY_CHANGES = {
    "occurred_at": "another occurred_at (moved by the seconds given)",
    "payload": "a payload with one field more",
    "trace_id": "another trace id",
    "headers": "one header more",
}
"""What an operator's copy may change, besides nothing: its id stays."""

POISON_KINDS = {
    "not_json": "a body that is not JSON",
    "missing_message_id": "an envelope without a message id",
    "unknown_type": "an event type no consumer knows",
    "oversized": f"a body over the {MAX_BODY_BYTES // 1024} KiB limit",
    "hostile": "markup and SQL in the type and key (must show escaped, and harm nothing)",
}


Headers = list[tuple[str, str | bytes | None]]
Record = tuple[bytes, bytes, int | None, Headers]
"""key, value, partition (None: by key), headers"""


def _trace_id(value: bytes | None) -> str | None:
    """The trace id the envelope carries (the relay's eo-trace-id header says the same), if any."""
    try:
        body = json.loads(value or b"")
    except ValueError:
        return None
    trace_id = body.get("trace_id") if isinstance(body, dict) else None
    return trace_id if isinstance(trace_id, str) and trace_id else None


class InjectionError(Exception):
    """An injection refused (400: the request is wrong) or not done (503: Kafka did not confirm)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Sent:
    topic: str
    copies: int
    partitions: list[int]


class Injector:
    def __init__(self, bootstrap_servers: str, confirm_seconds: float = 15.0) -> None:
        self._bootstrap_servers = bootstrap_servers
        self._confirm_seconds = confirm_seconds
        """How long a send waits for the broker's confirmation (and a read for its dead letter)."""
        self._created: Producer | None = None

    @property
    def _producer(self) -> Producer:
        """Made on first use: the panel starts, and shows what is wrong, even while Kafka is away."""
        if self._created is None:
            self._created = Producer(
                {
                    **client_config(self._bootstrap_servers),
                    **KEY_PARTITIONER,
                    "acks": "all",
                    "linger.ms": 0,
                    "message.max.bytes": 1_000_000,
                    "log_level": 0,  # a broker that is away shows as unconfirmed copies, not log noise
                }
            )
        return self._created

    def _send(self, topic: str, records: Sequence[Record]) -> Sent:
        errors: list[str] = []
        partitions: list[int] = []

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                errors.append(str(error))
            else:
                partitions.append(message.partition() or 0)

        for key, value, partition, headers in records:
            if partition is None:
                self._producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
            else:
                self._producer.produce(
                    topic, value=value, key=key, headers=headers, partition=partition, on_delivery=on_delivery
                )
        left = self._producer.flush(self._confirm_seconds)
        if errors or left:
            raise InjectionError(
                f"Kafka did not confirm every copy: {errors[:1] or [f'{left} unconfirmed']}", status=503
            )
        return Sent(topic, len(records), sorted(set(partitions)))

    def republish(self, event: OutboxEvent, copies: int = 1, spread: bool = False) -> Sent:
        """Send `copies` of the event exactly as the relay did, with its original message id."""
        if not 1 <= copies <= 1000:
            raise InjectionError("copies must be between 1 and 1000")
        headers: Headers = [("eo-message-id", event.message_id.encode()), ("eo-injected", b"republish")]
        if event.trace_id:
            headers.append(("eo-trace-id", event.trace_id.encode()))
        records = [
            (event.key.encode(), event.envelope.encode(), n % TOPIC_PARTITIONS if spread else None, headers)
            for n in range(copies)
        ]
        return self._send(event.topic, records)

    def copy_with_change(self, event: OutboxEvent, change: str, seconds: float = 86_400) -> Sent:
        """Send one copy of the event under its message id with `change` (COPY_CHANGES) made:
        occurred_at moved by `seconds`, a payload field added, another trace id, or a header more."""
        if change not in COPY_CHANGES:
            raise InjectionError(f"unknown change {change!r}; known: {', '.join(COPY_CHANGES)}")
        if change == "occurred_at" and not (0 < abs(seconds) <= 10**9):
            raise InjectionError("seconds must move occurred_at: a non-zero number of at most a billion")
        body = json.loads(event.envelope)
        headers: Headers = [("eo-message-id", event.message_id.encode()), ("eo-injected", f"copy:{change}".encode())]
        if change == "occurred_at":
            moved = datetime.fromisoformat(body["occurred_at"]) + timedelta(seconds=seconds)
            body["occurred_at"] = moved.isoformat()
        elif change == "payload":
            body["payload"] = {**body.get("payload", {}), "copied_by_operator": True}
        elif change == "trace_id":
            body["trace_id"] = uuid.uuid4().hex
        else:
            headers.append(("x-copied-by", b"operator"))
        if change != "trace_id" and body.get("trace_id"):
            headers.append(("eo-trace-id", str(body["trace_id"]).encode()))
        value = json.dumps(body, separators=(",", ":")).encode()
        return self._send(event.topic, [(event.key.encode(), value, None, headers)])

    def redrive(self, location: str) -> tuple[dict[str, str], Sent]:
        """Send the dead letter at `location` (dlq-topic/partition@offset) back to its original
        topic, byte for byte; returns its dead-letter headers and where it went."""
        letter = self._read_dead_letter(location)
        headers = dead_letter_headers(letter)
        topic = headers.get("original-topic", "")
        if topic not in EVENT_TOPICS:
            raise InjectionError(f"the dead letter at {location} names no platform topic to go back to ({topic!r})")
        copy: Headers = [("eo-injected", b"redrive"), ("eo-redriven-from", location.encode())]
        if headers.get("message-id"):
            copy.append(("eo-message-id", headers["message-id"].encode()))
        trace_id = _trace_id(letter.value())
        if trace_id:
            copy.append(("eo-trace-id", trace_id.encode()))
        return headers, self._send(topic, [(letter.key() or b"", letter.value() or b"", None, copy)])

    def _read_dead_letter(self, location: str) -> Message:
        try:
            topic, rest = location.rsplit("/", 1)
            partition, offset = (int(part) for part in rest.split("@", 1))
        except ValueError:
            raise InjectionError(f"{location[:120]!r} is not a dead letter's place (topic/partition@offset)") from None
        if not (0 <= partition < 100_000 and 0 <= offset < 2**63):
            raise InjectionError(f"{location[:120]!r}: partition or offset out of range")
        if topic not in {consumer.dead_letter_topic for consumer in CONSUMERS}:
            raise InjectionError(f"{topic[:120]!r} is not a dead-letter topic")
        reader = Consumer(
            {
                **client_config(self._bootstrap_servers),
                "group.id": "effectively-once-redrive",  # never joins: the partition is assigned
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        try:
            reader.assign([TopicPartition(topic, partition, offset)])
            message = reader.poll(min(10.0, self._confirm_seconds))
        finally:
            reader.close()
        if message is None or message.error() is not None or message.offset() != offset:
            raise InjectionError(f"no dead letter could be read at {location}")
        return message

    def poison(self, kind: str, topic: str = ORDERS_EVENTS) -> tuple[str, Sent]:
        """Send one malformed message; returns its key (the dead letters carry it) and where it went."""
        if kind not in POISON_KINDS:
            raise InjectionError(f"unknown poison {kind!r}; known: {', '.join(POISON_KINDS)}")
        key = f"poison-{kind}-{uuid.uuid4().hex[:8]}"
        envelope: dict[str, object] = {
            "message_id": str(uuid.uuid4()),
            "type": "OrderPlaced",
            "version": 1,
            "key": key,
            "occurred_at": datetime.now(UTC).isoformat(),
            "payload": {},
        }
        if kind == "not_json":
            body = b'{"message_id": "unterminated'
        elif kind == "missing_message_id":
            del envelope["message_id"]
            body = json.dumps(envelope).encode()
        elif kind == "unknown_type":
            envelope["type"] = "OrderTeleported"
            body = json.dumps(envelope).encode()
        elif kind == "oversized":
            envelope["payload"] = {"padding": "x" * (MAX_BODY_BYTES + 1024)}
            body = json.dumps(envelope).encode()
        else:  # hostile
            key = f"<script>alert('{key}')</script>'; DROP TABLE outbox;--"
            envelope["key"] = key
            envelope["type"] = "<img src=x onerror=alert(1)>"
            body = json.dumps(envelope).encode()
        headers: Headers = [("eo-injected", f"poison:{kind}".encode())]
        return key, self._send(topic, [(key.encode(), body, None, headers)])
