"""Saga events as the services send them, for tests that drive a handler directly."""

from __future__ import annotations

from effectively_once.envelope import Envelope
from services import saga_contract as contract


def order_placed(order_id: str, lines: list[dict[str, object]], method: str = "pm_card_visa") -> Envelope:
    """An OrderPlaced for `lines` (each {"sku", "quantity"}), under a new message id."""
    return Envelope.new(
        contract.ORDER_PLACED,
        order_id,
        {
            "order_id": order_id,
            "customer_email": "ada@example.com",
            "payment_method": method,
            "amount_cents": 4800,
            "lines": lines,
        },
    )
