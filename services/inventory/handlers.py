"""Inventory's handlers: each runs inside the consumer's transaction, with its marker."""

from __future__ import annotations

from typing import Any

from effectively_once.consumer.processor import Connection, NonRetryable
from effectively_once.envelope import Envelope
from effectively_once.outbox import add_to_outbox
from services import saga_contract as contract


class OutOfStock(Exception):
    """A business outcome, not a failure: the order is refused and the refusal is an event."""


def _emit(
    transaction: Connection, event_type: str, order_id: str, payload: dict[str, Any], trace_id: str | None
) -> None:
    add_to_outbox(
        transaction,
        Envelope.new(event_type, order_id, payload, trace_id=trace_id),
        contract.TOPIC_OF[event_type],
    )


DECIDE = """INSERT INTO reservation_decision (order_id, decided_by) VALUES (%s, %s)
              ON CONFLICT (order_id) DO UPDATE SET decided_by = excluded.decided_by
               WHERE reservation_decision.decided_by = excluded.decided_by
              RETURNING order_id"""
"""The order's decision, claimed: a row back when this message may decide it (the first to come;
or this very message again, which only a consumer whose marker did not guard it sees, and which
then decides again as a consumer without a marker would: the teaching strategies show it); no row
for the same order under another message id, a semantic duplicate."""
DECIDED = "UPDATE reservation_decision SET outcome = %s, reason = %s WHERE order_id = %s"


def reserve_stock(event: Envelope, transaction: Connection) -> None:
    """OrderPlaced: reserve every line, or none of them and say why; once per order, whatever ids
    its OrderPlaced comes under (the decision row is claimed first). A payload that does not fit
    the contract is refused (dead letter, with the field named)."""
    order_id = event.key
    try:
        contract.read_payload(contract.OrderPlacedPayload, event.payload)
    except ValueError as error:
        raise NonRetryable(str(error)) from None
    if transaction.execute(DECIDE, (order_id, event.message_id)).fetchone() is None:
        return  # decided already, under another message id: a semantic duplicate changes nothing
    lines = event.payload["lines"]
    try:
        with transaction.transaction():  # a savepoint: a shortfall undoes only the reservations
            for line in sorted(lines, key=lambda line: str(line["sku"])):  # stock rows locked in one order
                sku, quantity = line["sku"], int(line["quantity"])
                fresh = transaction.execute(
                    """INSERT INTO reservation (order_id, sku, quantity, status)
                       SELECT %s, %s, %s, 'reserved' WHERE EXISTS (SELECT 1 FROM stock WHERE sku = %s)
                       ON CONFLICT (order_id, sku) DO NOTHING RETURNING sku""",
                    (order_id, sku, quantity, sku),
                ).fetchone()
                if fresh is None:
                    known = transaction.execute("SELECT 1 FROM stock WHERE sku = %s", (sku,)).fetchone()
                    if known is None:
                        raise OutOfStock(f"unknown SKU {sku}")
                    continue  # the same SKU twice in one order: reserved with its first line
                taken = transaction.execute(
                    """UPDATE stock SET available = available - %s, reserved = reserved + %s
                        WHERE sku = %s AND available >= %s RETURNING sku""",
                    (quantity, quantity, sku, quantity),
                ).fetchone()
                if taken is None:
                    raise OutOfStock(f"not enough {sku} for {quantity}")
    except OutOfStock as shortfall:
        transaction.execute(DECIDED, ("refused", str(shortfall), order_id))
        _emit(
            transaction,
            contract.INVENTORY_RESERVATION_FAILED,
            order_id,
            {"order_id": order_id, "reason": str(shortfall)},
            event.trace_id,
        )
        return
    transaction.execute(DECIDED, ("reserved", None, order_id))
    _emit(
        transaction,
        contract.INVENTORY_RESERVED,
        order_id,
        {
            "order_id": order_id,
            "lines": lines,
            "amount_cents": event.payload["amount_cents"],
            "customer_email": event.payload["customer_email"],
            "payment_method": event.payload["payment_method"],
        },
        event.trace_id,
    )


def _settle(transaction: Connection, order_id: str, new_status: str) -> list[tuple[str, int]]:
    """Move the order's live reservations to `new_status`; return the SKUs and quantities moved,
    in SKU order: every handler locks stock rows in that one order, so two transactions working
    on orders of the same SKUs at once wait for each other instead of deadlocking."""
    return sorted(
        (row[0], int(row[1]))
        for row in transaction.execute(
            """UPDATE reservation SET status = %s, updated_at = now()
                WHERE order_id = %s AND status = 'reserved' RETURNING sku, quantity""",
            (new_status, order_id),
        )
    )


def release_stock(event: Envelope, transaction: Connection) -> None:
    """PaymentFailed: give the reserved units back, once, and say so."""
    released = _settle(transaction, event.key, "released")
    for sku, quantity in released:
        transaction.execute(
            "UPDATE stock SET available = available + %s, reserved = reserved - %s WHERE sku = %s",
            (quantity, quantity, sku),
        )
    if released:
        _emit(
            transaction,
            contract.INVENTORY_RELEASED,
            event.key,
            {"order_id": event.key, "lines": [{"sku": s, "quantity": q} for s, q in released]},
            event.trace_id,
        )


def sell_stock(event: Envelope, transaction: Connection) -> None:
    """PaymentAuthorized: the reserved units are sold."""
    for sku, quantity in _settle(transaction, event.key, "sold"):
        transaction.execute(
            "UPDATE stock SET reserved = reserved - %s, sold = sold + %s WHERE sku = %s",
            (quantity, quantity, sku),
        )


HANDLERS = {
    contract.ORDER_PLACED: reserve_stock,
    contract.PAYMENT_FAILED: release_stock,
    contract.PAYMENT_AUTHORIZED: sell_stock,
}
