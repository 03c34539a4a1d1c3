"""Property: no input to the chaos panel answers a 500, and when what backs an action is away the
answer is a 503 naming it.

The panel runs in-process on the real databases (as the read-only auditor) and the real Kafka,
with every process it drives away: control endpoints, the orders API and the sandboxes on a closed
port, and its injector on a broker that is not there. So a well-formed action meets a missing
service (503, named), and a malformed one its own refusal (4xx). Every route of its OpenAPI is
driven; the actions, which read their fields by hand, get bodies drawn over the fields they read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from chaos_panel.acting.injector import POISON_KINDS, Injector
from chaos_panel.context import build_panel
from chaos_panel.settings import PanelSettings
from chaos_panel.web.app import create_app
from infra.launcher.processes import control_urls
from services.settings import Settings, with_credentials
from services.topology import AUDITOR_ROLE, EVENT_TOPICS
from tests.support.hostile_requests import Drawn, Operation, examples, operations, requests_for

CLOSED = "http://127.0.0.1:9"
NAMED_SERVICES = ("does not answer", "Kafka did not confirm", "no dead letter could be read", "database")

ACTION_FIELDS: dict[str, Any] = {
    "type": "object",
    "properties": {
        name: {"anyOf": [{"enum": values}, {"type": "string"}, {"type": "number"}]}
        for name, values in {
            "process": ["inventory", "payment-executor", "notification-dispatcher", "nobody"],
            "point": ["after_claim", "before_commit", "nowhere"],
            "action": ["crash", "stall", "raise"],
            "times": ["1", "always", 3],
            "probability": [0.5, 1, "1"],
            "stall_seconds": [1, "5"],
            "kind": [*POISON_KINDS, "ok", "declined", "scarce"],
            "rate": [1, "10"],
            "count": [1, 5],
            "strategy": ["correct", "check_then_act"],
            "to": ["beginning", "2026-12-02T12:00:00Z"],
            "message_id": ["00000000-0000-0000-0000-000000000000"],
            "copies": [1, 2],
            "spread": ["on", "true"],
            "sandbox": ["payment-provider", "mail"],
            "topic": list(EVENT_TOPICS),
            "location": ["dlq.inventory-reservation-v1/0@0", "x/1@2"],
            "seconds": [0, 10, "configured"],
            "purge": ["on"],
            "order_id": ["order-1"],
            "refusal_rate": [1, 0],
            "failure_rate": [0.5],
        }.items()
    },
}


def _panel_settings(settings: Settings) -> PanelSettings:
    auditor = with_credentials(settings.admin_database_url, AUDITOR_ROLE, settings.AUDITOR_DB_PASSWORD, "postgres")
    return PanelSettings(
        DATABASE_URL=auditor,
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        CONTROL_URLS={name: CLOSED for name in control_urls(settings)},
        ORDERS_API_URL=CLOSED,
        PAYMENT_PROVIDER_URL=CLOSED,
        MAIL_URL=CLOSED,
    )


@pytest.fixture(scope="module")
def panel_client(settings: Settings) -> Iterator[TestClient]:
    panel_settings = _panel_settings(settings)
    panel = build_panel(panel_settings)
    panel.injector = Injector("127.0.0.1:9", confirm_seconds=0.3)  # a broker that is away
    panel.readers = []  # no telemetry reader: nothing runs behind the requests
    client = TestClient(create_app(panel_settings, panel), base_url="http://127.0.0.1:8080")
    yield client
    panel.stop()


OPERATIONS = operations(create_app(PanelSettings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9")).openapi())


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.name for op in OPERATIONS])
def test_no_input_to_the_panel_answers_500_and_a_503_names_the_service(
    panel_client: TestClient, operation: Operation
) -> None:
    @settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(drawn=requests_for(operation, {}, extra_fields=ACTION_FIELDS))
    def check(drawn: Drawn) -> None:
        response = panel_client.request(drawn.method, drawn.url, headers=drawn.headers, content=drawn.content)
        sent = f"{drawn.method} {drawn.url[:120]} {drawn.content!r:.200}"
        assert response.status_code < 500 or response.status_code == 503, f"{sent}: {response.status_code}"
        if response.status_code == 503:
            said = json.dumps(response.json())
            assert any(name in said for name in NAMED_SERVICES), f"{sent}: a 503 that names nothing: {said}"

    check()


def test_every_action_is_among_the_routes_driven() -> None:
    posts = {op.path for op in OPERATIONS if op.method == "POST"}
    assert {"/api/faults", "/api/orders", "/api/poison", "/api/parked/redrive", "/api/reset", "/login"} <= posts


@pytest.mark.parametrize(
    ("path", "body", "names"),
    [
        ("/api/faults", {"process": "inventory", "point": "after_claim", "action": "crash"}, "inventory"),
        ("/api/orders", {"kind": "ok"}, "orders-api"),
        ("/api/sandbox-faults", {"sandbox": "mail", "refusal_rate": 1}, "mail"),
        ("/api/parked/redrive", {"process": "notification-dispatcher", "order_id": "o-1"}, "notification-dispatcher"),
        ("/api/poison", {"kind": next(iter(POISON_KINDS))}, "Kafka"),
    ],
)
def test_an_action_whose_service_is_down_is_a_503_that_names_it(
    panel_client: TestClient, path: str, body: dict[str, Any], names: str
) -> None:
    answer = panel_client.post(path, json=body)
    assert answer.status_code == 503 and names in answer.json()["message"], answer.text
    shown = panel_client.post(path, json=body, headers={"HX-Request": "true"})
    assert shown.status_code == 200 and names in shown.text and "notice bad" in shown.text
