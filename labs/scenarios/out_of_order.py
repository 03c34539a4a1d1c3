"""Lab 11: one order's events arrive in another order than they were written."""

from __future__ import annotations

from labs.lab import Session, delivered, described

SAGA = "orders-saga-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    lab.step("orders-saga: hold orders.events back for up to 120 s (its other topics flow)")
    panel.act("hold", process="orders-saga", topic="orders.events", seconds=120)
    lab.order_id = order = panel.place_order()
    lab.look = f"/orders/{order}"
    lab.step(f"placed order {order}; the saga hears of its reservation, payment and email before its placement")
    status = panel.wait_status(order)
    entries = panel.timeline(order)
    lab.check(
        "the order was confirmed without OrderPlaced reaching the saga",
        status == "CONFIRMED" and not any(delivered(SAGA, "OrderPlaced", "applied")(e) for e in entries),
        status,
    )
    lab.step("release orders.events: the late OrderPlaced arrives last")
    panel.act("hold", process="orders-saga", topic="orders.events", seconds=0)
    panel.wait_entry(order, "the late OrderPlaced", delivered(SAGA, "OrderPlaced", "applied"))
    saga = [
        str(e["text"]).split(":")[0] for e in panel.timeline(order) if e["actor"] == SAGA and e["kind"] == "applied"
    ]
    lab.check("the saga applied OrderPlaced after every later event", saga[-1:] == ["OrderPlaced"], " → ".join(saga))
    status = panel.status(order)
    lab.check("the order did not move backwards: still CONFIRMED", status == "CONFIRMED", status)
    anomalies = panel.anomalies(order)
    lab.check("the auditor finds nothing wrong with the order", not anomalies, described(anomalies))
