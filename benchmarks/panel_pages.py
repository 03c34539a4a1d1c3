"""The chaos panel with 10,000 orders in the system: how long each page a learner polls takes to
answer (the front page and its map, the verdict, the orders list, an order's proof and timeline).

`python -m benchmarks.panel_pages` alone; `make bench` runs it too. The orders are placed through
the API (those already there count), and the saga finishes them before anything is timed.
"""

from __future__ import annotations

import statistics
import time

import httpx
import psycopg

from benchmarks.rows import Row
from infra.launcher import stack
from services.orders.load import place_orders
from services.settings import Settings
from services.topology import database

ORDERS = 10_000
TARGET_P95_MS = 1_000.0
FINAL = ("CONFIRMED", "REJECTED", "CANCELLED")


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


def _counts(settings: Settings) -> tuple[int, int]:
    """(orders, orders not yet final)."""
    with psycopg.connect(settings.auditor_database_url(database("orders"))) as connection:
        row = connection.execute(
            "SELECT count(*), count(*) FILTER (WHERE status <> ALL(%s)) FROM customer_order", (list(FINAL),)
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _fill(settings: Settings, orders: int, timeout: float = 1_800) -> None:
    have, _ = _counts(settings)
    if have < orders:
        _say(f"panel pages: placing {orders - have:,} orders (the system holds {have:,})")
        place_orders(f"http://127.0.0.1:{settings.ORDERS_API_PORT}", 150, orders - have, seed=11, quiet=True)
    deadline = time.monotonic() + timeout
    told = 0.0
    while (waiting := _counts(settings)[1]) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{waiting} orders still in flight after {timeout:.0f} s")
        if time.monotonic() - told > 15:
            _say(f"panel pages: {waiting:,} orders still in flight")
            told = time.monotonic()
        time.sleep(1)  # the saga works through the backlog; polled, not timed


def _latest_confirmed(settings: Settings) -> str:
    with psycopg.connect(settings.auditor_database_url(database("orders"))) as connection:
        row = connection.execute(
            "SELECT order_id FROM customer_order WHERE status = 'CONFIRMED' ORDER BY created_at DESC LIMIT 1"
        ).fetchone()
    if row is None:
        raise RuntimeError("no order was confirmed")
    return str(row[0])


def _timed(client: httpx.Client, path: str, rounds: int) -> list[float]:
    for _ in range(2):  # warm: the first answers fill connection pools and caches
        client.get(path).raise_for_status()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        client.get(path).raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return sorted(times)


def measure(system: Settings | None = None, orders: int = ORDERS, rounds: int = 20) -> list[Row]:
    settings = system or Settings()
    stack.up(settings, _say, with_platform=True)
    _fill(settings, orders)
    held, _ = _counts(settings)
    order_id = _latest_confirmed(settings)
    pages = {
        "front page (map)": "/",
        "map, as it refreshes": "/fragments/map",
        "auditor's verdict": "/fragments/verdict",
        "orders list": "/fragments/orders",
        "an order's proof": f"/fragments/proof/{order_id}",
        "an order's timeline": f"/fragments/timeline/{order_id}",
    }
    rows = []
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.CHAOS_PANEL_PORT}", timeout=60) as client:
        for name, path in pages.items():
            times = _timed(client, path, rounds)
            p95 = times[max(0, round(0.95 * len(times)) - 1)]
            rows.append(
                Row(
                    "panel",
                    name,
                    p95,
                    "ms p95",
                    f"p95 ≤ {TARGET_P95_MS:,.0f} ms",
                    p95 <= TARGET_P95_MS,
                    f"p50 {statistics.median(times):.0f} ms; {held:,} orders",
                    TARGET_P95_MS / max(p95, 1e-9),
                )
            )
            _say(f"panel pages: {name}: p50 {statistics.median(times):.0f} ms, p95 {p95:.0f} ms")
    return rows


if __name__ == "__main__":
    from benchmarks.rows import table

    print("\n".join(table(measure())))
