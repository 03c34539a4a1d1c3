"""The saga with the Java and the TypeScript consumer in the inventory slot (`make up
INVENTORY_IMPL=java|node`): orders reach their final statuses, a crash armed on the chaos panel
between commit and acknowledgement is redelivered and counted as a duplicate, and the auditor
finds nothing lost or doubled. The Python one is the default every other end-to-end test runs."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from auditor.invariants import audit, database_reader, report
from infra.launcher.processes import control_urls
from services.orders.load import place_orders
from services.settings import Settings
from services.topology import database
from tests.support.launcher_run import LauncherRun, running_system
from tests.support.scraped import metric
from tests.support.waiting import wait_for

FINAL = {"CONFIRMED", "REJECTED", "CANCELLED"}
ORDERS = 60


RUNTIME_METRIC = {"java": "process_uptime_seconds", "node": "nodejs_heap_size_total_bytes"}
"""A metric only that implementation's runtime serves (Micrometer's uptime, prom-client's Node.js
heap): which one is in the slot."""


@pytest.fixture(scope="module")
def one_system() -> Iterator[LauncherRun]:
    """One system for both implementations: the second replaces the first in place, as
    `make up INVENTORY_IMPL=…` does on a running system."""
    with running_system(INVENTORY_IMPL="java") as run:
        yield run


@pytest.fixture(scope="module", params=("java", "node"))
def system(request: pytest.FixtureRequest, one_system: LauncherRun) -> tuple[str, Settings]:
    one_system.overrides["INVENTORY_IMPL"] = request.param
    swapped = one_system.launcher("up")
    assert swapped.returncode == 0, swapped.stdout + swapped.stderr
    settings = one_system.settings()
    wait_for(lambda: _serves(settings, RUNTIME_METRIC[request.param]), 120, f"the {request.param} inventory to serve")
    return request.param, settings


def _serves(settings: Settings, metric: str) -> bool:
    try:
        return metric in httpx.get(f"{control_urls(settings)['inventory']}/metrics", timeout=5).text
    except httpx.HTTPError:
        return False


def _inventory_metric(settings: Settings, name: str, **labels: str) -> float:
    return metric(settings, "inventory", name, **labels)


def _inventory_started_at(settings: Settings) -> float | None:
    try:
        return _inventory_metric(settings, "process_start_time_seconds")
    except httpx.HTTPError:
        return None  # down, or not serving yet


def test_orders_end_and_a_crash_after_commit_is_a_counted_duplicate(system: tuple[str, Settings]) -> None:
    implementation, settings = system
    panel, api = settings.chaos_panel_url, f"http://127.0.0.1:{settings.ORDERS_API_PORT}"
    strategy = httpx.get(f"{control_urls(settings)['inventory']}/strategy", timeout=5).json()
    assert strategy["strategies"] == ["correct"], f"the {implementation} consumer is not the one running"
    assert _serves(settings, RUNTIME_METRIC[implementation]), f"the {implementation} consumer is not the one running"
    started = _inventory_started_at(settings)

    armed = httpx.post(
        f"{panel}/api/faults",
        json={"process": "inventory", "point": "after_commit_before_ack", "action": "crash", "times": 1},
        timeout=10,
    )
    assert armed.status_code == 200, armed.text
    placed = place_orders(api, rate=30, count=ORDERS, seed=23, quiet=True)
    assert not placed.failures and len(placed.order_ids) == ORDERS

    with httpx.Client(base_url=api, timeout=10) as client:

        def all_final() -> bool:
            statuses = [client.get(f"/orders/{order_id}").json()["status"] for order_id in placed.order_ids]
            return all(status in FINAL for status in statuses)

        wait_for(all_final, 180, f"all {ORDERS} orders to reach a final status behind the {implementation} inventory")

    restarted = _inventory_started_at(settings)
    assert started is not None and restarted is not None and restarted > started, "the armed crash never happened"
    duplicates = _inventory_metric(
        settings, "eo_consumer_messages_total", event_type="OrderPlaced", outcome="duplicate"
    )
    assert duplicates >= 1, "the redelivery after the crash was not counted as a duplicate"

    verdicts = []

    def green() -> bool:
        verdicts.append(audit(database_reader(lambda name: settings.auditor_database_url(database(name)))))
        return verdicts[-1].green

    try:
        wait_for(green, 60, "the auditor's verdict to be green (the last events' effects to land)", interval=1)
    except AssertionError as waited:
        raise AssertionError(f"{waited}\n" + "\n".join(report(verdicts[-1]))) from None
