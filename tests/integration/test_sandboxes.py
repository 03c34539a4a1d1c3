"""The payment-provider sandbox's Idempotency-Key semantics and the mail sandbox's dedup, over HTTP."""

from __future__ import annotations

import threading
import uuid

import httpx
import psycopg
import pytest

from tests.integration.conftest import Sandbox
from tests.support.waiting import wait_for


def _charge(order_id: str, method: str = "pm_card_visa", amount: int = 1000) -> dict[str, object]:
    return {"order_id": order_id, "amount_cents": amount, "payment_method": method}


def _charges(client: httpx.Client, order_id: str) -> list[dict[str, object]]:
    charges: list[dict[str, object]] = client.get("/v1/charges", params={"order_id": order_id}).json()
    return charges


def test_the_same_key_and_body_replays_the_stored_response_and_charges_once(provider: Sandbox) -> None:
    order, key = f"order-{uuid.uuid4()}", f"key-{uuid.uuid4()}"
    first = provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key})
    again = provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(_charges(provider.client, order)) == 1


def test_a_decline_is_replayed_as_it_was_and_charges_nothing(provider: Sandbox) -> None:
    order, key = f"order-{uuid.uuid4()}", f"key-{uuid.uuid4()}"
    body = _charge(order, method="pm_card_declined")
    first = provider.client.post("/v1/charges", json=body, headers={"Idempotency-Key": key})
    again = provider.client.post("/v1/charges", json=body, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 402
    assert again.json()["error"]["code"] == "card_declined"
    assert _charges(provider.client, order) == []


def test_the_same_key_with_another_body_is_an_idempotency_error(provider: Sandbox) -> None:
    order, key = f"order-{uuid.uuid4()}", f"key-{uuid.uuid4()}"
    provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key})
    other = provider.client.post("/v1/charges", json=_charge(order, amount=999), headers={"Idempotency-Key": key})
    assert other.status_code == 422
    assert other.json()["error"]["type"] == "idempotency_error"


def test_the_same_key_while_the_first_request_runs_is_409(provider: Sandbox) -> None:
    order, key = f"order-{uuid.uuid4()}", f"key-{uuid.uuid4()}"
    provider.client.put("/admin/faults", json={"latency_ms": 3000})
    results: list[int] = []
    first = threading.Thread(
        target=lambda: results.append(
            provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key}).status_code
        )
    )
    first.start()
    try:
        with psycopg.connect(provider.database_url) as connection:
            wait_for(
                lambda: (
                    connection.execute("SELECT state FROM idempotency_key WHERE key = %s", (key,)).fetchone()
                    == ("in_flight",)
                ),
                10,
                "the first request to be in flight",
            )
        concurrent = provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key})
        assert concurrent.status_code == 409
    finally:
        provider.client.delete("/admin/faults")
        first.join(30)
    assert results == [200]
    assert len(_charges(provider.client, order)) == 1


def test_a_500_stores_nothing_and_the_retry_is_processed_afresh(provider: Sandbox) -> None:
    order, key = f"order-{uuid.uuid4()}", f"key-{uuid.uuid4()}"
    provider.client.put("/admin/faults", json={"error_rate": 1.0})
    try:
        assert (
            provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key}).status_code
            == 500
        )
    finally:
        provider.client.delete("/admin/faults")
    assert provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key}).status_code == 200
    assert len(_charges(provider.client, order)) == 1


def test_a_timeout_after_charging_then_a_retry_with_the_same_key_is_one_charge(provider: Sandbox) -> None:
    order, key = f"order-{uuid.uuid4()}", f"key-{uuid.uuid4()}"
    provider.client.put("/admin/faults", json={"timeout_after_charge": 1, "timeout_seconds": 3})
    try:
        with pytest.raises(httpx.ReadTimeout):
            provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key}, timeout=1)
    finally:
        provider.client.delete("/admin/faults")
    retried = provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key})
    assert retried.status_code == 200
    [charge] = _charges(provider.client, order)
    assert charge["charge_id"] == retried.json()["id"]


def test_a_request_without_an_idempotency_key_is_refused(provider: Sandbox) -> None:
    refused = provider.client.post("/v1/charges", json=_charge("order-x"))
    assert refused.status_code == 400 and "Idempotency-Key" in refused.text


def test_a_key_whose_request_failed_midway_is_let_go_not_left_in_progress(provider: Sandbox) -> None:
    """The sandbox's own ledger fails after the key was taken (no input reaches such a failure any
    more, so the ledger table is made to refuse this one order): the key is let go, and the retry
    is processed afresh instead of meeting 409 for a minute."""
    order, key = f"order-{uuid.uuid4()}", f"key-{uuid.uuid4()}"
    with psycopg.connect(provider.database_url, autocommit=True) as connection:
        connection.execute(f"ALTER TABLE charge ADD CONSTRAINT refuse_one CHECK (order_id <> '{order}') NOT VALID")
    try:
        failed = provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key})
        assert failed.status_code == 500  # a failure of the sandbox itself, not of the request
    finally:
        with psycopg.connect(provider.database_url, autocommit=True) as connection:
            connection.execute("ALTER TABLE charge DROP CONSTRAINT refuse_one")
    with psycopg.connect(provider.database_url) as connection:
        assert connection.execute("SELECT count(*) FROM idempotency_key WHERE key = %s", (key,)).fetchone() == (0,)
    assert provider.client.post("/v1/charges", json=_charge(order), headers={"Idempotency-Key": key}).status_code == 200


def test_the_mail_sandbox_stores_a_message_once_per_key_and_shows_it_in_the_inbox(mail: Sandbox) -> None:
    order, key = f"order-{uuid.uuid4()}", f"mail-{uuid.uuid4()}"
    body = {"recipient": "ada@example.com", "subject": f"Confirmed {order[:14]}", "body": "Thanks", "order_id": order}
    first = mail.client.post("/v1/messages", json=body, headers={"Idempotency-Key": key})
    again = mail.client.post("/v1/messages", json=body, headers={"Idempotency-Key": key})
    assert (first.status_code, first.json()["duplicate"]) == (202, False)
    assert (again.status_code, again.json()["duplicate"]) == (202, True)
    [message] = mail.client.get("/v1/messages", params={"order_id": order}).json()
    assert message["deliveries"] == 2
    inbox = mail.client.get("/")
    assert inbox.status_code == 200 and f"Confirmed {order[:14]}" in inbox.text


@pytest.mark.parametrize("sandbox", ["provider", "mail"])
def test_a_sandboxs_faults_are_read_and_changed_only_with_its_admin_password(
    sandbox: str, request: pytest.FixtureRequest
) -> None:
    """Without `Authorization: Bearer <SANDBOX_ADMIN_PASSWORD>`, or with another, /admin/faults
    answers 401 and the faults stay as they were."""
    client: httpx.Client = request.getfixturevalue(sandbox).client
    setting = {"latency_ms": 7} if sandbox == "provider" else {"failure_rate": 0.0}
    assert client.put("/admin/faults", json=setting).status_code == 200
    before = client.get("/admin/faults").json()
    for credentials in ({}, {"Authorization": "Bearer guess"}, {"Authorization": "Basic c2FuZGJveDpndWVzcw=="}):
        anonymous = httpx.Client(base_url=str(client.base_url), timeout=10, headers=credentials)
        for method in ("GET", "PUT", "DELETE"):
            answer = anonymous.request(method, "/admin/faults", json={} if method == "PUT" else None)
            assert answer.status_code == 401 and "SANDBOX_ADMIN_PASSWORD" in answer.json()["detail"], (
                method,
                credentials,
            )
        anonymous.close()
    assert client.get("/admin/faults").json() == before
    client.delete("/admin/faults")
