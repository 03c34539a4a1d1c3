"""The contract's list of what each consumer applies agrees with the handlers each service runs."""

from __future__ import annotations

import pytest

from services import saga_contract as contract
from services.inventory.handlers import HANDLERS as INVENTORY
from services.notification.handlers import DISPATCH_HANDLERS, PROJECTION_HANDLERS
from services.orders.__main__ import SAGA_EVENTS
from services.payment.handlers import HANDLERS as PAYMENT
from services.topology import CONSUMERS, Consumer

RUN = {
    "orders-saga-v1": set(SAGA_EVENTS),
    "inventory-reservation-v1": set(INVENTORY),
    "payment-authorization-v1": set(PAYMENT),
    "notification-dispatch-v1": set(DISPATCH_HANDLERS),
    "sales-projection-v1": set(PROJECTION_HANDLERS),
}


@pytest.mark.parametrize("consumer", [consumer.name for consumer in CONSUMERS])
def test_each_consumer_applies_what_the_contract_says(consumer: str) -> None:
    assert contract.HANDLED_BY[consumer] == RUN[consumer]


@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda consumer: consumer.name)
def test_each_type_a_consumer_applies_travels_on_a_topic_it_reads(consumer: Consumer) -> None:
    assert {contract.TOPIC_OF[event_type] for event_type in contract.HANDLED_BY[consumer.name]} <= set(consumer.topics)
