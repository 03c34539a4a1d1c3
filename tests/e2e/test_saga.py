"""The saga end to end: 300 orders with mixed outcomes, on the default system the metrics tests
placed theirs on first; every check holds for every order the system has."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from typing import Any

import httpx
import psycopg
import pytest

from auditor.invariants import Verdict, audit, database_reader, report
from services.orders.load import place_orders
from services.saga_contract import CATALOG
from services.settings import Settings, with_database
from services.topology import database
from tests.support.launcher_run import LauncherRun
from tests.support.waiting import wait_for

FINAL = {"CONFIRMED", "REJECTED", "CANCELLED"}
ORDERS = 300


@pytest.fixture(scope="module")
def system(default_system: tuple[LauncherRun, Settings]) -> tuple[LauncherRun, Settings]:
    return default_system


@pytest.fixture(scope="module")
def saga(system: tuple[LauncherRun, Settings]) -> dict[str, dict[str, Any]]:
    """Place the orders, wait until every order of the system is final (the metrics tests' too),
    return them all by id with their lines."""
    _, settings = system
    api = f"http://127.0.0.1:{settings.ORDERS_API_PORT}"
    placed = place_orders(api, rate=100, count=ORDERS, seed=11, quiet=True)
    assert not placed.failures and len(placed.order_ids) == ORDERS
    with httpx.Client(base_url=api, timeout=10) as client:

        def every_order() -> list[dict[str, Any]]:
            orders: list[dict[str, Any]] = client.get("/orders", params={"limit": 500}).json()
            assert len(orders) < 500, "more orders than one page lists"
            return orders

        wait_for(
            lambda: all(order["status"] in FINAL for order in every_order()),
            240,
            f"all {ORDERS} orders (and any placed before them) to reach a final status",
            interval=0.5,
        )
        ids = [order["order_id"] for order in every_order()]
        assert set(placed.order_ids) <= set(ids)
        return {order_id: client.get(f"/orders/{order_id}").json() for order_id in ids}


def _rows(settings: Settings, database_name: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.auditor_database_url(database(database_name))) as connection:
        return connection.execute(query).fetchall()


def test_300_orders_with_mixed_outcomes_all_reach_a_final_status(saga: dict[str, dict[str, Any]]) -> None:
    statuses = Counter(order["status"] for order in saga.values())
    assert set(statuses) == FINAL, statuses  # in stock, out of stock and declined: all three happened
    for order in saga.values():
        history = [entry["status_after"] for entry in order["history"]]
        assert history[-1] == order["status"] or order["status"] in history


def test_stock_is_conserved_and_sold_matches_the_confirmed_orders(
    system: tuple[LauncherRun, Settings],
    saga: dict[str, dict[str, Any]],
) -> None:
    _, settings = system
    stock = {
        row[0]: row[1:]
        for row in _rows(settings, "inventory", "SELECT sku, initial, available, reserved, sold FROM stock")
    }
    assert set(stock) == set(CATALOG)
    confirmed_quantities: Counter[str] = Counter()
    for order in saga.values():
        if order["status"] == "CONFIRMED":
            for line in order["lines"]:
                confirmed_quantities[line["sku"]] += line["quantity"]
    for sku, (initial, available, reserved, sold) in stock.items():
        assert initial == CATALOG[sku].initial_stock
        assert available + reserved + sold == initial, sku
        assert reserved == 0, f"{sku}: {reserved} units still reserved after every order is final"
        assert sold == confirmed_quantities[sku], sku


def test_exactly_one_charge_per_paid_order_and_none_for_any_other(
    system: tuple[LauncherRun, Settings],
    saga: dict[str, dict[str, Any]],
) -> None:
    _, settings = system
    charges = httpx.get(f"http://127.0.0.1:{settings.PAYMENT_PROVIDER_PORT}/v1/charges", timeout=10).json()
    per_order = Counter(charge["order_id"] for charge in charges)
    paid = {order_id for order_id, order in saga.items() if order["status"] == "CONFIRMED"}
    assert set(per_order) == paid
    assert set(per_order.values()) == {1}
    for charge in charges:
        assert charge["amount_cents"] == saga[charge["order_id"]]["amount_cents"]


def test_exactly_one_email_per_confirmed_order_and_none_for_any_other(
    system: tuple[LauncherRun, Settings],
    saga: dict[str, dict[str, Any]],
) -> None:
    _, settings = system
    messages = httpx.get(f"http://127.0.0.1:{settings.MAIL_PORT}/v1/messages", timeout=10).json()
    per_order = Counter(message["order_id"] for message in messages)
    confirmed = {order_id for order_id, order in saga.items() if order["status"] == "CONFIRMED"}
    assert set(per_order) == confirmed
    assert set(per_order.values()) == {1}
    sales = _rows(settings, "notification", "SELECT order_id FROM sales_projection")
    assert {row[0] for row in sales} == confirmed, "the second consumer of PaymentAuthorized applied each once"


def _audit(settings: Settings) -> Verdict:
    return audit(database_reader(lambda name: settings.auditor_database_url(database(name))))


def test_the_auditor_finds_nothing_wrong_after_the_saga(
    system: tuple[LauncherRun, Settings],
    saga: dict[str, dict[str, Any]],
) -> None:
    _, settings = system
    verdict = _audit(settings)
    assert verdict.green, "\n".join(report(verdict))
    assert verdict.checks["every order ends, as its ledgers say"] == len(saga) >= ORDERS


def test_the_auditor_names_a_doubled_charge_and_a_marker_without_its_effect(
    system: tuple[LauncherRun, Settings],
    saga: dict[str, dict[str, Any]],
) -> None:
    """Last in this module: it damages the data on purpose, as a broken consumer would."""
    run, settings = system
    confirmed = sorted(order_id for order_id, order in saga.items() if order["status"] == "CONFIRMED")
    doubled, lost, announced, unrecorded = confirmed[0], confirmed[1], confirmed[2], confirmed[3]
    provider = with_database(settings.admin_database_url, "payment_provider")
    with psycopg.connect(provider) as connection:
        connection.execute("INSERT INTO idempotency_key (key, request_hash, state) VALUES ('forged-key', 'x', 'done')")
        connection.execute(
            "INSERT INTO charge (charge_id, idempotency_key, order_id, amount_cents)"
            " VALUES ('ch_forged', 'forged-key', %s, 1)",
            (doubled,),
        )
    notification = with_database(settings.admin_database_url, "notification")
    with psycopg.connect(notification) as connection:
        connection.execute("DELETE FROM sales_projection WHERE order_id = %s", (lost,))
    again = str(uuid.uuid4())
    inventory = with_database(settings.admin_database_url, "inventory")
    with psycopg.connect(inventory) as connection:  # announced again, under a new id, already published
        connection.execute(
            """INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, topic, payload, published_at)
               SELECT %s, aggregate_type, aggregate_key, event_type, topic, payload, now() FROM outbox
                WHERE aggregate_key = %s AND event_type = 'InventoryReserved'""",
            (again, announced),
        )
    orders = with_database(settings.admin_database_url, "orders")
    with psycopg.connect(orders) as connection:
        connection.execute(
            "DELETE FROM order_history WHERE order_id = %s AND event_type = 'PaymentAuthorized'", (unrecorded,)
        )

    verdict = _audit(settings)
    found = {(anomaly.invariant, anomaly.subject) for anomaly in verdict.anomalies}
    assert ("at most one charge per order", doubled) in found
    assert ("a confirmed order was charged and mailed once", doubled) in found
    assert ("sales-projection-v1: every marker has its effect and every effect its marker", lost) in found
    evidence = {(anomaly.invariant, anomaly.subject): anomaly.evidence for anomaly in verdict.anomalies}
    twice = evidence[("inventory announces each fact once", announced)]
    assert twice.startswith("2 InventoryReserved events: ") and again in twice, twice
    unmarked = evidence[("orders-saga-v1: every marker has its effect", unrecorded)]
    assert "PaymentAuthorized" in unmarked and "history has no PaymentAuthorized" in unmarked, unmarked
    result = subprocess.run(
        [sys.executable, "-m", "auditor"],
        env=run.environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert f"at most one charge per order: {doubled}" in result.stdout
