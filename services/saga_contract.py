"""The saga's shared contract: event types, the topic each is published on, the payloads that the
services downstream read (built from services/saga_fields.py, so every service accepts what the
API accepted), the catalog and the payment methods. Producers and consumers import these names;
there is no I/O here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.saga_fields import MAX_LINES, AmountCents, EmailAddress, OrderId, PaymentMethodId, Quantity, Reason, Sku
from services.topology import INVENTORY_EVENTS, NOTIFICATION_EVENTS, ORDERS_EVENTS, PAYMENT_EVENTS

ORDER_PLACED = "OrderPlaced"
INVENTORY_RESERVED = "InventoryReserved"
INVENTORY_RESERVATION_FAILED = "InventoryReservationFailed"
INVENTORY_RELEASED = "InventoryReleased"
PAYMENT_AUTHORIZED = "PaymentAuthorized"
PAYMENT_FAILED = "PaymentFailed"
NOTIFICATION_SENT = "NotificationSent"
NOTIFICATION_FAILED = "NotificationFailed"
"""The email was refused for good (or could not be sent before the retries' maximum age): the
notification is parked for an operator, the order stays confirmed."""

TOPIC_OF = {
    ORDER_PLACED: ORDERS_EVENTS,
    INVENTORY_RESERVED: INVENTORY_EVENTS,
    INVENTORY_RESERVATION_FAILED: INVENTORY_EVENTS,
    INVENTORY_RELEASED: INVENTORY_EVENTS,
    PAYMENT_AUTHORIZED: PAYMENT_EVENTS,
    PAYMENT_FAILED: PAYMENT_EVENTS,
    NOTIFICATION_SENT: NOTIFICATION_EVENTS,
    NOTIFICATION_FAILED: NOTIFICATION_EVENTS,
}
"""Each event type is published by one service, on that service's topic."""


HANDLED_BY = {
    "orders-saga-v1": frozenset(TOPIC_OF),
    "inventory-reservation-v1": frozenset({ORDER_PLACED, PAYMENT_FAILED, PAYMENT_AUTHORIZED}),
    "payment-authorization-v1": frozenset({INVENTORY_RESERVED}),
    "notification-dispatch-v1": frozenset({PAYMENT_AUTHORIZED}),
    "sales-projection-v1": frozenset({PAYMENT_AUTHORIZED}),
}
"""Consumer -> the event types it applies, each under a marker (it ignores the rest of its topics):
what the auditor holds acknowledged messages against. The services' handlers say the same
(tests/unit/test_saga_contract.py holds them together)."""


def not_handled(handled: Iterable[str]) -> frozenset[str]:
    """The saga's event types a consumer with these handlers ignores (any other type is unknown)."""
    return frozenset(TOPIC_OF) - set(handled)


class Payload(BaseModel):
    """An event's payload as its consumers read it: strict, and extra fields are kept, not refused
    (a producer may add a field before its consumers know it)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class Line(Payload):
    sku: Sku
    quantity: Quantity


class OrderPlacedPayload(Payload):
    order_id: OrderId
    customer_email: EmailAddress
    payment_method: PaymentMethodId
    amount_cents: AmountCents
    lines: list[Line] = Field(min_length=1, max_length=MAX_LINES)


class InventoryReservedPayload(OrderPlacedPayload):
    """Carries on what payment needs to charge and notification needs to write."""


class PaymentAuthorizedPayload(Payload):
    order_id: OrderId
    attempt: int = Field(ge=1, strict=True)
    charge_id: str = Field(min_length=1, max_length=255)
    amount_cents: AmountCents
    customer_email: EmailAddress


class PaymentFailedPayload(Payload):
    order_id: OrderId
    attempt: int = Field(ge=1, strict=True)
    reason: Reason


class NotificationFailedPayload(Payload):
    order_id: OrderId
    kind: str = Field(min_length=1, max_length=100)
    reason: Reason


P = TypeVar("P", bound="Payload")


def read_payload(model: type[P], payload: Mapping[str, Any]) -> P:
    """The payload as `model`, or ValueError naming the first field that does not fit (the
    handler turns it into a dead letter with that reason)."""
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "payload"
        raise ValueError(f"{model.__name__[: -len('Payload')]} payload: {field}: {first['msg']}") from None


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
PROVIDER_KEY_LIFETIME = timedelta(hours=24)
"""How long the payment provider keeps an idempotency key (a charge's key, for ever). A charge can be
retried for that long, so the payment consumer counts it as a redelivery window: its markers are
kept at least as long, and a redelivery inside it is absorbed by the marker, not by the provider alone."""
