"""An outbox of a test's own, and the relay and reader that work on it."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
from confluent_kafka import Consumer, Message, Producer
from psycopg.conninfo import make_conninfo

from effectively_once import schema
from effectively_once.faults import FaultPoints
from effectively_once.kafka_client import client_config
from effectively_once.outbox import add_to_outbox
from effectively_once.relay.publish import producer_settings
from effectively_once.relay.settings import RelaySettings
from effectively_once.relay.worker import DatabaseRelay
from tests.support.migration_files import apply_files
from workbench.ledger import entry


def new_outbox(runtime_db: str) -> str:
    """A schema of its own holding the runtime's tables (the outbox among them); the URL that
    reaches it through search_path."""
    name = f"outbox_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {name}")
        connection.execute(f"SET search_path = {name}")
        apply_files(connection, sorted(schema.MIGRATIONS.glob("*.sql")))
    return make_conninfo(runtime_db, options=f"-c search_path={name}")


def write_events(url: str, topic: str, keys: list[str], per_key: int) -> list[str]:
    """One event per transaction, keys interleaved; returns message ids in commit order."""
    ids = []
    with psycopg.connect(url) as connection:
        for n in range(per_key):
            for key in keys:
                event = entry(key, sequence=n)
                with connection.transaction():
                    add_to_outbox(connection, event, topic)
                ids.append(event.message_id)
    return ids


def relay_settings(bootstrap: str, **overrides: Any) -> RelaySettings:
    return RelaySettings(**{"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "RELAY_POLL_INTERVAL_SECONDS": 0.2, **overrides})


def make_relay(
    url: str, bootstrap: str, faults: FaultPoints | None = None, cdc_slot: str | None = None, **overrides: Any
) -> DatabaseRelay:
    settings = relay_settings(bootstrap, **overrides)
    producer = Producer(producer_settings(bootstrap, settings.RELAY_DELIVERY_TIMEOUT_SECONDS))
    return DatabaseRelay(
        "test", lambda: psycopg.connect(url), producer, settings, faults or FaultPoints(), cdc_slot=cdc_slot
    )


def read_topic(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list[Message]:
    reader = Consumer(
        {
            **client_config(bootstrap),
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    reader.subscribe([topic])
    found: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
    finally:
        reader.close()
    return found
