"""The saga services' handlers and executors against real PostgreSQL (and the real sandboxes):
business keys stop semantic duplicates; a crash between a remote call and its record never
charges or mails twice and never strands the work."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from effectively_once.envelope import Envelope
from effectively_once.faults import FaultAction, FaultPoints, InjectedFault
from effectively_once.outcomes import Outcome
from services import saga_contract as contract
from services.inventory.handlers import HANDLERS as INVENTORY
from services.notification import dispatcher
from services.notification.handlers import DISPATCH_HANDLERS
from services.payment import executor
from services.payment.handlers import HANDLERS as PAYMENT
from services.settings import Settings
from services.topology import database
from tests.integration.conftest import ProcessorFactory, Sandbox, service_schema
from tests.support.saga_events import order_placed


def _one(url: str, query: str, *parameters: object) -> tuple[object, ...]:
    with psycopg.connect(url) as connection:
        row = connection.execute(query, parameters).fetchone()
    assert row is not None
    return tuple(row)


def _outbox_types(url: str, order_id: str) -> list[str]:
    with psycopg.connect(url) as connection:
        return [
            r[0]
            for r in connection.execute(
                "SELECT event_type FROM outbox WHERE aggregate_key = %s ORDER BY position", (order_id,)
            )
        ]


def _authorized(order_id: str, email: str = "ada@example.com") -> Envelope:
    return Envelope.new(
        contract.PAYMENT_AUTHORIZED,
        order_id,
        {"order_id": order_id, "attempt": 1, "charge_id": "ch_1", "amount_cents": 4800, "customer_email": email},
    )


def test_a_semantic_duplicate_order_placed_reserves_once(make_processor: ProcessorFactory, runtime_db: str) -> None:
    url = service_schema(runtime_db, "inventory")
    processor = make_processor("inventory-reservation-v1", INVENTORY, database_url=url)
    order = f"order-{uuid.uuid4()}"
    lines = [{"sku": "sku-espresso", "quantity": 2}, {"sku": "sku-kettle", "quantity": 1}]
    assert processor.process(order_placed(order, lines)) is Outcome.APPLIED
    assert processor.process(order_placed(order, lines)) is Outcome.APPLIED  # a new message id, the same fact
    assert _one(url, "SELECT available, reserved FROM stock WHERE sku = 'sku-espresso'") == (99_998, 2)
    assert _one(url, "SELECT count(*) FROM reservation WHERE order_id = %s", order) == (2,)


def test_a_shortfall_reserves_nothing_and_says_why(make_processor: ProcessorFactory, runtime_db: str) -> None:
    url = service_schema(runtime_db, "inventory")
    processor = make_processor("inventory-reservation-v1", INVENTORY, database_url=url)
    order = f"order-{uuid.uuid4()}"
    lines = [{"sku": "sku-espresso", "quantity": 1}, {"sku": "sku-limited", "quantity": 6}]
    assert processor.process(order_placed(order, lines)) is Outcome.APPLIED  # a business outcome, committed
    assert _one(url, "SELECT available, reserved FROM stock WHERE sku = 'sku-espresso'") == (100_000, 0)
    assert _one(url, "SELECT count(*) FROM reservation WHERE order_id = %s", order) == (0,)
    assert _outbox_types(url, order) == [contract.INVENTORY_RESERVATION_FAILED]


def test_a_release_happens_once_however_often_payment_failed_comes(
    make_processor: ProcessorFactory,
    runtime_db: str,
) -> None:
    url = service_schema(runtime_db, "inventory")
    processor = make_processor("inventory-reservation-v1", INVENTORY, database_url=url)
    order = f"order-{uuid.uuid4()}"
    processor.process(order_placed(order, [{"sku": "sku-grinder", "quantity": 3}]))
    for _ in range(2):  # two PaymentFailed events with different ids: one release
        processor.process(Envelope.new(contract.PAYMENT_FAILED, order, {"order_id": order, "reason": "declined"}))
    assert _one(url, "SELECT available, reserved, sold FROM stock WHERE sku = 'sku-grinder'") == (100_000, 0, 0)
    assert _outbox_types(url, order) == [contract.INVENTORY_RESERVED, contract.INVENTORY_RELEASED]


def _pending_payment(url: str, order: str, method: str = "pm_card_visa") -> None:
    with psycopg.connect(url) as connection, connection.transaction():
        PAYMENT[contract.INVENTORY_RESERVED](
            Envelope.new(
                contract.INVENTORY_RESERVED,
                order,
                {
                    "order_id": order,
                    "amount_cents": 4800,
                    "payment_method": method,
                    "customer_email": "ada@example.com",
                    "lines": [{"sku": "sku-espresso", "quantity": 2}],
                },
            ),
            connection,
        )


def test_a_crash_between_the_provider_call_and_its_record_charges_once_and_strands_nothing(
    runtime_db: str,
    provider: Sandbox,
) -> None:
    url, order = service_schema(runtime_db, "payment"), f"order-{uuid.uuid4()}"
    _pending_payment(url, order)
    faults = FaultPoints()
    faults.arm(executor.AFTER_CALL, FaultAction.RAISE)
    with psycopg.connect(url, autocommit=True) as connection:
        with pytest.raises(InjectedFault):
            executor.take_one(connection, faults, provider.client)
        assert _one(url, "SELECT status FROM payment_attempt WHERE order_id = %s", order) == ("pending",)
        assert executor.take_one(connection, faults, provider.client)  # the same call again, the same key
    assert _one(url, "SELECT status FROM payment_attempt WHERE order_id = %s", order) == ("authorized",)
    assert len(provider.client.get("/v1/charges", params={"order_id": order}).json()) == 1
    assert _outbox_types(url, order) == [contract.PAYMENT_AUTHORIZED]


def test_a_provider_timeout_after_charging_is_retried_with_the_same_key_into_one_charge(
    runtime_db: str,
    provider: Sandbox,
) -> None:
    url, order = service_schema(runtime_db, "payment"), f"order-{uuid.uuid4()}"
    _pending_payment(url, order)
    provider.client.put(
        "/admin/faults", json={"timeout_after_charge": 1, "timeout_seconds": executor.CALL_TIMEOUT_SECONDS + 1}
    )
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            assert executor.take_one(connection, FaultPoints(), provider.client)
    finally:
        provider.client.delete("/admin/faults")
    assert _one(url, "SELECT status FROM payment_attempt WHERE order_id = %s", order) == ("authorized",)
    assert len(provider.client.get("/v1/charges", params={"order_id": order}).json()) == 1


def test_a_declined_card_fails_the_payment_and_charges_nothing(runtime_db: str, provider: Sandbox) -> None:
    url, order = service_schema(runtime_db, "payment"), f"order-{uuid.uuid4()}"
    _pending_payment(url, order, method="pm_card_declined")
    with psycopg.connect(url, autocommit=True) as connection:
        assert executor.take_one(connection, FaultPoints(), provider.client)
    assert _one(url, "SELECT status FROM payment_attempt WHERE order_id = %s", order) == ("declined",)
    assert provider.client.get("/v1/charges", params={"order_id": order}).json() == []
    assert _outbox_types(url, order) == [contract.PAYMENT_FAILED]


def test_a_crash_between_sending_the_mail_and_its_record_sends_one_message(
    runtime_db: str,
    mail: Sandbox,
) -> None:
    url, order = service_schema(runtime_db, "notification"), f"order-{uuid.uuid4()}"
    with psycopg.connect(url) as connection, connection.transaction():
        DISPATCH_HANDLERS[contract.PAYMENT_AUTHORIZED](
            _authorized(order),
            connection,
        )
    faults = FaultPoints()
    faults.arm(dispatcher.AFTER_SEND, FaultAction.RAISE)
    with psycopg.connect(url, autocommit=True) as connection:
        with pytest.raises(InjectedFault):
            dispatcher.take_one(connection, faults, mail.client)
        assert dispatcher.take_one(connection, faults, mail.client)
    [message] = mail.client.get("/v1/messages", params={"order_id": order}).json()
    assert message["deliveries"] == 2  # sent twice with one key: stored once
    assert _one(url, "SELECT status FROM notification WHERE order_id = %s", order) == ("sent",)
    assert _outbox_types(url, order) == [contract.NOTIFICATION_SENT]


def test_the_inventory_seed_is_the_catalog(settings: Settings) -> None:
    with psycopg.connect(settings.auditor_database_url(database("inventory"))) as connection:
        stock = {row[0]: row[1] for row in connection.execute("SELECT sku, initial FROM stock")}
    assert stock == {sku: product.initial_stock for sku, product in contract.CATALOG.items()}


def test_a_mail_failure_leaves_the_notification_pending_with_its_error_until_a_later_send(
    runtime_db: str,
    mail: Sandbox,
) -> None:
    url, order = service_schema(runtime_db, "notification"), f"order-{uuid.uuid4()}"
    with psycopg.connect(url) as connection, connection.transaction():
        DISPATCH_HANDLERS[contract.PAYMENT_AUTHORIZED](
            _authorized(order),
            connection,
        )
    mail.client.put("/admin/faults", json={"failure_rate": 1.0})
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            assert dispatcher.take_one(connection, FaultPoints(), mail.client)
    finally:
        mail.client.delete("/admin/faults")
    status, error = _one(url, "SELECT status, last_error FROM notification WHERE order_id = %s", order)
    assert status == "pending" and str(error).startswith("HTTP 503")
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("UPDATE notification SET next_attempt_at = now() WHERE order_id = %s", (order,))
        assert dispatcher.take_one(connection, FaultPoints(), mail.client)
    assert _one(url, "SELECT status FROM notification WHERE order_id = %s", order) == ("sent",)
    assert len(mail.client.get("/v1/messages", params={"order_id": order}).json()) == 1
    assert _outbox_types(url, order) == [contract.NOTIFICATION_SENT]
