"""The soak's history: what the clients asked and were answered, every event each outbox wrote,
every consumer's claim and every effect in every ledger, as JSON lines.

It is read straight from the databases (as the read-only auditor role) at the end of a soak, and
judged by soak/checker.py, which shares no code with the auditor: two independent readings of
the same run must agree.

Each line is an object with a `type`:

- `request`: a client operation and its answer (`order_id` when accepted, `reason` when refused);
- `event`: an outbox row (`service`, `message_id`, `key`, `event_type`, `created_at`, `published`);
- `claim`: a consumer's marker (`consumer`, `message_id`, `at`: its transaction's start);
- `effect`: a ledger row (`ledger`: order, history, decision, reservation, payment, charge, email,
  notification, projection; `order_id`; `status` where the ledger has one: for the order's history,
  the event type it recorded; for inventory's decision, reserved or refused);

and, read from Kafka (what a database failover cannot take back):

- `published`: an event record in its topic (`topic`, `partition`, `offset`, `message_id`, `key`,
  `event_type`), the panel's injected copies left out;
- `acknowledged`: a consumer group's committed offset of one partition (`consumer`, `topic`,
  `partition`, `offset`: the next record it will read);
- `dead_letter`: a record a consumer dead-lettered (`consumer`, `message_id`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from itertools import chain
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from effectively_once.kafka_client import client_config
from services.orders.load import LoadResult
from services.topology import CONSUMERS, EVENT_TOPICS, TOPIC_PARTITIONS

Reader = Callable[[str, str], list[tuple[Any, ...]]]
"""(database, SQL) -> rows."""

OUTBOX_DATABASES = ("orders", "inventory", "payment", "notification")

LEDGERS = (
    ("order", "orders", "SELECT order_id, status FROM customer_order"),
    ("history", "orders", "SELECT order_id, event_type FROM order_history"),
    ("decision", "inventory", "SELECT order_id, outcome FROM reservation_decision"),
    ("reservation", "inventory", "SELECT order_id, status FROM reservation"),
    ("payment", "payment", "SELECT order_id, status FROM payment_attempt"),
    ("charge", "payment_provider", "SELECT order_id, 'charged' FROM charge"),
    ("email", "mail", "SELECT order_id, 'sent' FROM mail_message WHERE order_id IS NOT NULL"),
    ("notification", "notification", "SELECT order_id, status FROM notification"),
    ("projection", "notification", "SELECT order_id, 'projected' FROM sales_projection"),
)


def reader(url_of: Callable[[str], str]) -> Reader:
    def read(database: str, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(url_of(database), connect_timeout=5) as connection:
            return connection.execute(sql).fetchall()

    return read


def _when(value: datetime) -> str:
    return value.isoformat()


def lines(read: Reader, load: LoadResult) -> Iterator[dict[str, Any]]:
    """Every history line of a finished run, about the orders it placed (a system may hold others)."""
    mine = set(load.order_ids)
    for order_id in load.order_ids:
        yield {"type": "request", "op": "place_order", "answer": "ok", "order_id": order_id}
    for reason, count in sorted(load.failures.items()):
        for _ in range(count):
            yield {"type": "request", "op": "place_order", "answer": "refused", "reason": reason}
    events: set[str] = set()
    for service in OUTBOX_DATABASES:
        rows = read(
            service,
            "SELECT message_id, aggregate_key, event_type, created_at, published_at IS NOT NULL"
            " FROM outbox ORDER BY created_at, message_id",
        )
        for message_id, key, event_type, created_at, published in rows:
            if key not in mine:
                continue
            events.add(str(message_id))
            yield {
                "type": "event",
                "service": service,
                "message_id": str(message_id),
                "key": key,
                "event_type": event_type,
                "created_at": _when(created_at),
                "published": bool(published),
            }
    for service in OUTBOX_DATABASES:  # a consumer claims events of other services' outboxes
        for consumer, message_id, at in read(
            service, "SELECT consumer_name, message_id, processed_at FROM processed_message ORDER BY processed_at"
        ):
            if str(message_id) in events:
                yield {"type": "claim", "consumer": consumer, "message_id": str(message_id), "at": _when(at)}
    for ledger, database, sql in LEDGERS:
        for order_id, status in read(database, sql):
            if order_id in mine:
                yield {"type": "effect", "ledger": ledger, "order_id": order_id, "status": status}


def _records(bootstrap_servers: str, topics: list[str], timeout: float = 60) -> Iterator[Any]:
    """Every record of `topics`, from the beginning to the end each partition had when reached."""
    consumer = Consumer(
        {
            **client_config(bootstrap_servers),
            "group.id": "effectively-once-soak-history",  # assigned, never joined; nothing committed
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 20,  # a reader to the end: answer at once, not after 500 ms per fetch
            "log_level": 3,
        }
    )
    partitions = [TopicPartition(topic, n, OFFSET_BEGINNING) for topic in topics for n in range(TOPIC_PARTITIONS)]
    consumer.assign(partitions)
    ended: set[tuple[str, int]] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(ended) < len(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{', '.join(topics)} not read to their end within {timeout:.0f} s")
            for record in consumer.consume(500, 0.1):
                error = record.error()
                if error is None:
                    yield record
                elif error.code() == KafkaError._PARTITION_EOF:
                    ended.add((record.topic() or "", record.partition() or 0))
    finally:
        consumer.close()


def kafka_lines(bootstrap_servers: str, load: LoadResult) -> Iterator[dict[str, Any]]:
    """The run's event records as the topics hold them, each group's committed offsets and the dead
    letters. Read in this order: an offset committed after its records were read can only be
    further on, never behind a record it acknowledged."""
    mine = set(load.order_ids)
    for record in _records(bootstrap_servers, list(EVENT_TOPICS)):
        headers = dict(record.headers() or [])
        try:
            body = json.loads(record.value() or b"")
            message_id, key, event_type = str(body["message_id"]), str(body["key"]), str(body["type"])
        except (ValueError, KeyError, TypeError):
            continue
        if key in mine and "eo-injected" not in headers:
            yield {
                "type": "published",
                "topic": record.topic(),
                "partition": record.partition(),
                "offset": record.offset(),
                "message_id": message_id,
                "key": key,
                "event_type": event_type,
            }
    for consumer in CONSUMERS:
        group = Consumer({**client_config(bootstrap_servers), "group.id": consumer.name, "enable.auto.commit": False})
        try:
            asked = [TopicPartition(topic, n) for topic in consumer.topics for n in range(TOPIC_PARTITIONS)]
            for committed in group.committed(asked, timeout=15):
                if committed.offset >= 0:
                    yield {
                        "type": "acknowledged",
                        "consumer": consumer.name,
                        "topic": committed.topic,
                        "partition": committed.partition,
                        "offset": committed.offset,
                    }
        finally:
            group.close()
    for record in _records(bootstrap_servers, [consumer.dead_letter_topic for consumer in CONSUMERS]):
        headers = {name: (value or b"").decode(errors="replace") for name, value in record.headers() or []}
        yield {
            "type": "dead_letter",
            "consumer": (record.topic() or "").removeprefix("dlq."),
            "message_id": headers.get("eo-message-id", ""),
        }


def write(path: Path, read: Reader, load: LoadResult, bootstrap_servers: str = "") -> int:
    """Write the history to `path` (with Kafka's lines when `bootstrap_servers` is given); return
    how many lines it has."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w") as out:
        for line in chain(lines(read, load), kafka_lines(bootstrap_servers, load) if bootstrap_servers else ()):
            out.write(json.dumps(line, sort_keys=True) + "\n")
            count += 1
    return count
