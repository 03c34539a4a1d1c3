"""Lab 05: the offset acknowledged before the transaction: a crash in between loses the message."""

from __future__ import annotations

from labs.lab import Session, count, described
from labs.scenarios.staging import crash_under, named_by_auditor

INVENTORY = "inventory-reservation-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    order = crash_under(
        lab,
        "inventory",
        "before_commit",
        "ack_before_commit",
        "its offset is committed, then inventory dies before its commit",
    )
    panel.stuck.add(order)
    lab.step("inventory is back; a second order proves it consumes again")
    probe = panel.place_order()
    probe_status = panel.wait_status(probe)
    lab.check("inventory consumes again: the next order went through", probe_status == "CONFIRMED", probe_status)
    deliveries = count(panel.timeline(order), lambda e: e["actor"] == INVENTORY)
    lab.check(
        "Kafka never delivered the first order's OrderPlaced again",
        deliveries == 0,
        f"{deliveries} deliveries after the crash",
    )
    status = panel.status(order)
    lab.check("the first order is lost: stuck without a reservation", status == "PLACED", status)
    stuck = named_by_auditor(lab, order, "no saga stuck", stuck_after=3)
    lab.check("the auditor names it as stuck", bool(stuck), described(stuck))
