"""What an order's reservation takes from stock, decided from what the stock rows hold: no I/O.

The handler takes what the order's lines want (`wanted`), reads those SKUs' stock rows (locked, in
SKU order), asks `plan` what to reserve, and writes the whole plan at once, or nothing when the
plan refuses the order. Deciding before writing is what lets a shortfall change nothing without a
savepoint to roll back to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class OutOfStock(Exception):
    """A business outcome, not a failure: the order is refused and the refusal is an event."""


@dataclass(frozen=True)
class Held:
    """One SKU's stock row, as the order's reservation sees it."""

    available: int
    reserved_for_order: bool
    """This order holds a reservation of this SKU already (decided before, under this message id)."""


def wanted(lines: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Each SKU of the order with the quantity of its first line, in SKU order (code point order,
    as every handler locks stock rows): a SKU's later lines in the same order add nothing."""
    first: dict[str, int] = {}
    for line in sorted(lines, key=lambda line: str(line["sku"])):
        first.setdefault(str(line["sku"]), int(line["quantity"]))
    return first


def plan(wanting: Mapping[str, int], stock: Mapping[str, Held]) -> dict[str, int]:
    """The SKUs and quantities to reserve of what the order wants (`wanted`, in SKU order); raises
    OutOfStock at the first SKU, in that order, the catalog does not know or has too few of. A SKU
    the order holds already is neither taken again nor checked."""
    taking: dict[str, int] = {}
    for sku, quantity in wanting.items():
        held = stock.get(sku)
        if held is None:
            raise OutOfStock(f"unknown SKU {sku}")
        if held.reserved_for_order:
            continue
        if held.available < quantity:
            raise OutOfStock(f"not enough {sku} for {quantity}")
        taking[sku] = quantity
    return taking
