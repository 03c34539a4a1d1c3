"""Lab 02: SELECT first, act, then insert the marker: two deliveries at once both act."""

from __future__ import annotations

from labs.lab import Session, described
from labs.scenarios.staging import named_by_auditor


def run(lab: Session) -> None:
    panel = lab.panel
    lab.step("switch inventory to the teaching strategy check_then_act")
    panel.act("strategy", process="inventory", strategy="check_then_act")
    lab.step("arm inventory: stall 1 s after the check, twice (a busy database widens the window)")
    panel.act("faults", process="inventory", point="after_check", action="stall", times=2, stall_seconds=1)
    answer = panel.act("storm", copies=20)
    lab.order_id = order = str(answer["order_id"])
    lab.look = "/"
    lab.step(f"duplicate storm: order {order}'s OrderPlaced sent 20 more times over every partition")
    doubled = named_by_auditor(lab, order, "inventory decides once per order", timeout=60)
    lab.check("the auditor names the order: inventory decided it twice", bool(doubled), described(doubled))
