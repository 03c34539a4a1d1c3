"""Lab 01: the process dies after the commit, before the acknowledgement."""

from __future__ import annotations

from labs.lab import Session, count, delivered, described, fault
from labs.scenarios.staging import crash_under

INVENTORY = "inventory-reservation-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    order = crash_under(
        lab, "inventory", "after_commit_before_ack", None, "inventory commits its reservation, then dies before the ack"
    )
    panel.wait_entry(order, "the redelivery", delivered(INVENTORY, "OrderPlaced", "duplicate"))
    entries = panel.timeline(order)
    crashed = count(entries, fault("inventory", "after_commit_before_ack"))
    started = count(entries, lambda e: e["kind"] == "started" and e["actor"] == "inventory")
    lab.check(
        "the timeline shows the crash and the restart",
        crashed == 1 and started >= 1,
        f"{crashed} crash, {started} restart",
    )
    duplicates = count(entries, delivered(INVENTORY, "OrderPlaced", "duplicate"))
    lab.check(
        "Kafka redelivered OrderPlaced and the marker made it a duplicate",
        duplicates >= 1,
        f"{duplicates} duplicate(s)",
    )
    applied = count(entries, delivered(INVENTORY, "OrderPlaced", "applied"))
    lab.check("inventory applied it exactly once", applied == 1, f"{applied} applied")
    status = panel.wait_status(order)
    lab.check("the order was confirmed", status == "CONFIRMED", status)
    anomalies = panel.anomalies(order)
    lab.check("the auditor finds nothing wrong with the order", not anomalies, described(anomalies))
