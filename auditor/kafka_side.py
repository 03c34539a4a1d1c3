"""What Kafka holds, held against the databases: the two anomalies no database can show alone.

A failover to an asynchronous standby takes back commits the primary had made, in every database
at once: what survives is consistent with itself, so the invariants (invariants.py) stay green.
Kafka, which is not rolled back, still holds the evidence:

- **lost**: a message a consumer group has acknowledged (its committed offset is past it) whose
  marker is absent. The marker commits before the offset, so an acknowledged message always has
  one, unless the database lost it after the acknowledgement. The group will never read it again:
  its work is gone unless the group is rewound (`make db DO=rewind`).
- **phantom**: an event in a topic whose outbox row is gone from the service that wrote it, with
  no other event of its type for its order there. The relay published it, then the row went with
  the failover: the world heard of a fact the service no longer has. Once the service decides
  again (after a rewind) and writes the same fact under a new id, the phantom is superseded and no
  longer counted. The report says what to do about each kind.

The messages' dead letters, retention's purged markers and the panel's injected copies are told
apart and not counted. Read in this order, so that nothing committed between two reads can look
lost: the topics, then the groups' committed offsets, then the markers and the outboxes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from effectively_once.kafka_client import client_config
from effectively_once.relay.settings import RelaySettings
from services import saga_contract as contract
from services.topology import (
    CONSUMERS,
    EVENT_TOPICS,
    INVENTORY_EVENTS,
    NOTIFICATION_EVENTS,
    ORDERS_EVENTS,
    PAYMENT_EVENTS,
    TOPIC_PARTITIONS,
)

from .dead_letters import DeadLetter, read_to_end
from .invariants import Query

SOURCE_OF = {
    ORDERS_EVENTS: "orders",
    INVENTORY_EVENTS: "inventory",
    PAYMENT_EVENTS: "payment",
    NOTIFICATION_EVENTS: "notification",
}
"""Topic -> the service whose outbox its events come from."""

OUTBOX_RETENTION = timedelta(hours=RelaySettings.model_fields["OUTBOX_RETENTION_HOURS"].default)

WHAT_TO_DO = {
    contract.ORDER_PLACED: "the customer was told the order was placed and it is gone: place it again from "
    "the event's payload, or tell the customer; a rewind makes inventory reserve stock for it",
    contract.INVENTORY_RESERVED: "a rewind re-applies the OrderPlaced before it: inventory decides again "
    "and payment applies the new decision once (one decision per order)",
    contract.INVENTORY_RESERVATION_FAILED: "a rewind re-applies the OrderPlaced before it: inventory decides again",
    contract.INVENTORY_RELEASED: "a rewind re-applies the PaymentFailed before it: the stock is released again",
    contract.PAYMENT_AUTHORIZED: "the provider's charge carries the payment's idempotency key: a rewind "
    "re-applies the InventoryReserved and the provider answers with the same charge",
    contract.PAYMENT_FAILED: "a rewind re-applies the InventoryReserved before it: payment decides again",
    contract.NOTIFICATION_SENT: "the mail sandbox keeps the email under its idempotency key: a rewind sends none twice",
    contract.NOTIFICATION_FAILED: "a rewind re-applies the PaymentAuthorized before it",
}


@dataclass(frozen=True)
class Published:
    """One event as a topic holds it."""

    topic: str
    partition: int
    offset: int
    message_id: str
    event_type: str
    order_id: str
    at: datetime
    """The record's timestamp."""

    @property
    def location(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"


@dataclass(frozen=True)
class Lost:
    consumer: str
    event: Published

    def describe(self) -> str:
        return (
            f"{self.consumer} acknowledged {self.event.event_type} {self.event.message_id} of order "
            f"{self.event.order_id} ({self.event.location}) and has no marker of it: its work went with a "
            "failover, or a teaching strategy that keeps no marker applied it"
        )


@dataclass(frozen=True)
class Phantom:
    service: str
    event: Published

    def describe(self) -> str:
        return (
            f"{self.event.event_type} {self.event.message_id} of order {self.event.order_id} is in "
            f"{self.event.location} and not in {self.service}'s outbox"
        )

    @property
    def what_to_do(self) -> str:
        return WHAT_TO_DO.get(self.event.event_type, "compare the event with the service's state")


@dataclass
class KafkaSide:
    lost: list[Lost] = field(default_factory=list)
    phantoms: list[Phantom] = field(default_factory=list)
    acknowledged: int = 0
    """Acknowledged messages held against their markers."""
    published: int = 0
    """Events held against their outbox rows."""

    @property
    def clean(self) -> bool:
        return not self.lost and not self.phantoms

    def of_orders(self, order_ids: Iterable[str]) -> KafkaSide:
        """Only what concerns these orders (a soak's, on a system that may hold others)."""
        mine = set(order_ids)
        return KafkaSide(
            lost=[x for x in self.lost if x.event.order_id in mine],
            phantoms=[x for x in self.phantoms if x.event.order_id in mine],
            acknowledged=self.acknowledged,
            published=self.published,
        )

    @property
    def ghost_orders(self) -> list[str]:
        """Orders whose OrderPlaced is a phantom: the customer was told the order was placed, and
        the orders service no longer has it."""
        return sorted({p.event.order_id for p in self.phantoms if p.event.event_type == contract.ORDER_PLACED})

    def earliest_lost(self) -> datetime | None:
        return min((lost.event.at for lost in self.lost), default=None)


def published_event(message: Any) -> Published | None:
    """The event a record carries; None for a record the panel injected or that is no event."""
    headers = dict(message.headers() or [])
    if "eo-injected" in headers:
        return None
    try:
        body = json.loads(message.value() or b"")
        message_id, event_type, key = str(body["message_id"]), str(body["type"]), str(body["key"])
    except (ValueError, KeyError, TypeError):
        return None
    if event_type not in contract.TOPIC_OF:
        return None
    _, stamp = message.timestamp()
    return Published(
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        message_id=message_id,
        event_type=event_type,
        order_id=key,
        at=datetime.fromtimestamp(stamp / 1000, UTC),
    )


def read_events(bootstrap_servers: str) -> list[Published]:
    events: list[Published] = []

    def take(message: Any) -> None:
        if (event := published_event(message)) is not None:
            events.append(event)

    read_to_end(bootstrap_servers, list(EVENT_TOPICS), take)
    return events


def committed_offsets(bootstrap_servers: str, group: str, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the group's committed offset (the next message it will read); absent
    where it has committed none. The group is not joined."""
    consumer = Consumer({**client_config(bootstrap_servers), "group.id": group, "enable.auto.commit": False})
    try:
        asked = [TopicPartition(topic, partition) for topic in topics for partition in range(TOPIC_PARTITIONS)]
        return {
            (found.topic, found.partition): found.offset
            for found in consumer.committed(asked, timeout=15)
            if found.offset >= 0
        }
    finally:
        consumer.close()


def check(query: Query, bootstrap_servers: str, dead_letters: Iterable[DeadLetter]) -> KafkaSide:
    """Every acknowledged message against its consumer's markers; every event against its outbox."""
    events = read_events(bootstrap_servers)
    committed = {
        consumer.name: committed_offsets(bootstrap_servers, consumer.name, consumer.topics) for consumer in CONSUMERS
    }
    dead = {(letter.consumer, letter.message_id) for letter in dead_letters}
    side = KafkaSide()
    for consumer in CONSUMERS:
        handled = contract.HANDLED_BY[consumer.name]
        rows = query(
            consumer.database,
            f"""SELECT 'marker', message_id::text, NULL::timestamptz FROM processed_message
                 WHERE consumer_name = '{consumer.name}'
                UNION ALL SELECT 'purged', NULL, purged_through FROM marker_retention
                 WHERE consumer_name = '{consumer.name}'""",
        )
        marked = {row[1] for row in rows if row[0] == "marker"}
        purged_through = next((row[2] for row in rows if row[0] == "purged" and row[2] is not None), None)
        for event in events:
            if (
                event.topic not in consumer.topics
                or event.event_type not in handled
                or event.offset >= committed[consumer.name].get((event.topic, event.partition), 0)
                or (consumer.name, event.message_id) in dead
                or (purged_through is not None and event.at < purged_through)
            ):
                continue
            side.acknowledged += 1
            if event.message_id not in marked:
                side.lost.append(Lost(consumer.name, event))
    for topic, service in SOURCE_OF.items():
        rows = query(service, "SELECT message_id::text, aggregate_key, event_type, created_at FROM outbox")
        written = {row[0] for row in rows}
        facts = {(row[1], row[2]) for row in rows}
        # The relay purges published rows after their retention: an event older than the oldest row
        # left (or, in an empty outbox, than the default retention) may have lost its row that way.
        kept_since = min((row[3] for row in rows), default=datetime.now(UTC) - OUTBOX_RETENTION)
        for event in events:
            if event.topic != topic or event.at < kept_since:
                continue
            side.published += 1
            if event.message_id not in written and (event.order_id, event.event_type) not in facts:
                side.phantoms.append(Phantom(service, event))
    return side


def report(side: KafkaSide) -> Iterable[str]:
    """The lost and the phantoms, order by order, each with what to do."""
    if side.clean:
        yield (
            f"KAFKA SIDE: CLEAN — every acknowledged message has its marker ({side.acknowledged} checked), "
            f"every event its outbox row ({side.published} checked)"
        )
        return
    orders = sorted({lost.event.order_id for lost in side.lost} | {p.event.order_id for p in side.phantoms})
    yield (
        f"KAFKA SIDE: {len(side.lost)} acknowledged message(s) lost, {len(side.phantoms)} phantom event(s), "
        f"{len(orders)} order(s)"
    )
    for order_id in orders:
        lost = [f"{x.event.event_type} by {x.consumer}" for x in side.lost if x.event.order_id == order_id]
        phantoms = [f"{p.event.event_type} ({p.service})" for p in side.phantoms if p.event.order_id == order_id]
        ghost = " — GHOST: its OrderPlaced is a phantom" if order_id in side.ghost_orders else ""
        yield f"  ✗ order {order_id}{ghost}"
        if lost:
            yield f"      lost: {', '.join(lost)}"
        if phantoms:
            yield f"      phantom: {', '.join(phantoms)}"
    if side.lost:
        yield "  what to do with the lost: rewind every consumer to before the first of them (make db DO=rewind);"
        yield "    each lost message is applied once, what survived is counted as a duplicate"
    for event_type in sorted({p.event.event_type for p in side.phantoms}):
        yield f"  what to do with a phantom {event_type}: {WHAT_TO_DO[event_type]}"
