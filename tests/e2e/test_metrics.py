"""Metrics end to end: the native Prometheus scrapes every process of a system of its own; after a
short load every expression the dashboards use returns data, and the outcome counters agree with
what the databases say happened."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from auditor.invariants import Query, database_reader
from dashboards.build import DASHBOARDS, DEBEZIUM_ONLY, expressions, render
from infra.launcher import processes
from services.orders.load import place_orders
from services.settings import Settings
from services.topology import CONSUMERS, database
from tests.support.launcher_run import LauncherRun
from tests.support.waiting import wait_for

ORDERS = 40


@pytest.fixture(scope="module")
def system(default_system: tuple[LauncherRun, Settings]) -> tuple[LauncherRun, Settings]:
    return default_system


def _prometheus(settings: Settings, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"http://127.0.0.1:{settings.PROMETHEUS_PORT}/api/v1/query", params={"query": expr}, timeout=10
    ).json()
    assert answer["status"] == "success", (expr, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def _value(settings: Settings, expr: str) -> float:
    result = _prometheus(settings, expr)
    return float(result[0]["value"][1]) if result else 0.0


@pytest.fixture(scope="module")
def loaded(system: tuple[LauncherRun, Settings]) -> tuple[Settings, Query]:
    """Every target up, a short load placed and finished."""
    _, settings = system
    targets = processes.scrape_targets(settings)
    wait_for(
        lambda: len([r for r in _prometheus(settings, "up == 1")]) == len(targets),
        60,
        f"Prometheus to scrape all {len(targets)} processes",
        interval=0.5,
    )
    api = f"http://127.0.0.1:{settings.ORDERS_API_PORT}"
    placed = place_orders(api, rate=20, count=ORDERS, seed=5, quiet=True)
    assert len(placed.order_ids) == ORDERS
    final = ("CONFIRMED", "REJECTED", "CANCELLED")
    wait_for(
        lambda: all(o["status"] in final for o in httpx.get(f"{api}/orders", params={"limit": 500}).json()),
        120,
        "every order to finish",
        interval=0.5,
    )
    return settings, database_reader(lambda name: settings.auditor_database_url(database(name)))


@pytest.mark.parametrize("name", list(DASHBOARDS))
def test_every_dashboard_expression_returns_data(loaded: tuple[Settings, Query], name: str) -> None:
    settings, _ = loaded
    missing: list[str] = []
    for title, expr in expressions(json.loads(render(name))):
        if title in DEBEZIUM_ONLY:
            continue  # no slot under the built-in relay: tests/e2e/test_debezium_relay_system.py

        def answers(e: str = expr) -> bool:
            return bool(_prometheus(settings, e))

        try:
            wait_for(answers, 30, f"data for {expr}", interval=1)
        except AssertionError:
            missing.append(f"{title}: {expr}")
    assert not missing, "panels that would show No data:\n" + "\n".join(missing)


def test_outcome_counters_agree_with_the_markers_in_the_databases(loaded: tuple[Settings, Query]) -> None:
    settings, query = loaded
    for consumer in CONSUMERS:
        markers = f"SELECT count(*) FROM processed_message WHERE consumer_name = '{consumer.name}'"
        expected = float(query(consumer.database, markers)[0][0])
        assert expected > 0, consumer.name
        applied = f'sum(eo_consumer_messages_total{{consumer="{consumer.name}",outcome="applied"}})'

        def agrees(a: str = applied, e: float = expected) -> bool:
            return _value(settings, a) == e

        wait_for(agrees, 30, f"{consumer.name}'s applied counter to reach its {expected:.0f} markers", interval=1)


def test_the_relay_and_the_provider_counted_what_their_tables_hold(loaded: tuple[Settings, Query]) -> None:
    settings, query = loaded
    published = sum(
        int(query(db, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")[0][0])
        for db in ("orders", "inventory", "payment", "notification")
    )
    wait_for(lambda: _value(settings, "sum(eo_outbox_published_total)") == published, 30, f"{published} published")
    charges = int(query("payment_provider", "SELECT count(*) FROM charge")[0][0])
    assert charges > 0
    wait_for(
        lambda: _value(settings, 'sum(eo_provider_requests_total{result="charged"})') == charges,
        30,
        f"the provider's charged counter to match the {charges} charges in its ledger",
    )
    statuses = {
        row[0]: int(row[1]) for row in query("orders", "SELECT status, count(*) FROM customer_order GROUP BY 1")
    }
    wait_for(
        lambda: all(_value(settings, f'eo_saga_orders{{status="{s}"}}') == n for s, n in statuses.items()),
        30,
        f"the saga gauge to say {statuses}",
    )


def test_the_panel_draws_the_same_series_from_the_native_prometheus(loaded: tuple[Settings, Query]) -> None:
    """The charts are live: a consumer's lag series exists from its first statistics report after it
    consumed (every 5 s) plus a scrape, so the test waits for the chart to hold it, as a person would."""
    settings, _ = loaded
    panel = f"http://127.0.0.1:{settings.CHAOS_PANEL_PORT}"
    home = httpx.get(f"{panel}/overview", timeout=10).text
    assert 'hx-get="/fragments/charts"' in home and "/d/eo-overview" not in home  # no Grafana natively
    drawn: list[str] = []

    def charted() -> bool:
        charts = httpx.get(f"{panel}/fragments/charts", timeout=20).text
        drawn[:] = re.findall(r'<p class="legend small">(.*?)</p>', charts, re.S) or [charts]
        assert "did not answer" not in charts, charts
        return charts.count("<polyline") >= 4 and "applied" in charts and "inventory-reservation-v1" in charts

    try:
        wait_for(charted, 30, "the panel's charts to draw outcomes and every consumer's lag", interval=1)
    except AssertionError as error:
        raise AssertionError(f"{error}; last legends drawn: {drawn}") from error


def test_the_front_page_map_writes_prometheus_figures_on_each_part(loaded: tuple[Settings, Query]) -> None:
    """After the load, the map's consumers carry their rates from Prometheus and their totals from
    the processes, each outbox database its backlog, and the relay what it published."""
    settings, _ = loaded
    panel = f"http://127.0.0.1:{settings.CHAOS_PANEL_PORT}"
    shown: list[dict[str, Any]] = []

    def figured() -> bool:
        shown[:] = httpx.get(f"{panel}/api/map", timeout=20).json()["boxes"]
        lines = {box["id"]: " | ".join(box["lines"]) for box in shown}
        return (
            "applied" in lines["consumer-inventory"]
            and "/s applied" in lines["consumer-inventory"]
            and all("waiting" in lines[f"db-{name}"] for name in ("orders", "inventory", "payment", "notification"))
            and "published" in lines["outbox-relay"]
        )

    try:
        wait_for(figured, 30, "the map to carry rates, backlogs and the relay's rate", interval=1)
    except AssertionError as error:
        raise AssertionError(f"{error}; last map: {shown}") from error
    totals = next(box for box in shown if box["id"] == "consumer-inventory")["lines"]
    applied = next(int(m.group(1).replace(",", "")) for line in totals if (m := re.match(r"Σ ([\d,]+) applied", line)))
    assert applied >= ORDERS, totals  # every OrderPlaced, and the payment events it acts on
    assert {box["state"] for box in shown if box["kind"] == "consumer"} == {"up"}, shown
