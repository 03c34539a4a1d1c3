"""The facts behind an order's proof page (proof.py), read as the read-only auditor: its outbox
events, the markers claimed for them, each effect's business rows, what the sandboxes hold for
it, and what the processes told the panel about it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from auditor.invariants import Query
from chaos_panel.domain.proof import EFFECTS, Facts
from chaos_panel.reading import records
from chaos_panel.reading.records import literal
from chaos_panel.reading.telemetry_store import TelemetryStore
from services.topology import consumer

ROWS = {
    "Reservation": (
        "inventory",
        "SELECT format('%s × %s, %s', quantity, sku, status) FROM reservation WHERE order_id = {id} ORDER BY sku",
    ),
    "Charge": (
        "payment",
        "SELECT format('attempt %s, key %s: %s%s, %s call(s)', attempt, idempotency_key, status,"
        " coalesce(', charge ' || provider_charge_id, ''), provider_calls)"
        " FROM payment_attempt WHERE order_id = {id} ORDER BY attempt",
    ),
    "Email": (
        "notification",
        "SELECT format('%s, key %s: %s after %s attempt(s)', kind, idempotency_key, status, send_attempts)"
        " FROM notification WHERE order_id = {id} ORDER BY kind",
    ),
    "Sales projection row": (
        "notification",
        "SELECT format('%s cents, authorized %s', amount_cents, to_char(authorized_at, 'HH24:MI:SS.MS'))"
        " FROM sales_projection WHERE order_id = {id}",
    ),
}
OUTSIDE = {
    "Charge": (
        "payment_provider",
        "SELECT format('charge %s for key %s, %s cents', charge_id, idempotency_key, amount_cents)"
        " FROM charge WHERE order_id = {id} ORDER BY created_at",
    ),
    "Email": (
        "mail",
        "SELECT format('message for key %s, posted %s time(s), kept once', idempotency_key, deliveries)"
        " FROM mail_message WHERE order_id = {id} ORDER BY received_at",
    ),
}


def _markers(query: Query, message_ids: list[str]) -> dict[tuple[str, str], datetime]:
    if not message_ids:
        return {}
    ids = ", ".join(literal(message_id) for message_id in message_ids)
    consumers = ", ".join(literal(spec.consumer) for spec in EFFECTS)
    found: dict[tuple[str, str], datetime] = {}
    for database in sorted({consumer(spec.consumer).database for spec in EFFECTS}):
        for consumer_name, message_id, at in query(
            database,
            f"""SELECT consumer_name, message_id, processed_at FROM processed_message
                 WHERE message_id IN ({ids}) AND consumer_name IN ({consumers})""",
        ):
            found[(str(consumer_name), str(message_id))] = at
    return found


def read(query: Query, store: TelemetryStore, order_id: str, lossy_failovers: Sequence[float] = ()) -> Facts:
    """Everything the proof of `order_id` needs (ValueError for an id that cannot be one);
    `lossy_failovers`: when the PostgreSQL pair failed over to an asynchronous standby."""
    key = literal(order_id)
    events = records.events_of_order(query, order_id)
    ordered = query("orders", f"SELECT idempotency_key FROM customer_order WHERE order_id = {key}")
    return Facts(
        idempotency_key=str(ordered[0][0]) if ordered and ordered[0][0] else None,
        events=events,
        told=store.for_key(order_id),
        markers=_markers(query, [event.message_id for event in events]),
        rows={name: [str(row[0]) for row in query(db, sql.format(id=key))] for name, (db, sql) in ROWS.items()},
        outside={name: [str(row[0]) for row in query(db, sql.format(id=key))] for name, (db, sql) in OUTSIDE.items()},
        lossy_failovers=list(lossy_failovers),
    )
