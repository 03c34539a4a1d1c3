"""End-to-end order latency: POST /orders to CONFIRMED, through every hop of the saga (relay,
inventory, relay, payment and the provider, relay, notification and the mail sandbox, relay, the
saga), at a fixed rate on the running platform."""

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

TARGET_P99_MS = 500


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


def _wait_final(api: str, order_ids: list[str], timeout: float) -> None:
    final = ("CONFIRMED", "REJECTED", "CANCELLED")
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=api, timeout=10) as client:
        while time.monotonic() < deadline:
            if all(client.get(f"/orders/{order_id}").json()["status"] in final for order_id in order_ids):
                return
            time.sleep(0.5)


def confirmation_latencies(settings: Settings, order_ids: list[str]) -> list[float]:
    """POST /orders to CONFIRMED, in milliseconds, of those of `order_ids` that were confirmed; sorted."""
    with psycopg.connect(settings.auditor_database_url(database("orders"))) as connection:
        rows = connection.execute(
            """SELECT extract(epoch FROM h.recorded_at - o.created_at) * 1000
                 FROM customer_order o JOIN order_history h
                   ON h.order_id = o.order_id AND h.status_after = 'CONFIRMED'
                WHERE o.order_id = ANY(%s)""",
            (order_ids,),
        ).fetchall()
    return sorted(float(row[0]) for row in rows)


def measure(rate: float = 10, count: int = 200, system: Settings | None = None) -> list[Row]:
    """On `system` (default: the one `make up` runs, started if need be)."""
    settings = system or Settings()
    stack.up(settings, _say, with_platform=True)
    api = f"http://127.0.0.1:{settings.ORDERS_API_PORT}"
    _say("order latency: warming up until an order goes all the way through")
    warm = place_orders(api, 5, 5, seed=1, quiet=True)
    _wait_final(api, warm.order_ids, timeout=120)
    _say(f"order latency: {count} orders at {rate:g}/s")
    placed = place_orders(api, rate, count, seed=3, quiet=True)
    _wait_final(api, placed.order_ids[-20:], timeout=180)
    values = confirmation_latencies(settings, placed.order_ids)
    if len(values) < 10:
        raise SystemExit(f"only {len(values)} of {count} orders were confirmed: is the platform healthy?")
    p99 = statistics.quantiles(values, n=100)[98]
    detail = f"{len(values)} confirmed orders at {rate:g}/s"
    return [
        Row(
            "saga", "order latency p50", statistics.median(values), "ms", detail="POST /orders to CONFIRMED; " + detail
        ),
        Row(
            "saga",
            "order latency p99",
            p99,
            "ms",
            f"≤ {TARGET_P99_MS:,} ms",
            p99 <= TARGET_P99_MS,
            detail,
            TARGET_P99_MS / p99,
        ),
    ]
