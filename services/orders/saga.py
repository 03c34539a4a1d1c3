"""The orders saga consumer's handler: follow every event, move the order forward."""

from __future__ import annotations

from effectively_once.consumer.processor import Connection, NonRetryable
from effectively_once.envelope import Envelope
from services.orders.domain import OrderStatus, next_status

LOCK_ORDER = "SELECT status FROM customer_order WHERE order_id = %s FOR UPDATE"
FOLLOW = """
WITH seen AS (SELECT 1 FROM order_history
               WHERE order_id = %(order_id)s AND event_type = %(type)s AND message_id <> %(message_id)s),
     moved AS (UPDATE customer_order SET status = %(after)s, updated_at = now()
                WHERE order_id = %(order_id)s AND %(moves)s AND NOT EXISTS (SELECT 1 FROM seen))
INSERT INTO order_history (order_id, message_id, event_type, status_after)
SELECT %(order_id)s, %(message_id)s, %(type)s, %(after)s WHERE NOT EXISTS (SELECT 1 FROM seen)
    ON CONFLICT DO NOTHING"""
"""The event followed, in one statement: unless the order's history holds this event type under
another message id (a semantic duplicate, which changes nothing), the order moves to `after`
(where `moves`) and the event enters its history. It runs after LOCK_ORDER took the order's row,
so its snapshot holds everything the lock's previous holder committed."""


def follow_saga_event(event: Envelope, transaction: Connection) -> None:
    """Record the event in the order's history and move its status if the event says so; once per
    order and event type, whatever message ids it comes under (each service decides a fact once: a
    second event of one type for one order, under another id, is a semantic duplicate, and changes
    nothing). The order's row lock serialises the saga's transactions on one order."""
    row = transaction.execute(LOCK_ORDER, (event.key,)).fetchone()
    if row is None:
        raise NonRetryable(f"no order {event.key!r}")
    current = OrderStatus(row[0])
    after = next_status(current, event.type)
    transaction.execute(
        FOLLOW,
        {
            "order_id": event.key,
            "type": event.type,
            "message_id": event.message_id,
            "after": after.value,
            "moves": after is not current,
        },
    )
