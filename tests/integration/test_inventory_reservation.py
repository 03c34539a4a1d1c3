"""Inventory's reservation against real PostgreSQL: whatever an order's lines, the rows it writes
are exactly what the plan decided from the stock it read (services/inventory/reservation_plan.py),
and stock is conserved. A refusal writes no reservation and takes no unit, with no savepoint."""

from __future__ import annotations

import uuid

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.inventory.handlers import reserve_stock
from services.inventory.reservation_plan import Held, OutOfStock, plan, wanted
from tests.integration.conftest import service_schema
from tests.support.saga_events import order_placed

SKUS = st.sampled_from(["sku-espresso", "sku-kettle", "sku-limited", "sku-filter", "sku-unheard-of"])
LINES = st.lists(st.fixed_dictionaries({"sku": SKUS, "quantity": st.integers(1, 3)}), min_size=1, max_size=5)


def _stock(connection: psycopg.Connection[tuple[object, ...]]) -> dict[str, tuple[int, int, int, int]]:
    rows = connection.execute("SELECT sku, initial, available, reserved, sold FROM stock").fetchall()
    return {str(sku): (int(str(i)), int(str(a)), int(str(r)), int(str(s))) for sku, i, a, r, s in rows}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(orders=st.lists(LINES, min_size=1, max_size=4))
def test_what_an_order_writes_is_what_its_plan_decided(runtime_db: str, orders: list[list[dict[str, object]]]) -> None:
    url = service_schema(runtime_db, "inventory")
    with psycopg.connect(url) as connection:
        for lines in orders:
            order_id = f"order-{uuid.uuid4()}"
            before = _stock(connection)
            held = {sku: Held(available, False) for sku, (_, available, _, _) in before.items()}
            try:
                expected: dict[str, int] | str = plan(wanted(lines), held)
            except OutOfStock as refused:
                expected = str(refused)
            placed = order_placed(order_id, lines)
            with connection.transaction():
                reserve_stock(placed, connection)
            after = _stock(connection)
            reserved: dict[str, int] = dict(
                connection.execute("SELECT sku, quantity FROM reservation WHERE order_id = %s", (order_id,)).fetchall()
            )
            outcome = connection.execute(
                "SELECT outcome, reason FROM reservation_decision WHERE order_id = %s", (order_id,)
            ).fetchone()
            if isinstance(expected, str):
                assert reserved == {} and after == before
                assert outcome == ("refused", expected)
            else:
                assert reserved == expected and outcome == ("reserved", None)
                for sku, (initial, available, held_back, sold) in after.items():
                    taken = expected.get(sku, 0)
                    assert (available, held_back) == (before[sku][1] - taken, before[sku][2] + taken)
                    assert available + held_back + sold == initial
