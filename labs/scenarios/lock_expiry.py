"""Lab 18: a share group hands a record to one member and locks it there; the member's handler
stalls past the lock, the broker hands the record to another member, and the message is
processed twice at once. The marker makes the later one a duplicate."""

from __future__ import annotations

from labs.client import LabError
from labs.lab import Session, count, delivered, described, fault

PROCESS = "sales-projection"
PROJECTION = "sales-projection-v1"
EFFECT = "Sales projection row"
LONGEST_STALL = 120.0
"""The panel stalls a handler for two minutes at most."""


def stall_past(lock_seconds: float) -> float:
    """How long to stall a handler so that its record's lock expires and another member has time
    to receive the record and apply it before the stalled one goes on."""
    return lock_seconds + max(4.0, lock_seconds / 2)


def run(lab: Session) -> None:
    panel = lab.panel
    _, lock = panel.share_groups()
    stall = stall_past(lock)
    if stall > LONGEST_STALL:
        raise LabError(
            f"the share groups' record lock lasts {lock:g} s, longer than a handler can be stalled here: "
            "make down && make up SHARE_GROUPS=on SHARE_LOCK_SECONDS=5"
        )
    lab.step(f"arm {PROCESS}: stall {stall:g} s before it claims the marker, once (a record stays locked {lock:g} s)")
    panel.act("faults", process=PROCESS, point="before_claim", action="stall", times=1, stall_seconds=stall)
    lab.order_id = order = panel.place_order()
    lab.look = f"/orders/{order}"
    lab.step(f"placed order {order}: its PaymentAuthorized goes to one member of the share group, which stalls")
    panel.wait_entry(order, "the stall", fault(PROCESS, "before_claim"))
    lab.step(f"the lock expires after {lock:g} s and the broker hands the record to another member")
    panel.wait_entry(order, "the stalled member's duplicate", delivered(PROJECTION, "PaymentAuthorized", "duplicate"))
    entries = panel.timeline(order)
    applied = count(entries, delivered(PROJECTION, "PaymentAuthorized", "applied"))
    duplicates = count(entries, delivered(PROJECTION, "PaymentAuthorized", "duplicate"))
    lab.check(
        "two members processed the one record: one applied it, the other found the marker taken",
        (applied, duplicates) == (1, 1),
        f"{applied} applied, {duplicates} duplicate",
    )
    proof = panel.proof(order, EFFECT)
    lab.check(
        "the proof page shows one sales row, made once",
        proof["verdict"] == "once" and len(proof["rows"]) == 1,
        f"{len(proof['rows'])} row(s): {proof['sentence']}",
    )
    anomalies = panel.anomalies(order)
    lab.check("the auditor finds nothing wrong with the order", not anomalies, described(anomalies))
