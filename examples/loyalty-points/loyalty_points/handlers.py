"""The service's handlers. Each runs inside the runtime's transaction, with the marker the
runtime claimed: it changes tables and returns; it never commits."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from effectively_once.consumer.processor import Connection
from effectively_once.envelope import Envelope
from effectively_once.typed_payload import typed

ORDER_CONFIRMED = "OrderConfirmed"
ORDER_REFUNDED = "OrderRefunded"


class OrderConfirmed(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    order_id: str = Field(min_length=1, max_length=100)
    customer_id: str = Field(min_length=1, max_length=100)
    amount_cents: int = Field(ge=0, le=100_000_000)


class OrderRefunded(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    order_id: str = Field(min_length=1, max_length=100)
    customer_id: str = Field(min_length=1, max_length=100)


def _move_balance(connection: Connection, customer_id: str, points: int) -> None:
    connection.execute(
        """INSERT INTO points_balance (customer_id, points) VALUES (%s, %s)
           ON CONFLICT (customer_id) DO UPDATE SET points = points_balance.points + excluded.points""",
        (customer_id, points),
    )


def award(event: Envelope, order: OrderConfirmed, connection: Connection) -> None:
    """One point per whole euro, once per order. An order refunded before its confirmation
    arrived (out of order) stays refunded and earns nothing."""
    points = order.amount_cents // 100
    fresh = connection.execute(
        """INSERT INTO points_award (order_id, customer_id, points, status) VALUES (%s, %s, %s, 'awarded')
           ON CONFLICT (order_id) DO NOTHING RETURNING order_id""",
        (order.order_id, order.customer_id, points),
    ).fetchone()
    if fresh is not None:
        _move_balance(connection, order.customer_id, points)


def refund(event: Envelope, order: OrderRefunded, connection: Connection) -> None:
    """Take the order's points back once; a refund that comes first leaves a refunded award of
    nothing, so a late confirmation cannot award it."""
    taken = connection.execute(
        """UPDATE points_award SET status = 'refunded', updated_at = now()
            WHERE order_id = %s AND status = 'awarded' RETURNING points""",
        (order.order_id,),
    ).fetchone()
    if taken is not None:
        _move_balance(connection, order.customer_id, -int(taken[0]))
        return
    connection.execute(
        """INSERT INTO points_award (order_id, customer_id, points, status) VALUES (%s, %s, 0, 'refunded')
           ON CONFLICT (order_id) DO NOTHING""",
        (order.order_id, order.customer_id),
    )


HANDLERS = {ORDER_CONFIRMED: typed(OrderConfirmed, award), ORDER_REFUNDED: typed(OrderRefunded, refund)}
