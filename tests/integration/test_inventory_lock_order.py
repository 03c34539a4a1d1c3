"""Inventory's handlers lock stock rows in one order (by SKU), so concurrent transactions on
orders of the same SKUs wait for each other and never deadlock: what several workers or group
members need. Every stock update is slowed down here, so transactions that took their rows in
different orders would meet in a deadlock within the first few orders."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable

import psycopg
import pytest

from effectively_once.envelope import Envelope
from services import saga_contract as contract
from services.inventory.handlers import reserve_stock, sell_stock
from services.orders.load import PLENTIFUL
from tests.integration.conftest import service_schema
from tests.support.saga_events import order_placed

SLOW_STOCK = """
CREATE OR REPLACE FUNCTION slow_stock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.02); RETURN NEW; END $$;
CREATE TRIGGER slow_stock BEFORE UPDATE ON stock FOR EACH ROW EXECUTE FUNCTION slow_stock();
"""


def _at_once(url: str, work: list[Callable[[psycopg.Connection[tuple[object, ...]]], None]]) -> list[BaseException]:
    """Each piece of work in a transaction of its own, all started together."""
    failures: list[BaseException] = []
    start = threading.Barrier(len(work))

    def run(job: Callable[[psycopg.Connection[tuple[object, ...]]], None]) -> None:
        try:
            with psycopg.connect(url) as connection:
                start.wait()
                with connection.transaction():
                    job(connection)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=run, args=(job,)) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return failures


@pytest.mark.parametrize("seed", [1, 2])
def test_concurrent_orders_over_the_same_skus_in_any_line_order_never_deadlock(runtime_db: str, seed: int) -> None:
    url = service_schema(runtime_db, "inventory", as_url=True)
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(SLOW_STOCK)
    skus = sorted(PLENTIFUL)[:4]
    rng = random.Random(seed)
    orders = {f"order-{uuid.uuid4().hex[:8]}": rng.sample(skus, len(skus)) for _ in range(8)}

    def reserve(order_id: str, lines: list[str]) -> Callable[[psycopg.Connection[tuple[object, ...]]], None]:
        return lambda connection: reserve_stock(
            order_placed(order_id, [{"sku": sku, "quantity": 1} for sku in lines]), connection
        )

    def sell(order_id: str) -> Callable[[psycopg.Connection[tuple[object, ...]]], None]:
        event = Envelope.new(contract.PAYMENT_AUTHORIZED, order_id, {"order_id": order_id})
        return lambda connection: sell_stock(event, connection)

    assert _at_once(url, [reserve(order_id, lines) for order_id, lines in orders.items()]) == []
    assert _at_once(url, [sell(order_id) for order_id in orders]) == []
    with psycopg.connect(url) as connection:
        sold = connection.execute(
            "SELECT count(*) FROM reservation WHERE order_id = ANY(%s) AND status = 'sold'", (list(orders),)
        ).fetchone()
    assert sold == (len(orders) * len(skus),)
