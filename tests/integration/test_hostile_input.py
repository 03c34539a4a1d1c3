"""Property: no input to any HTTP service answers 5xx, and a refused request stores nothing.

Every route of the orders API and both sandboxes is driven with requests drawn from its own
OpenAPI schema, hostile values mixed in at every level (tests/support/hostile_requests.py),
in-process against each service's real tables. After each request: the status is below 500; a
refusal left every table as it was and no idempotency key in progress; a refusal's body is short
(long values are cut, never echoed whole).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.mail.app import create_app as mail_app
from services.orders.api import create_app as orders_app
from services.payment_provider.app import create_app as provider_app
from services.settings import PROJECT_ROOT
from tests.integration.conftest import isolated_schema, service_schema
from tests.support.hostile_requests import Drawn, Operation, examples, operations, requests_for

MAX_REFUSAL_BYTES = 10_000


@dataclass
class Service:
    name: str
    app: FastAPI
    database_url: str
    tables: tuple[str, ...]
    reset: Callable[[TestClient], object] = lambda _client: None

    def stored(self) -> tuple[int, ...]:
        with psycopg.connect(self.database_url) as connection:
            return tuple(connection.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in self.tables)  # type: ignore[index]

    def keys_in_progress(self) -> int:
        if "idempotency_key" not in self.tables:
            return 0
        with psycopg.connect(self.database_url) as connection:
            row = connection.execute("SELECT count(*) FROM idempotency_key WHERE state = 'in_flight'").fetchone()
        return int(row[0]) if row else 0


def _own_migrations(service: str) -> list[Path]:
    return sorted((PROJECT_ROOT / "services" / service / "migrations").glob("*.sql"))


def _services(runtime_db: str) -> dict[str, Service]:
    orders = service_schema(runtime_db, "orders")
    provider = isolated_schema(runtime_db, *_own_migrations("payment_provider"))
    mail = isolated_schema(runtime_db, *_own_migrations("mail"))
    return {
        "orders": Service("orders", orders_app(orders), orders, ("customer_order", "order_line", "outbox")),
        "payment_provider": Service(
            "payment_provider",
            provider_app(provider),
            provider,
            ("charge", "idempotency_key"),
            lambda client: client.delete("/admin/faults"),
        ),
        "mail": Service("mail", mail_app(mail), mail, ("mail_message",), lambda client: client.delete("/admin/faults")),
    }


SERVICES = ("orders", "payment_provider", "mail")
ROUTES = {
    name: [op for op in operations(app.openapi())]
    for name, app in (
        ("orders", orders_app("postgresql://nowhere/x")),
        ("payment_provider", provider_app("postgresql://nowhere/x")),
        ("mail", mail_app("postgresql://nowhere/x")),
    )
}
"""Every operation each service's OpenAPI describes (the apps connect only when started)."""


@pytest.fixture(scope="module")
def services(runtime_db: str) -> dict[str, Service]:
    return _services(runtime_db)


@pytest.fixture(scope="module")
def clients(services: dict[str, Service]) -> Iterator[dict[str, TestClient]]:
    opened = {name: TestClient(s.app, base_url="http://127.0.0.1:8000") for name, s in services.items()}
    for client in opened.values():
        client.__enter__()
    yield opened
    for client in opened.values():
        client.__exit__(None, None, None)


def _send(client: TestClient, drawn: Drawn) -> tuple[int, bytes]:
    response = client.request(drawn.method, drawn.url, headers=drawn.headers, content=drawn.content)
    return response.status_code, response.content


@pytest.mark.parametrize(
    ("service", "operation"),
    [(name, op) for name in SERVICES for op in ROUTES[name]],
    ids=[f"{name}:{op.name}" for name in SERVICES for op in ROUTES[name]],
)
def test_no_input_to_any_route_answers_5xx_and_a_refusal_stores_nothing(
    services: dict[str, Service], clients: dict[str, TestClient], service: str, operation: Operation
) -> None:
    under_test, client = services[service], clients[service]
    components = under_test.app.openapi().get("components", {}).get("schemas", {})

    @settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(drawn=requests_for(operation, components))
    def check(drawn: Drawn) -> None:
        before = under_test.stored()
        try:
            status, body = _send(client, drawn)
        finally:
            under_test.reset(client)
        assert status < 500, f"{drawn.method} {drawn.url[:200]} answered {status}: {body[:300]!r}"
        assert under_test.keys_in_progress() == 0, "a request left an idempotency key in progress"
        if status >= 400:
            assert under_test.stored() == before, f"refused with {status}, yet something was stored"
            assert len(body) <= MAX_REFUSAL_BYTES, f"a {status} of {len(body)} bytes echoes the input"

    check()


def test_every_service_is_covered_with_its_writing_routes() -> None:
    """The parametrisation above reaches each service's routes that store something."""
    named = {name: {op.name for op in ops} for name, ops in ROUTES.items()}
    assert "POST /orders" in named["orders"] and "GET /orders/{order_id}" in named["orders"]
    assert {"POST /v1/charges", "PUT /admin/faults"} <= named["payment_provider"]
    assert {"POST /v1/messages", "PUT /admin/faults"} <= named["mail"]


@pytest.mark.parametrize("key", ["", " ", "   ", "\t"])
def test_an_empty_or_blank_idempotency_key_is_refused_with_400(
    services: dict[str, Service], clients: dict[str, TestClient], key: str
) -> None:
    order = {
        "customer_email": "ada@example.com",
        "lines": [{"sku": "sku-filter", "quantity": 1}],
        "payment_method": "pm_card_visa",
    }
    charge = {"order_id": "order-1", "amount_cents": 100, "payment_method": "pm_card_visa"}
    message = {"recipient": "ada@example.com", "subject": "hi", "body": "b"}
    for service, path, body in (
        ("orders", "/orders", order),
        ("payment_provider", "/v1/charges", charge),
        ("mail", "/v1/messages", message),
    ):
        before = services[service].stored()
        answer = clients[service].post(path, json=body, headers={"Idempotency-Key": key})
        assert answer.status_code == 400 and "Idempotency-Key" in answer.text, (service, answer.text)
        assert services[service].stored() == before


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"lines": [{"sku": "sku-filter", "quantity": "2"}]}, "body.lines.0.quantity"),
        ({"lines": [{"sku": "sku-filter", "quantity": True}]}, "body.lines.0.quantity"),
        ({"lines": [{"sku": "sku-filter", "quantity": 2.0}]}, "body.lines.0.quantity"),
        ({"customer_email": 5}, "body.customer_email"),
    ],
)
def test_strings_booleans_and_floats_are_not_coerced_into_integers_or_text(
    clients: dict[str, TestClient], change: dict[str, object], field: str
) -> None:
    order = {
        "customer_email": "ada@example.com",
        "lines": [{"sku": "sku-filter", "quantity": 1}],
        "payment_method": "pm_card_visa",
    }
    answer = clients["orders"].post("/orders", json={**order, **change})
    assert answer.status_code == 422
    assert field in [item["field"] for item in answer.json()["detail"]]


def test_a_validation_error_cuts_a_long_value_and_names_the_field(clients: dict[str, TestClient]) -> None:
    huge = "x" * 900_000 + "@example.com"
    order = {"customer_email": huge, "lines": [{"sku": "sku-filter", "quantity": 1}], "payment_method": "pm_card_visa"}
    answer = clients["orders"].post("/orders", json=order)
    assert answer.status_code == 422 and len(answer.content) < 2_000
    assert answer.json()["detail"][0]["field"] == "body.customer_email"


@pytest.mark.parametrize(
    "raw",
    [b'{"amount_cents": NaN}', b'{"amount_cents": Infinity}', b'{"order_id": "a\\u0000b"}', b'{"order_id": "\\ud800"}'],
)
def test_non_finite_numbers_nul_and_lone_surrogates_are_refused_at_the_door(
    clients: dict[str, TestClient], services: dict[str, Service], raw: bytes
) -> None:
    before = services["payment_provider"].stored()
    answer = clients["payment_provider"].post(
        "/v1/charges", content=raw, headers={"Idempotency-Key": "k-door", "content-type": "application/json"}
    )
    assert answer.status_code == 400, answer.text
    assert services["payment_provider"].stored() == before and services["payment_provider"].keys_in_progress() == 0


@given(st.sampled_from(["/orders/%00", "/orders/%ED%A0%80", "/orders/%FF%FE", "/orders?limit=%00", "/orders/a%0Ab"]))
@settings(max_examples=10, deadline=None, database=None)
def test_bad_bytes_in_a_path_or_query_are_400(url: str) -> None:
    client = TestClient(orders_app("postgresql://nowhere/x"), base_url="http://127.0.0.1:8000")  # never started
    assert client.get(url).status_code == 400
