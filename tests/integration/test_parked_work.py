"""Pending work always ends: a refusal parks it at once, transient failures retry with backoff
under the same key and park at the policy's maximum age; parking writes the failure event in the
same transaction; a parked email is re-driven under its own key and sent once; a parked payment
is not re-driven (its saga compensated). Real PostgreSQL, real sandboxes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from effectively_once.faults import FaultPoints
from effectively_once.pending_work import RedriveRefused
from effectively_once.remote_call import RetryPolicy
from services import saga_contract as contract
from services.notification import dispatcher
from services.notification.handlers import DISPATCH_HANDLERS
from services.payment import executor
from tests.integration.conftest import Sandbox, service_schema
from tests.integration.test_saga_services import _authorized, _one, _outbox_types, _pending_payment

YOUNG = RetryPolicy(max_age_seconds=3600)
OLD = RetryPolicy(max_age_seconds=0.001)


def _payload(url: str, order: str, event_type: str) -> dict[str, object]:
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT payload FROM outbox WHERE aggregate_key = %s AND event_type = %s", (order, event_type)
        ).fetchone()
    assert row is not None, f"no {event_type} for {order}"
    return dict(row[0])


@pytest.fixture
def pending_email(runtime_db: str) -> tuple[str, str]:
    url, order = service_schema(runtime_db, "notification"), f"order-{uuid.uuid4()}"
    with psycopg.connect(url) as connection, connection.transaction():
        DISPATCH_HANDLERS[contract.PAYMENT_AUTHORIZED](_authorized(order), connection)
    return url, order


@pytest.fixture
def refusing_mail(mail: Sandbox) -> Iterator[Sandbox]:
    mail.client.put("/admin/faults", json={"refusal_rate": 1.0})
    yield mail
    mail.client.delete("/admin/faults")


def test_a_refused_email_is_parked_at_once_with_its_reason_and_a_failure_event(
    pending_email: tuple[str, str], refusing_mail: Sandbox
) -> None:
    url, order = pending_email
    with psycopg.connect(url, autocommit=True) as connection:
        assert dispatcher.take_one(connection, FaultPoints(), refusing_mail.client, policy=YOUNG)
        assert not dispatcher.take_one(connection, FaultPoints(), refusing_mail.client, policy=YOUNG)  # none due
    status, reason = _one(url, "SELECT status, failure_reason FROM notification WHERE order_id = %s", order)
    assert status == "failed" and "refused by the mail service: HTTP 422" in str(reason)
    assert _outbox_types(url, order) == [contract.NOTIFICATION_FAILED]
    failed = contract.read_payload(
        contract.NotificationFailedPayload, _payload(url, order, contract.NOTIFICATION_FAILED)
    )
    assert failed.reason == reason and failed.order_id == order


def test_a_parked_email_re_driven_after_the_cause_is_fixed_is_sent_once_under_its_own_key(
    pending_email: tuple[str, str], refusing_mail: Sandbox
) -> None:
    url, order = pending_email
    with psycopg.connect(url, autocommit=True) as connection:
        dispatcher.take_one(connection, FaultPoints(), refusing_mail.client, policy=YOUNG)
        refusing_mail.client.delete("/admin/faults")  # the cause, fixed
        [parked] = [row for row in dispatcher.ParkedNotifications().list(connection) if row["order_id"] == order]
        assert parked["redrivable"] and parked["idempotency_key"] == f"mail-{order}-order_confirmed"
        dispatcher.ParkedNotifications().redrive(connection, order)
        with pytest.raises(RedriveRefused):
            dispatcher.ParkedNotifications().redrive(connection, order)  # nothing parked any more
        assert dispatcher.take_one(connection, FaultPoints(), refusing_mail.client, policy=YOUNG)
    assert _one(url, "SELECT status FROM notification WHERE order_id = %s", order) == ("sent",)
    [message] = refusing_mail.client.get("/v1/messages", params={"order_id": order}).json()
    assert message["deliveries"] == 1 and message["idempotency_key"] == parked["idempotency_key"]
    assert _outbox_types(url, order) == [contract.NOTIFICATION_FAILED, contract.NOTIFICATION_SENT]


def test_a_transient_mail_failure_is_retried_with_backoff_then_parked_at_the_maximum_age(
    pending_email: tuple[str, str], mail: Sandbox
) -> None:
    url, order = pending_email
    mail.client.put("/admin/faults", json={"failure_rate": 1.0})
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            assert dispatcher.take_one(connection, FaultPoints(), mail.client, policy=YOUNG)
            status, wait = _one(
                url, "SELECT status, next_attempt_at > now() FROM notification WHERE order_id = %s", order
            )
            assert (status, wait) == ("pending", True)  # retried later, not now
            connection.execute("UPDATE notification SET next_attempt_at = now() WHERE order_id = %s", (order,))
            assert dispatcher.take_one(connection, FaultPoints(), mail.client, policy=OLD)
    finally:
        mail.client.delete("/admin/faults")
    status, reason = _one(url, "SELECT status, failure_reason FROM notification WHERE order_id = %s", order)
    assert status == "failed" and "the mail service failed for" in str(reason) and "HTTP 503" in str(reason)
    assert _outbox_types(url, order) == [contract.NOTIFICATION_FAILED]
    assert mail.client.get("/v1/messages", params={"order_id": order}).json() == []


def test_a_payment_refused_for_good_is_parked_with_payment_failed_and_is_never_re_driven(
    runtime_db: str, provider: Sandbox
) -> None:
    url, order = service_schema(runtime_db, "payment"), f"order-{uuid.uuid4()}"
    _pending_payment(url, order)
    provider.client.put("/admin/faults", json={"refusal_rate": 1.0})
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            assert executor.take_one(connection, FaultPoints(), provider.client, policy=YOUNG)
            with pytest.raises(RedriveRefused, match="cancelled"):
                executor.ParkedPayments().redrive(connection, order)
            [parked] = [row for row in executor.ParkedPayments().list(connection) if row["order_id"] == order]
    finally:
        provider.client.delete("/admin/faults")
    assert not parked["redrivable"] and "refused by the payment provider: HTTP 400" in parked["reason"]
    assert _one(url, "SELECT status, provider_calls FROM payment_attempt WHERE order_id = %s", order) == ("failed", 1)
    failed = contract.read_payload(contract.PaymentFailedPayload, _payload(url, order, contract.PAYMENT_FAILED))
    assert failed.reason == parked["reason"]
    assert provider.client.get("/v1/charges", params={"order_id": order}).json() == []


def test_a_provider_that_keeps_failing_is_retried_under_one_key_then_parked_at_the_maximum_age(
    runtime_db: str, provider: Sandbox
) -> None:
    url, order = service_schema(runtime_db, "payment"), f"order-{uuid.uuid4()}"
    _pending_payment(url, order)
    provider.client.put("/admin/faults", json={"error_rate": 1.0})
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            assert executor.take_one(connection, FaultPoints(), provider.client, policy=YOUNG)
            assert _one(url, "SELECT status FROM payment_attempt WHERE order_id = %s", order) == ("pending",)
            assert _outbox_types(url, order) == []
            connection.execute("UPDATE payment_attempt SET next_attempt_at = now() WHERE order_id = %s", (order,))
            assert executor.take_one(connection, FaultPoints(), provider.client, policy=OLD)
    finally:
        provider.client.delete("/admin/faults")
    status, reason = _one(url, "SELECT status, failure_reason FROM payment_attempt WHERE order_id = %s", order)
    assert status == "failed" and "the payment provider failed for" in str(reason)
    assert _outbox_types(url, order) == [contract.PAYMENT_FAILED]
