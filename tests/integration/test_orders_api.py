"""The order API on the real orders database: validation a person can act on, Idempotency-Key,
reads, and OpenAPI."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services import saga_contract as contract
from services.orders.api import create_app
from tests.integration.conftest import service_schema

ORDER = {
    "customer_email": "ada@example.com",
    "lines": [{"sku": "sku-espresso", "quantity": 2}],
    "payment_method": "pm_card_visa",
}


@pytest.fixture(scope="module")
def orders_url(runtime_db: str) -> str:
    """The orders schema, in a schema of its own (the demo's orders stay untouched)."""
    return service_schema(runtime_db, "orders")


@pytest.fixture(scope="module")
def client(orders_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(orders_url), base_url="http://127.0.0.1:8000") as test_client:
        yield test_client


def test_an_order_is_written_with_its_order_placed_event_in_the_outbox(client: TestClient, orders_url: str) -> None:
    response = client.post("/orders", json=ORDER)
    assert response.status_code == 201
    order = response.json()
    assert order["status"] == "PLACED" and order["amount_cents"] == 4_800
    with psycopg.connect(orders_url) as connection:
        row = connection.execute(
            "SELECT event_type, topic, payload->>'amount_cents' FROM outbox WHERE aggregate_key = %s",
            (order["order_id"],),
        ).fetchone()
    assert row == ("OrderPlaced", "orders.events", "4800")
    assert client.get(f"/orders/{order['order_id']}").json()["lines"] == [
        {"sku": "sku-espresso", "quantity": 2, "unit_price_cents": 2_400}
    ]


def test_the_same_idempotency_key_and_body_return_the_same_order(client: TestClient) -> None:
    key = f"key-{uuid.uuid4()}"
    first = client.post("/orders", json=ORDER, headers={"Idempotency-Key": key})
    again = client.post("/orders", json=ORDER, headers={"Idempotency-Key": key})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["order_id"] == again.json()["order_id"]


def test_the_same_idempotency_key_with_another_body_is_refused(client: TestClient) -> None:
    key = f"key-{uuid.uuid4()}"
    client.post("/orders", json=ORDER, headers={"Idempotency-Key": key})
    other = client.post(
        "/orders", json={**ORDER, "payment_method": "pm_card_declined"}, headers={"Idempotency-Key": key}
    )
    assert other.status_code == 422
    assert "different request body" in other.json()["detail"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"lines": [{"sku": "sku-nope", "quantity": 1}]}, "unknown SKU 'sku-nope'; the catalog has"),
        ({"lines": [{"sku": "sku-espresso", "quantity": 0}]}, "greater than or equal to 1"),
        ({"lines": []}, "at least 1 item"),
        ({"lines": [{"sku": "sku-kettle", "quantity": 1}] * 2}, "each SKU may appear on one line only"),
        ({"customer_email": "not-an-email"}, "needs a local part, an @ and a domain"),
        ({"customer_email": "a" * 65 + "@example.com"}, "at most 64 characters (RFC 5321)"),
        ({"payment_method": "cash"}, "pm_card_visa"),
    ],
)
def test_a_bad_order_gets_a_422_that_says_what_to_fix(client: TestClient, change: dict[str, object], says: str) -> None:
    response = client.post("/orders", json={**ORDER, **change})
    assert response.status_code == 422
    assert says in response.text


def test_an_unknown_order_is_404_and_the_api_describes_itself(client: TestClient) -> None:
    assert client.get(f"/orders/{uuid.uuid4()}").status_code == 404
    schema = client.get("/openapi.json").json()
    assert {"/orders", "/orders/{order_id}"} <= set(schema["paths"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.sampled_from(sorted(contract.CATALOG)), min_size=1, unique=True).flatmap(
        lambda skus: st.permutations([{"sku": sku, "quantity": n + 1} for n, sku in enumerate(skus)])
    )
)
def test_a_new_order_is_answered_as_a_read_of_it_answers(client: TestClient, lines: list[dict[str, object]]) -> None:
    """The answer to POST is built from what was written, not read back: it must be what a GET reads."""
    placed = client.post("/orders", json={**ORDER, "lines": lines})
    assert placed.status_code == 201, placed.text
    assert placed.json() == client.get(f"/orders/{placed.json()['order_id']}").json()
