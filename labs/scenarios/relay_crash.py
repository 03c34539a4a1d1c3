"""Lab 09: the relay dies after the broker confirmed, before it marked the row published."""

from __future__ import annotations

from labs.lab import Session, delivered, described

INVENTORY = "inventory-reservation-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    restarts = panel.processes()["outbox-relay"]["restarts"]
    lab.step("arm outbox-relay: crash at relay.after_publish_before_mark, once")
    panel.act("faults", process="outbox-relay", point="relay.after_publish_before_mark", action="crash", times=1)
    lab.order_id = order = panel.place_order()
    lab.look = f"/orders/{order}"
    lab.step(f"placed order {order}; the relay publishes its OrderPlaced and dies before marking it")
    panel.wait_restarted("outbox-relay", restarts)
    now = panel.processes()["outbox-relay"]["restarts"]
    lab.check("the supervisor restarted the relay", now > restarts, f"restarts {restarts} → {now}")
    panel.wait_entry(
        order, "the republished copy counted a duplicate", delivered(INVENTORY, "OrderPlaced", "duplicate")
    )
    status = panel.wait_status(order)
    entries = panel.timeline(order)
    placed = panel.event_id(order, "OrderPlaced")
    copies = [e for e in entries if e["message_id"] == placed and e["actor"] == INVENTORY]
    lab.check(
        "the same message id arrived twice: applied, then a duplicate",
        [e["kind"] for e in copies] == ["applied", "duplicate"],
        str([e["kind"] for e in copies]),
    )
    lab.check("the order was confirmed", status == "CONFIRMED", status)
    anomalies = panel.anomalies(order)
    lab.check("the auditor finds nothing wrong with the order", not anomalies, described(anomalies))
