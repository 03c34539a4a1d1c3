"""Lab 14: the Kafka node leading a partition dies under load."""

from __future__ import annotations

from labs.lab import Session, described

PARTITION = "orders.events/0"
ORDERS_DURING = 5


def run(lab: Session) -> None:
    panel = lab.panel
    nodes = panel.brokers()
    leader = next((n for n in nodes if PARTITION in n["leads"]), None)
    lab.check("the panel shows who leads each partition", leader is not None, f"{len(nodes)} node(s)")
    if leader is None:
        return
    before = panel.place_order()
    panel.wait_status(before)
    lab.step(f"{len(nodes)} Kafka node(s); {leader['process']} leads {PARTITION}. Kill it.")
    killed = panel.act("brokers/kill-leader", partition=PARTITION)["message"]
    orders = [panel.place_order() for _ in range(ORDERS_DURING)]
    lab.order_id = orders[0]
    lab.look = f"/orders/{orders[0]}"
    lab.step(f"placed {ORDERS_DURING} orders while it was away: {', '.join(orders)}")

    def back() -> bool:
        node = next(n for n in panel.brokers() if n["process"] == leader["process"])
        return bool(node["state"] == "RUNNING" and node["leads"])

    panel.wait(back, 120, f"{leader['process']} to be started again and lead partitions")
    lab.check("the node was killed and its supervisor started it again", "SIGKILL" in killed, killed)
    statuses = [panel.wait_status(order, timeout=120) for order in orders]
    lab.check(
        "every order placed while the node was away reached a final status",
        all(status in ("CONFIRMED", "REJECTED", "CANCELLED") for status in statuses),
        ", ".join(statuses),
    )
    anomalies = [a for a in panel.audit()["anomalies"] if a["subject"] in {before, *orders}]
    lab.check("the auditor finds nothing lost or doubled for any of them", not anomalies, described(anomalies))
