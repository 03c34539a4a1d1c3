"""Payment's consumer handler: a reserved order gets its (first) payment attempt, pending."""

from __future__ import annotations

from effectively_once.consumer.processor import Connection, NonRetryable
from effectively_once.envelope import Envelope
from services import saga_contract as contract


def idempotency_key(order_id: str, attempt: int) -> str:
    """Derived from the business fact (the attempt), never random per call."""
    return f"pay-{order_id}-attempt-{attempt}"


def record_payment_attempt(event: Envelope, transaction: Connection) -> None:
    """InventoryReserved: attempt 1 of this order's payment, to be charged by the executor. A
    payload that does not fit the contract is refused (dead letter, with the field named)."""
    try:
        payload = contract.read_payload(contract.InventoryReservedPayload, event.payload)
    except ValueError as error:
        raise NonRetryable(str(error)) from None
    transaction.execute(
        """INSERT INTO payment_attempt (order_id, attempt, idempotency_key, amount_cents, payment_method,
                                        customer_email, status)
           VALUES (%s, 1, %s, %s, %s, %s, 'pending') ON CONFLICT DO NOTHING""",
        (
            event.key,
            idempotency_key(event.key, 1),
            payload.amount_cents,
            payload.payment_method,
            payload.customer_email,
        ),
    )


HANDLERS = {contract.INVENTORY_RESERVED: record_payment_attempt}
