"""A primary and its standby on a system of their own (`make up POSTGRES=ha`): failovers under
load with a synchronous standby lose and double nothing; with an asynchronous one, lab 17 shows
the work Kafka had acknowledged lost, and a rewind applying it once."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from labs.catalog import BY_NAME
from labs.client import PanelClient
from services.orders.load import LoadResult, place_orders
from services.settings import PROJECT_ROOT
from tests.support.launcher_run import LauncherRun, running_system
from tests.support.workshop import run_and_screenshot


@pytest.fixture(scope="module")
def pair() -> Iterator[LauncherRun]:
    with running_system(POSTGRES="ha") as system:
        yield system


def _audit(system: LauncherRun) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "auditor"],
        cwd=PROJECT_ROOT,
        env=system.environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.timeout(600)
def test_failovers_under_load_with_a_synchronous_standby_lose_and_double_nothing(pair: LauncherRun) -> None:
    shown = pair.launcher("db")
    assert shown.returncode == 0 and "a primary and a synchronous standby" in shown.stdout, shown.stdout + shown.stderr
    settings = pair.settings()
    result = LoadResult()
    loader = threading.Thread(
        target=place_orders,
        kwargs={
            "url": f"http://127.0.0.1:{settings.ORDERS_API_PORT}",
            "rate": 8,
            "count": 200,
            "quiet": True,
            "result": result,
        },
    )
    loader.start()
    failovers = [pair.launcher("db", "failover"), pair.launcher("db", "failover")]
    loader.join(timeout=120)
    for done in failovers:
        assert done.returncode == 0 and "promoted" in done.stdout, done.stdout + done.stderr
    panel = PanelClient(f"http://127.0.0.1:{settings.CHAOS_PANEL_PORT}")
    try:
        statuses = [panel.wait_status(order, timeout=120) for order in result.order_ids]
        nodes = panel.databases()
    finally:
        panel.close()
    assert len(result.order_ids) > 150, result.failures
    assert all(status in ("CONFIRMED", "REJECTED", "CANCELLED") for status in statuses)
    assert sorted(node["role"] for node in nodes["nodes"]) == ["primary", "standby"], nodes
    assert len(nodes["failovers"]) == 2 and all(f["synchronous"] for f in nodes["failovers"]), nodes["failovers"]
    audited = _audit(pair)
    assert audited.returncode == 0, audited.stdout[-4000:] + audited.stderr[-2000:]
    assert "AUDIT: GREEN" in audited.stdout and "KAFKA SIDE: CLEAN" in audited.stdout, audited.stdout[-4000:]
    nothing = pair.launcher("db", "rewind")
    assert nothing.returncode == 0 and "nothing to rewind for" in nothing.stdout, nothing.stdout + nothing.stderr


@pytest.mark.timeout(600)
def test_an_asynchronous_standby_loses_acknowledged_work_and_a_rewind_applies_it_once(
    pair: LauncherRun, browser: WebDriver
) -> None:
    """Lab 17, run as `make lab NAME=failover` runs it; the page it points at is screenshotted."""
    panel = PanelClient(f"http://127.0.0.1:{pair.settings().CHAOS_PANEL_PORT}")
    try:
        run_and_screenshot(BY_NAME["failover"], panel, browser)
        mode = panel.databases()["synchronous"]
    finally:
        panel.close()
    assert mode is True, "the lab leaves the pair synchronous, as it found it"
