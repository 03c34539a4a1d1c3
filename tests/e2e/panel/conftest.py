"""A running system of its own for the panel's tests, and a client that speaks to the panel."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from services.settings import Settings
from tests.support.launcher_run import LauncherRun, running_system
from tests.support.waiting import wait_for


@dataclass
class PanelSystem:
    run: LauncherRun
    settings: Settings
    panel: httpx.Client
    """JSON control requests (a JSON body passes the panel's CSRF check; it binds to loopback)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.CHAOS_PANEL_PORT}"

    def act(self, path: str, **body: Any) -> dict[str, Any]:
        response = self.panel.post(f"/api/{path}", json=body)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        assert answer["ok"], answer
        return answer

    def state(self, process: str) -> dict[str, Any]:
        processes = self.panel.get("/api/state").json()["processes"]
        found: dict[str, Any] = next(p for p in processes if p["name"] == process)
        return found

    def timeline(self, order_id: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.panel.get(f"/api/orders/{order_id}/timeline").json()["entries"]
        return entries

    def order_status(self, order_id: str) -> str:
        api = f"http://127.0.0.1:{self.settings.ORDERS_API_PORT}"
        return str(httpx.get(f"{api}/orders/{order_id}", timeout=5).json()["status"])

    def wait_final(self, order_id: str, timeout: float = 60) -> str:
        wait_for(
            lambda: self.order_status(order_id) in ("CONFIRMED", "REJECTED", "CANCELLED"),
            timeout,
            f"order {order_id} to reach a final status",
            interval=0.2,
        )
        return self.order_status(order_id)

    def audit(self) -> dict[str, Any]:
        result: dict[str, Any] = self.panel.get("/api/audit").json()
        return result

    def wait_for_entry(self, order_id: str, what: str, matches: Any, timeout: float = 60) -> list[dict[str, Any]]:
        found: list[list[dict[str, Any]]] = []

        def present() -> bool:
            entries = self.timeline(order_id)
            found[:] = [entries]
            return any(matches(entry) for entry in entries)

        wait_for(present, timeout, f"{what} on the timeline of {order_id}", interval=0.2)
        return found[0]

    def wait_quiet(self, timeout: float = 60) -> None:
        """Until no order is still in flight (so a fault armed next meets the next order's messages)."""
        api = f"http://127.0.0.1:{self.settings.ORDERS_API_PORT}"

        def quiet() -> bool:
            orders = httpx.get(f"{api}/orders", params={"limit": 500}, timeout=5).json()
            return all(order["status"] in ("CONFIRMED", "REJECTED", "CANCELLED") for order in orders)

        wait_for(quiet, timeout, "every order in flight to finish", interval=0.2)


@pytest.fixture(scope="package")
def system() -> Iterator[PanelSystem]:
    with running_system() as run:
        settings = run.settings()
        with httpx.Client(base_url=f"http://127.0.0.1:{settings.CHAOS_PANEL_PORT}", timeout=60) as client:
            yield PanelSystem(run, settings, client)


@pytest.fixture
def clean(system: PanelSystem) -> Iterator[PanelSystem]:
    """Every fault disarmed, every consumer on `correct` and no order in flight, before the test;
    reset again after it."""
    system.act("reset")
    system.wait_quiet()
    yield system
    system.act("reset")
