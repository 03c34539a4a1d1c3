"""What the platform is made of: service databases, topics, consumers and their dead-letter topics.

One source of truth, read by the launcher (what to create), by docker-compose's test (what must
be named there too) and by the services themselves. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass

TOPIC_PARTITIONS = 3
"""At least 3, so that scaling a consumer group out is real."""


@dataclass(frozen=True)
class ServiceDatabase:
    """A database owned by one service, reached through one least-privilege role."""

    name: str
    role: str
    runs_consumer_runtime: bool
    """True when the service consumes events or writes an outbox (the runtime's tables)."""

    @property
    def owner(self) -> str:
        """The role that owns the database and its tables (NOLOGIN): migrations run as it, and the
        service's own role may read and write its tables but create nothing."""
        return f"{self.name}_owner"

    @property
    def cdc_role(self) -> str:
        """The replication role Debezium reads this database's outbox through (RELAY=debezium)."""
        return f"{self.name}_cdc"

    @property
    def password_variable(self) -> str:
        """The environment variable that holds this role's password."""
        return f"{self.name.upper()}_DB_PASSWORD"


@dataclass(frozen=True)
class Consumer:
    """A stable, versioned logical consumer name and the topics it reads."""

    name: str
    database: str
    topics: tuple[str, ...]

    @property
    def dead_letter_topic(self) -> str:
        return f"dlq.{self.name}"


def _database(name: str, runs_consumer_runtime: bool) -> ServiceDatabase:
    return ServiceDatabase(name=name, role=f"{name}_svc", runs_consumer_runtime=runs_consumer_runtime)


DATABASES: tuple[ServiceDatabase, ...] = (
    *(_database(name, True) for name in ("orders", "inventory", "payment", "notification")),
    # The sandboxes stand in for the outside world: their own ledgers, no Kafka.
    *(_database(name, False) for name in ("payment_provider", "mail")),
)

ORDERS_EVENTS = "orders.events"
INVENTORY_EVENTS = "inventory.events"
PAYMENT_EVENTS = "payment.events"
NOTIFICATION_EVENTS = "notification.events"

EVENT_TOPICS: tuple[str, ...] = (
    ORDERS_EVENTS,
    INVENTORY_EVENTS,
    PAYMENT_EVENTS,
    NOTIFICATION_EVENTS,
)

CONSUMERS: tuple[Consumer, ...] = (
    Consumer("orders-saga-v1", "orders", EVENT_TOPICS),
    Consumer("inventory-reservation-v1", "inventory", (ORDERS_EVENTS, PAYMENT_EVENTS)),
    Consumer("payment-authorization-v1", "payment", (INVENTORY_EVENTS,)),
    Consumer("notification-dispatch-v1", "notification", (PAYMENT_EVENTS,)),
    Consumer("sales-projection-v1", "notification", (PAYMENT_EVENTS,)),
)

SHARE_GROUP_CONSUMERS: tuple[str, ...] = ("notification-dispatch-v1", "sales-projection-v1")
"""The consumers whose changes do not depend on the order of their messages, which may run as a
share group (SHARE_GROUPS=on: any number of members, records handed out one by one; the saga,
the reservation and the payment need each order's events in order, which only partitions keep)."""

AUDITOR_ROLE = "auditor"
"""A read-only role that may connect to every service database: the auditor's and the panel's."""
RELAY_ROLE = "outbox_relay"
"""The shared relay's role: it may read, mark and purge the outbox of every service database."""


TELEMETRY_TOPIC = "platform.telemetry"
"""Deliveries, faults and process starts, as each process tells them (the panel's timeline)."""


CDC_HEARTBEAT_PREFIX = "__eo-cdc-heartbeat"
"""Under RELAY=debezium each connector tells its position every second on a topic of this prefix,
so that its slot's confirmed position moves on while the outbox is idle (docs/debezium-relay.md)."""


CDC_SLOT_PREFIX = "eo_outbox_"
"""Under RELAY=debezium, each outbox database's replication slot is this prefix and its name."""


def cdc_slot(database_name: str) -> str:
    """The replication slot `database_name`'s connector reads (its template names it the same way)."""
    return f"{CDC_SLOT_PREFIX}{database_name}"


def cdc_connector(database_name: str) -> str:
    """The Kafka Connect connector that relays `database_name`'s outbox (its template's `name`)."""
    return f"outbox-{database_name}"


def cdc_heartbeat_topic(database_name: str) -> str:
    """The heartbeat topic of `database_name`'s connector (its topic.prefix is eo-cdc-<database>)."""
    return f"{CDC_HEARTBEAT_PREFIX}.eo-cdc-{database_name}"


def all_topics() -> tuple[str, ...]:
    """Every topic the launcher creates up front: event topics, one dead-letter topic per consumer,
    and the telemetry topic."""
    return EVENT_TOPICS + tuple(consumer.dead_letter_topic for consumer in CONSUMERS) + (TELEMETRY_TOPIC,)


def database(name: str) -> ServiceDatabase:
    """The service database called `name`."""
    for candidate in DATABASES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no service database named {name!r}")


def consumer(name: str) -> Consumer:
    """The consumer called `name`."""
    for candidate in CONSUMERS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no consumer named {name!r}")
