"""A whole system with RELAY=debezium (`make up RELAY=debezium` on ports and state of its own):
Kafka Connect's worker is killed in the middle of the flow; the supervisor restarts it, it resumes
from its last flushed position and sends again what came after; the consumers count those as
duplicates, every order ends, and the auditor finds nothing lost or doubled. The panel's slots and
its pause and resume, and the workshop lab built on them (with its screenshot). Then a short soak on
the same system: every process crashed at every point, rewinds, republished copies, the worker
killed twice more, the broker and the database restarted."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from auditor.invariants import audit, database_reader, report
from dashboards.build import DASHBOARDS, DEBEZIUM_ONLY, expressions, render
from infra.launcher import kafka_connect, processes
from infra.launcher.supervisor import Supervisor
from labs.catalog import BY_NAME
from labs.client import LabError, PanelClient
from outbox_relay.wiring import outbox_databases
from services.orders.load import LoadResult, place_orders
from services.settings import PROJECT_ROOT, Settings
from services.topology import cdc_slot, database
from tests.support.launcher_run import LauncherRun, running_system
from tests.support.waiting import wait_for
from tests.support.workshop import run_and_screenshot

ORDERS = 150
FINAL = {"CONFIRMED", "REJECTED", "CANCELLED"}
CONSUMER_PROCESSES = ("orders-saga", "inventory", "payment", "notification", "sales-projection")


@pytest.fixture(scope="module")
def system() -> Iterator[tuple[LauncherRun, Settings]]:
    with running_system(RELAY="debezium") as run:
        yield run, run.settings()


def _duplicates(settings: Settings) -> float:
    """Deliveries every consumer process counted as duplicates so far, from their /metrics."""
    urls = processes.control_urls(settings)
    total = 0.0
    for name in CONSUMER_PROCESSES:
        text = httpx.get(f"{urls[name]}/metrics", timeout=5).text
        for line in text.splitlines():
            if line.startswith("eo_consumer_messages_total{") and 'outcome="duplicate"' in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def _worker_complaints(run: LauncherRun) -> str:
    """The worker's last errors and warnings, but for its clients' lost connections (the whole log
    is in the state directory, removed with the system): what a failed soak needs explained."""
    path = Supervisor(run.state_dir).log_path(processes.KAFKA_CONNECT)
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    complaints = [
        line[:300] for line in lines if (" ERROR " in line or " WARN " in line) and "NetworkClient" not in line
    ]
    return f"\nthe Kafka Connect worker's last errors and warnings ({path}):\n" + "\n".join(complaints[-40:])


def _unmarked(settings: Settings) -> int:
    count = 0
    for outbox in outbox_databases():
        with psycopg.connect(settings.auditor_database_url(outbox)) as connection:
            row = connection.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone()
            count += int(row[0]) if row else 0
    return count


def test_the_connect_worker_killed_mid_flow_loses_and_doubles_nothing(system: tuple[LauncherRun, Settings]) -> None:
    run, settings = system
    supervisor = Supervisor(run.state_dir)
    states = kafka_connect.connector_states(settings.KAFKA_CONNECT_PORT)
    assert set(states.values()) == {"RUNNING"} and len(states) == len(outbox_databases()), states
    duplicates_before = _duplicates(settings)
    api = f"http://127.0.0.1:{settings.ORDERS_API_PORT}"
    placed: list[LoadResult] = []
    placing = threading.Thread(
        target=lambda: placed.append(place_orders(api, rate=40, count=ORDERS, seed=3, quiet=True))
    )
    placing.start()
    with psycopg.connect(settings.auditor_database_url(database("orders"))) as orders:

        def flowing() -> bool:
            row = orders.execute("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL").fetchone()
            return bool(row and row[0] >= 30)

        wait_for(flowing, 60, "Debezium's events to flow and be marked")
    killed = supervisor.info(processes.KAFKA_CONNECT)["pid"]
    os.kill(killed, signal.SIGKILL)
    wait_for(
        lambda: supervisor.info(processes.KAFKA_CONNECT)["pid"] not in (0, killed),
        60,
        "the supervisor to restart the Connect worker",
    )
    kafka_connect.wait_until_running(settings.KAFKA_CONNECT_PORT, 120, lambda: None)
    placing.join()
    assert placed and len(placed[0].order_ids) == ORDERS and not placed[0].failures

    with httpx.Client(base_url=api, timeout=10) as client:

        def all_final() -> bool:
            orders_now = client.get("/orders", params={"limit": 500}).json()
            return sum(order["status"] in FINAL for order in orders_now) == ORDERS

        wait_for(all_final, 240, f"all {ORDERS} orders to reach a final status", interval=0.5)
    wait_for(lambda: _unmarked(settings) == 0, 60, "every outbox row to be marked as Debezium confirms it")
    assert _duplicates(settings) > duplicates_before, "what the restarted worker sent again was counted as duplicates"
    verdict = audit(database_reader(lambda name: settings.auditor_database_url(database(name))))
    assert verdict.green, "\n".join(report(verdict))
    assert verdict.checks["every order ends, as its ledgers say"] == ORDERS


def test_each_connector_reads_through_a_replication_role_of_its_own(system: tuple[LauncherRun, Settings]) -> None:
    _, settings = system
    with psycopg.connect(settings.admin_database_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT s.slot_name, s.active, a.usename FROM pg_replication_slots s "
            "JOIN pg_stat_activity a ON a.pid = s.active_pid ORDER BY s.slot_name"
        ).fetchall()
        roles: dict[str, Any] = {
            row[0]: row[1:]
            for row in admin.execute(
                "SELECT rolname, rolreplication, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles"
                " WHERE rolname LIKE '%\\_cdc'"
            )
        }
    expected = {cdc_slot(db.name): db.cdc_role for db in outbox_databases()}
    assert {slot: (active, user) for slot, active, user in rows} == {
        slot: (True, role) for slot, role in expected.items()
    }
    for role in expected.values():
        assert roles[role] == (True, False, False, False), f"{role} may replicate and nothing more"


def test_the_panel_shows_each_slot_and_a_paused_connector_holds_its_events_until_resumed(
    system: tuple[LauncherRun, Settings],
) -> None:
    """The panel's reading of each slot, and its pause and resume: the paused connector's slot
    grows, the order's first event waits in the log, and after resuming the order ends with
    nothing lost or doubled."""
    _, settings = system
    panel = PanelClient(settings.chaos_panel_url)
    try:
        slots = panel.slots()
        assert set(slots) == {db.name for db in outbox_databases()}
        assert {slot["connector"] for slot in slots.values()} == {"RUNNING"}, slots
        with pytest.raises(LabError, match="no connector for database"):
            panel.act("connector", database="nowhere", action="pause")
        with pytest.raises(LabError, match="action must be one of"):
            panel.act("connector", database="orders", action="drop")

        panel.act("connector", database="orders", action="pause")
        panel.wait(lambda: panel.slots()["orders"]["connector"] == "PAUSED", 30, "the connector to pause")
        before = panel.slots()["orders"]["retained_bytes"]
        order = panel.place_order()
        panel.wait(lambda: panel.slots()["orders"]["retained_bytes"] > before, 30, "the paused slot to grow")
        assert panel.status(order) == "PLACED", "its OrderPlaced waits in the log while the connector is paused"
        shown = httpx.get(f"{settings.chaos_panel_url}/fragments/slots", timeout=10).text
        assert 'id="slot-orders"' in shown and "paused" in shown

        panel.act("connector", database="orders", action="resume")
        assert panel.wait_status(order, timeout=90) == "CONFIRMED"
        assert not panel.anomalies(order)
    finally:
        with contextlib.suppress(LabError):
            panel.act("connector", database="orders", action="resume")
        panel.close()


def test_the_dashboard_panels_for_debezium_have_data(system: tuple[LauncherRun, Settings]) -> None:
    _, settings = system
    wanted = [
        (title, expr)
        for name in DASHBOARDS
        for title, expr in expressions(json.loads(render(name)))
        if title in DEBEZIUM_ONLY
    ]
    assert wanted
    prometheus = f"http://127.0.0.1:{settings.PROMETHEUS_PORT}/api/v1/query"
    for title, expr in wanted:

        def answers(e: str = expr) -> bool:
            return bool(httpx.get(prometheus, params={"query": e}, timeout=10).json()["data"]["result"])

        wait_for(answers, 60, f"{title} to have data ({expr})", interval=1)


def test_the_stopped_connector_lab(system: tuple[LauncherRun, Settings], browser: WebDriver) -> None:
    """The workshop's lab on this system, as `make lab NAME=stopped-connector` runs it, with its
    screenshot (tests/support/workshop.py)."""
    _, settings = system
    panel = PanelClient(settings.chaos_panel_url)
    try:
        run_and_screenshot(BY_NAME["stopped-connector"], panel, browser)
    finally:
        panel.close()


@pytest.mark.timeout(600)
def test_a_short_soak_with_debezium_relaying_loses_nothing_and_doubles_nothing(
    system: tuple[LauncherRun, Settings],
) -> None:
    run, _ = system
    log = PROJECT_ROOT / "artifacts" / "soak" / "short-soak-debezium.log"
    status, printed = run.soak(log, "--duration", "45", "--rate", "6", "--crashes", "0", "--seed", "7", timeout=540)
    assert status == 0 and "SOAK: PASSED" in printed, printed + _worker_complaints(run)
    injected = re.search(r"faults injected\s+(.*)$", printed, re.M)
    assert injected and "connect kill 2" in injected.group(1), printed
    assert re.search(r"^\s*not carried out\s+none$", printed, re.M), printed
    assert "CHECKER: CLEAN" in printed and "auditor and checker      agree" in printed, printed
