"""Lab 04: the change committed first, the marker in its own transaction after: a crash between
applies the message twice."""

from __future__ import annotations

from labs.lab import Session, count, delivered, described
from labs.scenarios.staging import crash_under, named_by_auditor

INVENTORY = "inventory-reservation-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    order = crash_under(
        lab, "inventory", "between_transactions", "marker_after_in_separate_txn", "its change commits, then the crash"
    )
    panel.wait_entry(order, "the second application", delivered(INVENTORY, "OrderPlaced", "applied"))
    panel.wait_status(order)
    doubled = named_by_auditor(lab, order, "inventory decides once per order")
    entries = panel.timeline(order)
    announced = count(entries, lambda e: e["kind"] == "written" and str(e["text"]).startswith("InventoryReserved"))
    lab.check(
        "no marker stopped the redelivery: OrderPlaced was applied again",
        count(entries, delivered(INVENTORY, "OrderPlaced", "duplicate")) == 0 and announced == 2,
        f"InventoryReserved written {announced} times",
    )
    lab.check("the auditor names the order: inventory decided it twice", bool(doubled), described(doubled))
