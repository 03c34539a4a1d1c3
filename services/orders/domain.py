"""The order's saga state machine: no I/O.

Events arrive from several topics, so in any order. The status only ever moves forward: an event
that would move it backwards (or out of a final status) is recorded in the history and changes
nothing.
"""

from __future__ import annotations

from enum import StrEnum

from services import saga_contract as events


class OrderStatus(StrEnum):
    PLACED = "PLACED"
    RESERVED = "RESERVED"
    PAID = "PAID"
    CONFIRMED = "CONFIRMED"
    """Paid; its confirmation email sent, or parked with its reason (NotificationFailed)."""
    REJECTED = "REJECTED"
    """Out of stock: nothing was reserved, nothing charged."""
    CANCELLED = "CANCELLED"
    """Payment declined, or refused for good: the reservation is released."""


FINAL = frozenset({OrderStatus.CONFIRMED, OrderStatus.REJECTED, OrderStatus.CANCELLED})
RANK = {
    OrderStatus.PLACED: 1,
    OrderStatus.RESERVED: 2,
    OrderStatus.PAID: 3,
    OrderStatus.CONFIRMED: 4,
    OrderStatus.REJECTED: 4,
    OrderStatus.CANCELLED: 4,
}
TARGET = {
    events.INVENTORY_RESERVED: OrderStatus.RESERVED,
    events.INVENTORY_RESERVATION_FAILED: OrderStatus.REJECTED,
    events.PAYMENT_AUTHORIZED: OrderStatus.PAID,
    events.PAYMENT_FAILED: OrderStatus.CANCELLED,
    events.NOTIFICATION_SENT: OrderStatus.CONFIRMED,
    events.NOTIFICATION_FAILED: OrderStatus.CONFIRMED,
}
"""The status each event moves an order towards; other events only enter the history."""


def next_status(current: OrderStatus, event_type: str) -> OrderStatus:
    """Where `event_type` takes an order now in `current`: forward, or nowhere."""
    target = TARGET.get(event_type)
    if target is None or current in FINAL or RANK[target] <= RANK[current]:
        return current
    return target
