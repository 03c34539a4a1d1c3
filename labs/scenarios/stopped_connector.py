"""Lab 15 (RELAY=debezium): the orders database's connector stops; its replication slot keeps the
log, so the orders placed meanwhile wait; it starts again and they go out, none lost or doubled."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from labs.lab import Session, count, delivered, described

DATABASE = "orders"
ORDERS = 20
INVENTORY = "inventory-reservation-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    lab.look = "/chaos#debezium"
    lab.step(f"pause the {DATABASE} database's connector")
    panel.act("connector", database=DATABASE, action="pause")
    panel.wait(lambda: panel.slots()[DATABASE]["connector"] == "PAUSED", 30, "the connector to pause")
    before = panel.slots()[DATABASE]["retained_bytes"]
    orders = [panel.place_order() for _ in range(ORDERS)]
    lab.order_id = orders[0]
    lab.step(f"placed {ORDERS} orders: their OrderPlaced rows are committed, and wait in the log")
    panel.wait(lambda: panel.slots()[DATABASE]["retained_bytes"] > before, 30, "the paused slot to keep more log")
    grown = panel.slots()[DATABASE]["retained_bytes"]
    lab.check("the paused connector's slot keeps more log", grown > before, f"{before:,} → {grown:,} bytes")
    waiting = [panel.status(order) for order in orders]
    lab.check("the orders wait at PLACED: nothing read their events", set(waiting) == {"PLACED"}, _tally(waiting))

    lab.step(f"resume the {DATABASE} database's connector: it reads on from the position its slot confirmed")
    panel.act("connector", database=DATABASE, action="resume")
    ended = [panel.wait_status(order, timeout=90) for order in orders]
    lab.check("every order was confirmed once the connector read on", set(ended) == {"CONFIRMED"}, _tally(ended))
    panel.wait(lambda: panel.slots()[DATABASE]["retained_bytes"] < grown, 60, "the slot to let go of the log it kept")
    after = panel.slots()[DATABASE]["retained_bytes"]
    lab.check("the slot let go of the log once its connector confirmed it", after < grown, f"{after:,} bytes")
    applied = [count(panel.timeline(order), delivered(INVENTORY, "OrderPlaced", "applied")) for order in orders]
    once = _tally(f"applied {n} time(s)" for n in applied)
    lab.check("each OrderPlaced was applied once by inventory", applied == [1] * ORDERS, once)
    anomalies = [anomaly for order in orders for anomaly in panel.anomalies(order)]
    lab.check("the auditor finds nothing lost or doubled", not anomalies, described(anomalies))


def _tally(values: Iterable[object]) -> str:
    """How many of each: `PLACED × 20`."""
    return ", ".join(f"{value} × {n}" for value, n in Counter(values).items())
