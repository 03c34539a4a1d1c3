"""A small test domain for the runtime: a ledger of effects, a business-keyed reservation and an
order state that never moves backwards. Lives in its own `runtime_tests` database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from effectively_once.consumer.processor import BulkHandler, Connection, Handler
from effectively_once.envelope import Envelope

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    id            bigserial   PRIMARY KEY,
    consumer_name text        NOT NULL,
    message_id    text        NOT NULL,
    order_key     text        NOT NULL,
    amount        integer     NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ledger_order_key ON ledger (order_key);
CREATE TABLE IF NOT EXISTS reservation (
    order_key text    NOT NULL,
    sku       text    NOT NULL,
    quantity  integer NOT NULL,
    PRIMARY KEY (order_key, sku)
);
CREATE TABLE IF NOT EXISTS order_state (
    order_key text    PRIMARY KEY,
    state     text    NOT NULL,
    rank      integer NOT NULL
);
CREATE TABLE IF NOT EXISTS counter (
    name  text    PRIMARY KEY,
    value integer NOT NULL
);
"""

LEDGER_ENTRY = "LedgerEntry"
STATE_RANK = {"OrderPlaced": 1, "InventoryReserved": 2, "PaymentAuthorized": 3}


def ledger_handler(consumer_name: str) -> Handler:
    """Writes one ledger row per application; `payload.fail` makes it fail after writing."""

    def handle(event: Envelope, transaction: Connection) -> None:
        transaction.execute(
            "INSERT INTO ledger (consumer_name, message_id, order_key, amount) VALUES (%s, %s, %s, %s)",
            (consumer_name, event.message_id, event.key, int(event.payload.get("amount", 1))),
        )
        if event.payload.get("fail"):
            raise RuntimeError("the business rule refused this event")

    return handle


def ledger_bulk_handler(consumer_name: str) -> BulkHandler:
    """The same as ledger_handler for many events: one multi-row statement (batched mode)."""

    def handle(events: Sequence[Envelope], transaction: Connection) -> None:
        with transaction.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO ledger (consumer_name, message_id, order_key, amount) VALUES (%s, %s, %s, %s)",
                [(consumer_name, e.message_id, e.key, int(e.payload.get("amount", 1))) for e in events],
            )
        if any(event.payload.get("fail") for event in events):
            raise RuntimeError("the business rule refused an event")

    return handle


def reserve(event: Envelope, transaction: Connection) -> None:
    """The business key (order, sku) stops a semantic duplicate that carries a new message id."""
    transaction.execute(
        "INSERT INTO reservation (order_key, sku, quantity) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
        (event.key, event.payload["sku"], event.payload["quantity"]),
    )


def advance_state(event: Envelope, transaction: Connection) -> None:
    """The order's state moves forward only, whatever order the events arrive in."""
    transaction.execute(
        """INSERT INTO order_state (order_key, state, rank) VALUES (%s, %s, %s)
           ON CONFLICT (order_key) DO UPDATE SET state = EXCLUDED.state, rank = EXCLUDED.rank
           WHERE order_state.rank < EXCLUDED.rank""",
        (event.key, event.type, STATE_RANK[event.type]),
    )


def ledger_rows(url: str, consumer_name: str, message_id: str | None = None) -> int:
    with psycopg.connect(url) as connection:
        if message_id is None:
            row = connection.execute(
                "SELECT count(*) FROM ledger WHERE consumer_name = %s", (consumer_name,)
            ).fetchone()
        else:
            row = connection.execute(
                "SELECT count(*) FROM ledger WHERE consumer_name = %s AND message_id = %s",
                (consumer_name, message_id),
            ).fetchone()
    return int(row[0]) if row else 0


def markers(url: str, consumer_name: str, message_id: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM processed_message WHERE consumer_name = %s AND message_id = %s",
            (consumer_name, message_id),
        ).fetchone()
    return int(row[0]) if row else 0


def entry(key: str, **payload: Any) -> Envelope:
    return Envelope.new(LEDGER_ENTRY, key, payload)
