"""What an order's reservation takes (services/inventory/reservation_plan.py), against the rule
the handler followed line by line before it decided first: lines in SKU order, a SKU's first
line counts, the first unknown or short SKU refuses the whole order, a SKU the order holds is
skipped."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.inventory.reservation_plan import Held, OutOfStock, plan, wanted

pytestmark = pytest.mark.unit

SKUS = st.sampled_from(["sku-a", "sku-B", "sku-b", "SKU-a", "sku-é", "sku-z", "sku-10", "sku-9"])
LINES = st.lists(st.fixed_dictionaries({"sku": SKUS, "quantity": st.integers(1, 10)}), min_size=1, max_size=6)
STOCK = st.dictionaries(SKUS, st.builds(Held, st.integers(0, 12), st.booleans()), max_size=8)


def line_by_line(lines: list[dict[str, object]], stock: dict[str, Held]) -> dict[str, int] | str:
    """The rule as the handler once ran it: reserve a line, then the next, undo all on a refusal."""
    taken: dict[str, int] = {}
    for line in sorted(lines, key=lambda line: str(line["sku"])):
        sku, quantity = str(line["sku"]), int(str(line["quantity"]))
        if sku not in stock:
            return f"unknown SKU {sku}"
        if sku in taken or stock[sku].reserved_for_order:
            continue
        if stock[sku].available < quantity:
            return f"not enough {sku} for {quantity}"
        taken[sku] = quantity
    return taken


@given(LINES, STOCK)
def test_the_plan_is_what_reserving_line_by_line_came_to(
    lines: list[dict[str, object]], stock: dict[str, Held]
) -> None:
    expected = line_by_line(lines, stock)
    if isinstance(expected, str):
        with pytest.raises(OutOfStock) as refused:
            plan(wanted(lines), stock)
        assert str(refused.value) == expected
    else:
        assert plan(wanted(lines), stock) == expected
        assert list(plan(wanted(lines), stock)) == sorted(expected)  # in the order the rows are locked


def test_a_skus_later_line_adds_nothing() -> None:
    lines = [{"sku": "sku-b", "quantity": 2}, {"sku": "sku-a", "quantity": 1}, {"sku": "sku-b", "quantity": 9}]
    assert wanted(lines) == {"sku-a": 1, "sku-b": 2}
    assert list(wanted(lines)) == ["sku-a", "sku-b"]


def test_the_first_short_sku_in_sku_order_is_the_reason() -> None:
    stock = {"sku-a": Held(0, False), "sku-b": Held(0, False)}
    with pytest.raises(OutOfStock, match="not enough sku-a for 1"):
        plan(wanted([{"sku": "sku-b", "quantity": 1}, {"sku": "sku-a", "quantity": 1}]), stock)
