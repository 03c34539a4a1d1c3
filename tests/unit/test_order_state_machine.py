from __future__ import annotations

from itertools import permutations

import pytest

from services import saga_contract as events
from services.orders.domain import FINAL, OrderStatus, next_status

HAPPY_PATH = (events.INVENTORY_RESERVED, events.PAYMENT_AUTHORIZED, events.NOTIFICATION_SENT)


def _replay(order: tuple[str, ...]) -> OrderStatus:
    status = OrderStatus.PLACED
    for event_type in order:
        status = next_status(status, event_type)
    return status


def test_the_happy_path_in_order() -> None:
    assert [_replay(HAPPY_PATH[: n + 1]) for n in range(3)] == [
        OrderStatus.RESERVED,
        OrderStatus.PAID,
        OrderStatus.CONFIRMED,
    ]


@pytest.mark.parametrize("order", list(permutations(HAPPY_PATH)))
def test_any_arrival_order_ends_confirmed(order: tuple[str, ...]) -> None:
    assert _replay(order) is OrderStatus.CONFIRMED


@pytest.mark.parametrize(
    "order", list(permutations((events.INVENTORY_RESERVED, events.PAYMENT_FAILED, events.INVENTORY_RELEASED)))
)
def test_a_declined_payment_ends_cancelled_in_any_order(order: tuple[str, ...]) -> None:
    assert _replay(order) is OrderStatus.CANCELLED


def test_a_status_never_moves_backwards_or_out_of_a_final_status() -> None:
    assert next_status(OrderStatus.PAID, events.INVENTORY_RESERVED) is OrderStatus.PAID
    for final in FINAL:
        for event_type in events.TOPIC_OF:
            assert next_status(final, event_type) is final


def test_events_without_a_target_only_enter_the_history() -> None:
    assert next_status(OrderStatus.RESERVED, events.ORDER_PLACED) is OrderStatus.RESERVED
    assert next_status(OrderStatus.RESERVED, "SomethingElse") is OrderStatus.RESERVED
