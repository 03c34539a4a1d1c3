"""Fakes for the consumer's unit tests: a connection that only says it is open, a path whose
outcomes are scripted, a Kafka consumer that records what was stored and sought, a dead-letter
topic that keeps what it was given. The integration tests run the same code on real PostgreSQL
and Kafka; these let a property draw thousands of cases in a second."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from confluent_kafka import TopicPartition
from psycopg.pq import TransactionStatus

from effectively_once.consumer.transaction import Attempt, Handler
from effectively_once.envelope import Envelope
from effectively_once.outcomes import Outcome, Strategy


class _PgConn:
    transaction_status = TransactionStatus.IDLE


class FakeConnection:
    """What the processor asks of a connection between attempts; any statement fails as a
    database error would (the read ahead for duplicates then finds none)."""

    def __init__(self) -> None:
        self.closed = False
        self.broken = False
        self.autocommit = True
        self.isolation_level: object = None
        self.pgconn = _PgConn()
        self.rollbacks = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        raise psycopg.OperationalError("a fake connection runs no SQL")

    def pipeline(self) -> Any:
        raise psycopg.OperationalError("a fake connection runs no SQL")

    def rollback(self) -> None:
        self.rollbacks += 1

    def close(self) -> None:
        self.closed = True


Step = Outcome | BaseException
"""What one attempt of a message does: commit with an outcome, or raise."""


@dataclass
class ScriptedPath:
    """A path whose attempts follow a script per message id (the last step repeats); a message
    with no script commits APPLIED. It counts every attempt."""

    script: dict[str, list[Step]] = field(default_factory=dict)
    strategy: Strategy = Strategy.CORRECT
    batches: bool = True
    attempts: dict[str, int] = field(default_factory=dict)
    batch_attempts: int = 0

    def _step(self, run: Attempt, event: Envelope) -> Outcome:
        done = self.attempts.get(event.message_id, 0)
        self.attempts[event.message_id] = done + 1
        steps = self.script.get(event.message_id, [Outcome.APPLIED])
        step = steps[min(done, len(steps) - 1)]
        if isinstance(step, BaseException):
            if isinstance(step, psycopg.OperationalError) and "session" in str(step):
                run.connection.broken = True  # type: ignore[misc]
            raise step
        return step

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        return self._step(run, event)

    def attempt_batch(self, run: Attempt, events: Sequence[Envelope], handlers: Sequence[Handler]) -> list[Outcome]:
        self.batch_attempts += 1
        for event in events:
            steps = self.script.get(event.message_id, [Outcome.APPLIED])
            if any(isinstance(step, BaseException) for step in steps):
                raise RuntimeError(f"{event.message_id} fails: the batch rolls back")
        return [self._step(run, event) for event in events]


class FakeMessage:
    """A Kafka record as confluent-kafka's Message shows it."""

    def __init__(
        self, topic: str, partition: int, offset: int, value: bytes, key: bytes | None = None, deliveries: int = 1
    ) -> None:
        self._topic, self._partition, self._offset, self._value, self._key = topic, partition, offset, value, key
        self._deliveries = deliveries

    def delivery_count(self) -> int:
        """A share group's count of this record's deliveries (1: the first)."""
        return self._deliveries

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes]]:
        return []

    def error(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


class FakeKafkaConsumer:
    """The client side of a group member: records each stored offset, seek and commit."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.stored: dict[tuple[str, int], int] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.sought: list[tuple[str, int, int]] = []

    def store_offsets(self, message: Any = None, offsets: Sequence[TopicPartition] | None = None) -> None:
        if message is not None:
            self.stored[(message.topic(), message.partition())] = message.offset() + 1
        for offset in offsets or ():
            self.stored[(offset.topic, offset.partition)] = offset.offset

    def commit(self, asynchronous: bool = True) -> None:
        self.committed.update(self.stored)

    def seek(self, partition: TopicPartition) -> None:
        self.sought.append((partition.topic, partition.partition, partition.offset))

    def close(self) -> None:
        pass


class FakeShareConsumer:
    """The client side of a share-group member: records each acknowledgement and each send."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.acknowledged: list[tuple[int, int, Any]] = []
        """(partition, offset, AcknowledgeType), in the order given."""
        self.sends = 0
        self.pending = 0

    def acknowledge(self, message: Any, ack_type: Any) -> None:
        self.acknowledged.append((message.partition(), message.offset(), ack_type))
        self.pending += 1

    def commit_sync(self) -> dict[TopicPartition, Any]:
        self.sends += 1
        self.pending = 0
        return {}

    def close(self) -> None:
        pass


@dataclass
class FakeDeadLetters:
    """A dead-letter topic that confirms every letter and keeps (message id, reason)."""

    topic: str = "dlq.fake"
    letters: list[tuple[str | None, str]] = field(default_factory=list)

    def publish(self, message: Any, reason: str, error_class: str, error_text: str, message_id: str | None) -> None:
        self.letters.append((message_id, reason))


def envelopes(keys: Sequence[str], event_type: str = "Thing") -> Iterator[Envelope]:
    """One new event per key, of `event_type`."""
    for key in keys:
        yield Envelope.new(event_type, key, {"n": 1})


def no_sleep(_seconds: float) -> None:
    """The processor's backoff, without the wait."""


Handlers = dict[str, Callable[[Envelope, Any], None]]


class RecordedTelemetry:
    """Telemetry that keeps what it is told: (kind, fields) per record."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.records.append((kind, fields))

    def flush(self, timeout: float) -> None:
        pass
