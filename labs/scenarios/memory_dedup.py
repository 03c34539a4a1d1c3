"""Lab 06: message ids remembered in memory only: a restart forgets them."""

from __future__ import annotations

from labs.lab import Session, count, delivered, described
from labs.scenarios.staging import crash_under, named_by_auditor

INVENTORY = "inventory-reservation-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    order = crash_under(
        lab,
        "inventory",
        "after_commit_before_ack",
        "memory_dedup_only",
        "inventory applies it, remembers its id in memory, and dies before the ack",
    )
    panel.wait_entry(order, "the redelivery applied again", delivered(INVENTORY, "OrderPlaced", "applied"))
    panel.wait_status(order)
    doubled = named_by_auditor(lab, order, "inventory decides once per order")
    entries = panel.timeline(order)
    lab.check(
        "the restarted process remembered nothing: the redelivery was applied, not a duplicate",
        count(entries, delivered(INVENTORY, "OrderPlaced", "duplicate")) == 0,
    )
    lab.check("the auditor names the order: inventory decided it twice", bool(doubled), described(doubled))
