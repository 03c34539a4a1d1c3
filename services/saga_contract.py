"""The saga's shared contract: event types, the topic each is published on, the catalog and the
payment methods. Producers and consumers import these names; there is no I/O here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from services.topology import INVENTORY_EVENTS, NOTIFICATION_EVENTS, ORDERS_EVENTS, PAYMENT_EVENTS

ORDER_PLACED = "OrderPlaced"
INVENTORY_RESERVED = "InventoryReserved"
INVENTORY_RESERVATION_FAILED = "InventoryReservationFailed"
INVENTORY_RELEASED = "InventoryReleased"
PAYMENT_AUTHORIZED = "PaymentAuthorized"
PAYMENT_FAILED = "PaymentFailed"
NOTIFICATION_SENT = "NotificationSent"

TOPIC_OF = {
    ORDER_PLACED: ORDERS_EVENTS,
    INVENTORY_RESERVED: INVENTORY_EVENTS,
    INVENTORY_RESERVATION_FAILED: INVENTORY_EVENTS,
    INVENTORY_RELEASED: INVENTORY_EVENTS,
    PAYMENT_AUTHORIZED: PAYMENT_EVENTS,
    PAYMENT_FAILED: PAYMENT_EVENTS,
    NOTIFICATION_SENT: NOTIFICATION_EVENTS,
}
"""Each event type is published by one service, on that service's topic."""


def not_handled(handled: Iterable[str]) -> frozenset[str]:
    """The saga's event types a consumer with these handlers ignores (any other type is unknown)."""
    return frozenset(TOPIC_OF) - set(handled)


@dataclass(frozen=True)
class Product:
    sku: str
    name: str
    price_cents: int
    initial_stock: int


CATALOG: dict[str, Product] = {
    product.sku: product
    for product in (
        Product("sku-espresso", "Espresso beans, 1 kg", 2_400, 100_000),
        Product("sku-grinder", "Burr grinder", 18_900, 100_000),
        Product("sku-kettle", "Gooseneck kettle", 6_500, 100_000),
        Product("sku-filter", "Paper filters, 100", 700, 100_000),
        # Scarce on purpose: most orders for it are rejected, which exercises the compensation.
        Product("sku-limited", "Limited edition cup", 4_500, 5),
    )
}
"""The products on sale. services/inventory/migrations seeds the same stock (a test checks)."""

PAYMENT_METHOD_OK = "pm_card_visa"
PAYMENT_METHOD_DECLINED = "pm_card_declined"
PAYMENT_METHODS = (PAYMENT_METHOD_OK, PAYMENT_METHOD_DECLINED)
"""Test payment methods the provider sandbox understands, after the fashion of Stripe's."""
