"""The orders saga consumer's handler: follow every event, move the order forward."""

from __future__ import annotations

from effectively_once.consumer.processor import Connection, NonRetryable
from effectively_once.envelope import Envelope
from services.orders.domain import OrderStatus, next_status


def follow_saga_event(event: Envelope, transaction: Connection) -> None:
    """Record the event in the order's history and move its status if the event says so; once per
    order and event type, whatever message ids it comes under (each service decides a fact once: a
    second event of one type for one order, under another id, is a semantic duplicate, and changes
    nothing). The order's row lock serialises the saga's transactions on one order."""
    row = transaction.execute(
        "SELECT status FROM customer_order WHERE order_id = %s FOR UPDATE", (event.key,)
    ).fetchone()
    if row is None:
        raise NonRetryable(f"no order {event.key!r}")
    seen = transaction.execute(
        "SELECT 1 FROM order_history WHERE order_id = %s AND event_type = %s AND message_id <> %s",
        (event.key, event.type, event.message_id),
    ).fetchone()
    if seen is not None:
        return
    current = OrderStatus(row[0])
    after = next_status(current, event.type)
    if after is not current:
        transaction.execute(
            "UPDATE customer_order SET status = %s, updated_at = now() WHERE order_id = %s",
            (after.value, event.key),
        )
    transaction.execute(
        "INSERT INTO order_history (order_id, message_id, event_type, status_after) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT DO NOTHING",
        (event.key, event.message_id, event.type, after.value),
    )
