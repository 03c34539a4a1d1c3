"""Lab 13: a poison message, and a failed message re-driven from the dead letters with its id."""

from __future__ import annotations

from labs.lab import Session, count, delivered, described

PAYMENT = "payment-authorization-v1"


def run(lab: Session) -> None:
    panel = lab.panel
    lab.step("send a poison message (not JSON) to orders.events")
    key = str(panel.act("poison", kind="not_json", topic="orders.events")["key"])
    poisoned: list[dict[str, str]] = []

    def both_dead_lettered() -> bool:
        poisoned[:] = [d for d in panel.dead_letters() if d["key"] == key]
        return len(poisoned) == 2

    panel.wait(both_dead_lettered, 60, "both consumers of orders.events to dead-letter it")
    lab.check(
        "each consumer of the topic dead-lettered it with its reason, and went on",
        {d["reason"] for d in poisoned} == {"undecodable"},
        ", ".join(f"{d['consumer']}: {d['reason']}" for d in poisoned),
    )
    lab.step("arm payment: raise after the claim, every time (a bug in the handler)")
    panel.act("faults", process="payment", point="after_claim", action="raise", times="always")
    lab.order_id = order = panel.place_order()
    lab.look = f"/orders/{order}"
    lab.step(f"placed order {order}; payment fails it three times, then dead-letters it")
    reserved = panel.wait_entry(order, "the dead letter", delivered(PAYMENT, "InventoryReserved", "terminal_failure"))
    message_id = str(reserved["message_id"])
    letter = next((d for d in panel.dead_letters() if d["message_id"] == message_id), None)
    lab.check(
        "the failed message waits on the dead-letter topic with its original id and reason",
        letter is not None and letter["reason"] == "handler_failed",
        f"{letter['reason']} {letter['error_class']}" if letter else "not found",
    )
    if letter is None:
        return
    lab.step("fix the cause (disarm), then re-drive the dead letter")
    panel.act("faults/disarm", process="payment")
    panel.act("redrive", location=letter["location"])
    panel.wait_entry(order, "the re-driven message applied", delivered(PAYMENT, "InventoryReserved", "applied"))
    status = panel.wait_status(order)
    lab.check("the re-drive was applied and the order confirmed", status == "CONFIRMED", status)
    lab.step("re-drive it once more, as a second operator might")
    panel.act("redrive", location=letter["location"])
    panel.wait_entry(order, "the second re-drive", delivered(PAYMENT, "InventoryReserved", "duplicate"))
    entries = panel.timeline(order)
    lab.check(
        "the second re-drive carried the same id and was counted a duplicate",
        count(entries, delivered(PAYMENT, "InventoryReserved", "applied")) == 1,
    )
    anomalies = panel.anomalies(order)
    lab.check("the auditor finds nothing wrong with the order", not anomalies, described(anomalies))
