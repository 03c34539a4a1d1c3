"""Lab 07: the message id alone as the marker's key: one consumer's marker silences another."""

from __future__ import annotations

from labs.lab import Session, delivered, described
from labs.scenarios.staging import named_by_auditor

CONSUMERS = ("notification-dispatch-v1", "sales-projection-v1")


def run(lab: Session) -> None:
    panel = lab.panel
    lab.step("switch notification and sales-projection (one database) to message_id_only_key")
    panel.act("strategy", process="notification", strategy="message_id_only_key")
    panel.act("strategy", process="sales-projection", strategy="message_id_only_key")
    lab.order_id = order = panel.place_order()
    panel.stuck.add(order)
    lab.look = f"/orders/{order}"
    lab.step(f"placed order {order}; both consumers receive its PaymentAuthorized")

    def both_decided() -> bool:
        entries = panel.timeline(order)
        return all(
            any(delivered(c, "PaymentAuthorized", o)(e) for e in entries for o in ("applied", "duplicate"))
            for c in CONSUMERS
        )

    panel.wait(both_decided, 60, "both consumers to take PaymentAuthorized")
    entries = panel.timeline(order)
    outcomes = {
        c: [e["kind"] for e in entries if e["actor"] == c and str(e["text"]).startswith("PaymentAuthorized:")]
        for c in CONSUMERS
    }
    silenced = [c for c, kinds in outcomes.items() if "applied" not in kinds]
    lab.check(
        "one consumer found the other's marker and skipped work it never did",
        len(silenced) == 1 and outcomes[silenced[0]][:1] == ["duplicate"],
        str(outcomes),
    )
    lost = named_by_auditor(lab, order, "every event reaches its effect", stuck_after=3)
    lab.check("the auditor names the effect that never happened", bool(lost), described(lost))
