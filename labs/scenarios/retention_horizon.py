"""Lab 12: markers purged at the retention horizon, then a late replay."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from labs.lab import Session, delivered, described

INVENTORY = "inventory-reservation-v1"
HORIZON_SECONDS = 3


def run(lab: Session) -> None:
    panel = lab.panel
    lab.order_id = order = panel.place_order()
    lab.look = "/dead-letters"
    placed_at = datetime.now(UTC).replace(microsecond=0)
    lab.step(f"placed order {order}")
    applied = panel.wait_entry(order, "inventory applying", delivered(INVENTORY, "OrderPlaced", "applied"))
    panel.wait_status(order)
    lab.step(f"wait until its marker is older than a {HORIZON_SECONDS} s horizon")
    panel.wait(lambda: time.time() - float(applied["at"]) > HORIZON_SECONDS + 1, 30, "the marker to age")
    answer = panel.act("horizon", process="inventory", seconds=HORIZON_SECONDS, purge=True)
    lab.check(
        "shortening inventory's horizon purged its old markers", answer["purged"] >= 1, f"{answer['purged']} purged"
    )
    placed = panel.event_id(order, "OrderPlaced")
    lab.step(f"late replay: rewind inventory to {placed_at.isoformat()}")
    panel.act("rewind", process="inventory", to=placed_at.isoformat().replace("+00:00", "Z"))
    letters: list[dict[str, str]] = []

    def refused() -> bool:
        letters[:] = [d for d in panel.dead_letters() if d["message_id"] == placed and d["consumer"] == INVENTORY]
        return bool(letters)

    panel.wait(refused, 60, "the replayed OrderPlaced to be dead-lettered")
    lab.check(
        "the replay was refused, not applied: dead-lettered as older than the horizon",
        letters[0]["reason"] == "beyond_dedup_horizon",
        letters[0]["reason"],
    )
    entries = panel.timeline(order)
    applied_count = sum(1 for e in entries if delivered(INVENTORY, "OrderPlaced", "applied")(e))
    lab.check("inventory applied the order's OrderPlaced once", applied_count == 1, f"{applied_count} applied")
    anomalies = panel.anomalies(order)
    lab.check(
        "the auditor finds nothing wrong: the marker went by retention, not loss", not anomalies, described(anomalies)
    )
