"""Lab 03: the marker committed in its own transaction first; a crash before the change loses it."""

from __future__ import annotations

from labs.lab import Session, count, delivered, described
from labs.scenarios.staging import crash_under, named_by_auditor

INVENTORY = "inventory-reservation-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    order = crash_under(
        lab, "inventory", "between_transactions", "marker_before_in_separate_txn", "its marker commits, then the crash"
    )
    panel.stuck.add(order)
    panel.wait_entry(order, "the redelivery", delivered(INVENTORY, "OrderPlaced", "duplicate"))
    entries = panel.timeline(order)
    lab.check(
        "the redelivery found the marker and did nothing",
        count(entries, delivered(INVENTORY, "OrderPlaced", "applied")) == 0,
        "0 applied, 1 duplicate",
    )
    status = panel.status(order)
    lab.check("the order never got its reservation: it is stuck", status == "PLACED", status)
    lost = named_by_auditor(lab, order, f"{INVENTORY}: every marker has its effect")
    lab.check(
        "the auditor names it: marker committed, business effect missing",
        any("business effect missing" in a["evidence"] for a in lost),
        described(lost),
    )
