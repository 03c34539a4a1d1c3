"""The saga's handler against real PostgreSQL: whatever events come, in whatever order, under
whatever ids, the order ends where the state machine takes it (services/orders/domain.py), each
event type counts once per order (a second id for it is a semantic duplicate and changes
nothing), and the history holds one row per message id that was not such a duplicate."""

from __future__ import annotations

import dataclasses
import threading
import uuid

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effectively_once.consumer.processor import NonRetryable
from effectively_once.envelope import Envelope
from services import saga_contract as contract
from services.orders.domain import OrderStatus, next_status
from services.orders.saga import follow_saga_event
from tests.integration.conftest import service_schema
from tests.support.waiting import wait_for

TYPES = [
    contract.ORDER_PLACED,
    contract.INVENTORY_RESERVED,
    contract.INVENTORY_RESERVATION_FAILED,
    contract.PAYMENT_AUTHORIZED,
    contract.PAYMENT_FAILED,
    contract.NOTIFICATION_SENT,
]
EVENTS = st.lists(st.tuples(st.sampled_from(TYPES), st.integers(0, 3)), min_size=1, max_size=8)
"""Each event: its type and which of four message ids of that type it comes under (a repeat is a
redelivery the marker did not stop: the handler itself must not count it twice). A message id is
one event's, never another type's."""


def _new_order(connection: psycopg.Connection[tuple[object, ...]]) -> str:
    order_id = f"order-{uuid.uuid4()}"
    connection.execute(
        "INSERT INTO customer_order (order_id, request_hash, customer_email, payment_method, amount_cents, status)"
        " VALUES (%s, 'h', 'ada@example.com', 'pm_card_visa', 4800, 'PLACED')",
        (order_id,),
    )
    return order_id


def _state(connection: psycopg.Connection[tuple[object, ...]], order_id: str) -> tuple[str, set[tuple[str, str, str]]]:
    status = connection.execute("SELECT status FROM customer_order WHERE order_id = %s", (order_id,)).fetchone()
    history = connection.execute(
        "SELECT message_id, event_type, status_after FROM order_history WHERE order_id = %s", (order_id,)
    ).fetchall()
    assert status is not None
    return str(status[0]), {(str(m), str(t), str(s)) for m, t, s in history}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=EVENTS)
def test_an_order_ends_where_the_state_machine_takes_it(runtime_db: str, events: list[tuple[str, int]]) -> None:
    url = service_schema(runtime_db, "orders")
    with psycopg.connect(url) as connection:
        with connection.transaction():
            order_id = _new_order(connection)
        ids = {(event_type, which): str(uuid.uuid4()) for event_type in TYPES for which in range(4)}
        status, history = OrderStatus.PLACED, set[tuple[str, str, str]]()
        decided: dict[str, str] = {}
        for event_type, which in events:
            message_id = ids[(event_type, which)]
            if decided.setdefault(event_type, message_id) == message_id:
                status = next_status(status, event_type)
                if message_id not in {m for m, _, _ in history}:
                    history.add((message_id, event_type, status.value))
            envelope = dataclasses.replace(
                Envelope.new(event_type, order_id, {"order_id": order_id}), message_id=message_id
            )
            with connection.transaction():
                follow_saga_event(envelope, connection)
        assert _state(connection, order_id) == (status.value, history)


def test_an_event_for_no_order_is_refused(runtime_db: str) -> None:
    url = service_schema(runtime_db, "orders")
    with psycopg.connect(url) as connection, pytest.raises(NonRetryable, match="no order"):
        follow_saga_event(Envelope.new(contract.INVENTORY_RESERVED, "order-nowhere", {}), connection)


def test_two_ids_of_one_fact_at_once_move_the_order_once(runtime_db: str) -> None:
    """The order's row lock serialises the two: the second sees the first's history and stops."""
    url = service_schema(runtime_db, "orders")
    with psycopg.connect(url) as connection, connection.transaction():
        order_id = _new_order(connection)
    first, second = (Envelope.new(contract.INVENTORY_RESERVED, order_id, {"order_id": order_id}) for _ in range(2))
    with psycopg.connect(url) as holder, psycopg.connect(url) as waiter:
        with holder.transaction():
            follow_saga_event(first, holder)
            waiting = threading.Thread(target=lambda: _in_transaction(waiter, second))
            waiting.start()
            with psycopg.connect(url, autocommit=True) as watcher:
                lock_wait = "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'"

                def waits() -> bool:
                    return watcher.execute(lock_wait, (waiter.info.backend_pid,)).fetchone() is not None

                wait_for(waits, 30, "the second transaction to wait for the order's row lock")
        waiting.join(30)
        assert _state(holder, order_id) == (
            OrderStatus.RESERVED.value,
            {(first.message_id, contract.INVENTORY_RESERVED, OrderStatus.RESERVED.value)},
        )


def _in_transaction(connection: psycopg.Connection[tuple[object, ...]], event: Envelope) -> None:
    with connection.transaction():
        follow_saga_event(event, connection)
