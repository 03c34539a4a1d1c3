"""Lab 08: SQLSTATE 40001 at commit: the whole transaction is retried, claim included."""

from __future__ import annotations

from labs.lab import Session, delivered, described

PAYMENT = "payment-authorization-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    lab.step("force payment's next 3 commits to fail with a serialization failure (SQLSTATE 40001)")
    panel.act("serialization-failures", process="payment", times=3)
    lab.order_id = order = panel.place_order()
    lab.look = f"/orders/{order}"
    lab.step(f"placed order {order}")
    panel.wait_entry(order, "payment applying", delivered(PAYMENT, "InventoryReserved", "applied"))
    entries = [e for e in panel.timeline(order) if e["actor"] == PAYMENT]
    attempts = [(e["kind"], e["detail"]) for e in entries]
    where = str(attempts[0][1]).split("; ")[0] if attempts else ""  # topic/partition @ offset
    retried = bool(where) and attempts[:3] == [("retryable_failure", f"{where}; SerializationFailure")] * 3
    lab.check("three attempts rolled back whole, each the same delivery (same offset)", retried, str(attempts[:4]))
    lab.check(
        "the fourth attempt applied it, once",
        [k for k, _ in attempts].count("applied") == 1 and len({e["message_id"] for e in entries}) == 1,
    )
    status = panel.wait_status(order)
    lab.check("the order was confirmed", status == "CONFIRMED", status)
    anomalies = panel.anomalies(order)
    lab.check("the auditor finds nothing wrong with the order", not anomalies, described(anomalies))
