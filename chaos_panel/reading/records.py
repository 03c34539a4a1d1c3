"""What the panel reads from the service databases (as the read-only auditor): orders, and the
outbox rows of one order in every service."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from auditor.invariants import Query
from effectively_once.relay.claim import ENVELOPE
from services.topology import DATABASES

OUTBOX_DATABASES = tuple(db.name for db in DATABASES if db.runs_consumer_runtime)


@dataclass(frozen=True)
class OrderRow:
    order_id: str
    status: str
    amount_cents: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class OutboxEvent:
    database: str
    message_id: str
    key: str
    event_type: str
    topic: str
    created_at: datetime
    published_at: datetime | None
    attempts: int
    last_error: str | None
    trace_id: str | None
    envelope: str
    """The bytes consumers get, built as the relay builds them. Never shown on a page."""

    @property
    def reason(self) -> str | None:
        """A failure event's reason (its payload's `reason`, which holds no personal data)."""
        if not self.event_type.endswith("Failed"):
            return None
        try:
            reason = json.loads(self.envelope).get("payload", {}).get("reason")
        except (ValueError, AttributeError):
            return None
        return str(reason) if reason else None


def recent_orders(query: Query, limit: int = 25) -> list[OrderRow]:
    rows = query(
        "orders",
        f"""SELECT order_id, status, amount_cents, created_at, updated_at FROM customer_order
             ORDER BY created_at DESC LIMIT {int(limit)}""",
    )
    return [OrderRow(*row) for row in rows]


def order(query: Query, order_id: str) -> OrderRow | None:
    rows = query(
        "orders",
        "SELECT order_id, status, amount_cents, created_at, updated_at FROM customer_order "
        f"WHERE order_id = {literal(order_id)}",
    )
    return OrderRow(*rows[0]) if rows else None


def status_counts(query: Query) -> dict[str, int]:
    return {status: int(n) for status, n in query("orders", "SELECT status, count(*) FROM customer_order GROUP BY 1")}


def _events(query: Query, where: str) -> list[OutboxEvent]:
    found: list[OutboxEvent] = []
    for database in OUTBOX_DATABASES:
        rows: list[tuple[Any, ...]] = query(
            database,
            f"""SELECT message_id, aggregate_key, event_type, topic, created_at, published_at, attempts,
                       last_error, headers->>'trace_id', {ENVELOPE}
                  FROM outbox WHERE {where} ORDER BY position""",
        )
        found.extend(OutboxEvent(database, *row) for row in rows)
    return sorted(found, key=lambda event: event.created_at)


def events_of_order(query: Query, order_id: str) -> list[OutboxEvent]:
    """Every event written for the order, in every service's outbox, oldest first."""
    return _events(query, f"aggregate_key = {literal(order_id)}")


def event(query: Query, message_id: str) -> OutboxEvent | None:
    found = _events(query, f"message_id = {literal(message_id)}")
    return found[0] if found else None


def literal(text: str) -> str:
    """A SQL string literal. The auditor's reader takes plain SQL; ids come from the user, so every
    quote is doubled and anything that is not printable refused."""
    if not text.isprintable() or len(text) > 255:
        raise ValueError("an id is at most 255 printable characters")
    return "'" + text.replace("'", "''") + "'"
