"""Lab 10: the payment provider charges, then the answer never arrives."""

from __future__ import annotations

from labs.lab import Session, described


def run(lab: Session) -> None:
    panel = lab.panel
    lab.step("payment provider: time out after the next charge (the charge is made, the answer lost)")
    panel.act("sandbox-faults", sandbox="payment-provider", timeout_after_charge=1, timeout_seconds=4)
    lab.order_id = order = panel.place_order()
    lab.look = f"/orders/{order}"
    lab.step(f"placed order {order}; the executor's call times out and is retried with the same Idempotency-Key")
    status = panel.wait_status(order, timeout=90)
    left = panel.sandbox_faults("payment-provider")["timeout_after_charge"]
    lab.check("the provider charged and let the answer time out", left == 0, f"{left} timeout(s) left to fire")
    # The timeline is told through Kafka, a moment behind the database: wait for the last call.
    panel.wait_entry(order, "the replayed answer", lambda e: e["kind"] == "remote_call" and "replayed" in e["text"])
    calls = [e for e in panel.timeline(order) if e["kind"] == "remote_call" and "payment provider" in e["text"]]
    results = [str(e["text"]).split(": ", 1)[-1] for e in calls]
    lab.check(
        "the executor's call timed out, and the retry with the same key got the stored answer replayed",
        len(calls) >= 2
        and "Timeout" in results[0]
        and results[-1] == "HTTP 200, replayed"
        and len({e["detail"] for e in calls}) == 1,
        " → ".join(results),
    )
    lab.check("the order was confirmed", status == "CONFIRMED", status)
    anomalies = panel.anomalies(order)
    lab.check(
        "the provider's ledger holds one charge for it (the retry was replayed, not charged again)",
        not [a for a in anomalies if "charge" in a["invariant"]],
        described(anomalies),
    )
    lab.check("the auditor finds nothing wrong with the order", not anomalies, described(anomalies))
