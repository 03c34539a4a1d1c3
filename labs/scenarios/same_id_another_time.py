"""Lab 16: the same message id with another occurred_at: a copy, whatever else it carries."""

from __future__ import annotations

from labs.lab import Session, count, delivered, described

INVENTORY = "inventory-reservation-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    lab.order_id = order = panel.place_order()
    lab.look = f"/orders/{order}"
    lab.step(f"placed order {order}")
    panel.wait_entry(order, "inventory applying its OrderPlaced", delivered(INVENTORY, "OrderPlaced", "applied"))
    status = panel.wait_status(order)
    placed = panel.event_id(order, "OrderPlaced")
    lab.step(f"send a copy of OrderPlaced {placed} under the same id, its occurred_at moved a day later")
    panel.act("copy", message_id=placed, change="occurred_at", seconds=86_400)
    copy = panel.wait_entry(
        order,
        "inventory counting the copy",
        delivered(INVENTORY, "OrderPlaced", "duplicate_with_different_content"),
    )
    lab.check(
        "inventory counted the copy a duplicate with different content, naming occurred_at",
        "occurred_at" in str(copy["detail"]),
        str(copy["detail"]),
    )
    entries = panel.timeline(order)
    applied = count(entries, delivered(INVENTORY, "OrderPlaced", "applied"))
    lab.check("inventory applied the order's OrderPlaced once", applied == 1, f"{applied} applied")
    announced = count(entries, lambda e: e["kind"] == "written" and str(e["text"]).startswith("InventoryReserved "))
    lab.check("inventory announced the reservation once", announced == 1, f"{announced} InventoryReserved written")
    lab.check("the order was confirmed", status == "CONFIRMED", status)
    anomalies = panel.anomalies(order)
    lab.check("the auditor finds nothing wrong with the order", not anomalies, described(anomalies))
