"""Notification's consumer handlers: each runs inside its consumer's transaction, with its marker."""

from __future__ import annotations

from effectively_once.consumer.processor import Connection, NonRetryable
from effectively_once.envelope import Envelope
from services import saga_contract as contract

ORDER_CONFIRMED = "order_confirmed"


def record_confirmation_email(event: Envelope, transaction: Connection) -> None:
    """PaymentAuthorized: one confirmation email per order, pending until the dispatcher sends it."""
    order_id = event.key
    try:
        payload = contract.read_payload(contract.PaymentAuthorizedPayload, event.payload)
    except ValueError as error:
        raise NonRetryable(str(error)) from None
    amount = payload.amount_cents
    transaction.execute(
        """INSERT INTO notification (order_id, kind, idempotency_key, recipient, subject, body, status)
           VALUES (%s, %s, %s, %s, %s, %s, 'pending') ON CONFLICT DO NOTHING""",
        (
            order_id,
            ORDER_CONFIRMED,
            f"mail-{order_id}-{ORDER_CONFIRMED}",
            payload.customer_email,
            f"Your order {order_id[:8]} is confirmed",
            f"We have received your payment of {amount / 100:.2f} and your order is on its way.",
        ),
    )


def project_sale(event: Envelope, transaction: Connection) -> None:
    """PaymentAuthorized, for the sales projection: one row per paid order."""
    transaction.execute(
        "INSERT INTO sales_projection (order_id, amount_cents, authorized_at) VALUES (%s, %s, %s) "
        "ON CONFLICT DO NOTHING",
        (event.key, int(event.payload["amount_cents"]), event.occurred_at),
    )


DISPATCH_HANDLERS = {contract.PAYMENT_AUTHORIZED: record_confirmation_email}
PROJECTION_HANDLERS = {contract.PAYMENT_AUTHORIZED: project_sale}
