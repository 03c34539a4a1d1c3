"""Inventory's handlers: each runs inside the consumer's transaction, with its marker."""

from __future__ import annotations

from typing import Any

from effectively_once.consumer.processor import Connection, NonRetryable
from effectively_once.envelope import Envelope
from effectively_once.outbox import add_to_outbox
from services import saga_contract as contract
from services.inventory import reservation_plan


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
STOCK_OF_ORDER = """SELECT stock.sku, stock.available,
                           EXISTS (SELECT 1 FROM reservation
                                    WHERE reservation.order_id = %(order_id)s AND reservation.sku = stock.sku)
                      FROM stock WHERE stock.sku = ANY(%(skus)s)
                     ORDER BY stock.sku COLLATE "C"
                       FOR UPDATE OF stock"""
"""The order's stock rows, locked in SKU order (code point order, as Python sorts: every handler
takes them in that one order, so transactions on orders of the same SKUs wait for each other
instead of deadlocking), with what each holds and whether the order holds a reservation of it."""
RESERVE = """WITH line AS (SELECT * FROM unnest(%(skus)s::text[], %(quantities)s::integer[]) AS line (sku, quantity)),
                  taken AS (UPDATE stock SET available = stock.available - line.quantity,
                                             reserved = stock.reserved + line.quantity
                              FROM line WHERE stock.sku = line.sku)
             INSERT INTO reservation (order_id, sku, quantity, status)
             SELECT %(order_id)s, sku, quantity, 'reserved' FROM line"""
"""The plan, written at once: each line's units taken from its stock row (locked by STOCK_OF_ORDER)
and its reservation recorded."""


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
    wanting = reservation_plan.wanted(lines)
    stock = {
        sku: reservation_plan.Held(int(available), bool(held))
        for sku, available, held in transaction.execute(STOCK_OF_ORDER, {"order_id": order_id, "skus": list(wanting)})
    }
    try:
        taking = reservation_plan.plan(wanting, stock)
    except reservation_plan.OutOfStock as shortfall:
        transaction.execute(DECIDED, ("refused", str(shortfall), order_id))
        _emit(
            transaction,
            contract.INVENTORY_RESERVATION_FAILED,
            order_id,
            {"order_id": order_id, "reason": str(shortfall)},
            event.trace_id,
        )
        return
    if taking:
        transaction.execute(RESERVE, {"order_id": order_id, "skus": list(taking), "quantities": list(taking.values())})
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
