"""Steps several labs share: a teaching strategy with a crash at one point, and waiting for the
auditor to name an order."""

from __future__ import annotations

from labs.lab import Session, fault


def crash_under(lab: Session, process: str, point: str, strategy: str | None, story: str) -> str:
    """Switch `process` to `strategy` (None: leave it correct), arm one crash at `point`, place an
    order, and wait for the crash and the supervisor's restart; returns the order id."""
    panel = lab.panel
    restarts = panel.processes()[process]["restarts"]
    if strategy:
        lab.step(f"switch {process} to {strategy}")
        panel.act("strategy", process=process, strategy=strategy)
    lab.step(f"arm {process}: crash at {point}, once")
    panel.act("faults", process=process, point=point, action="crash", times=1)
    lab.order_id = order = panel.place_order()
    lab.look = f"/orders/{order}"
    lab.step(f"placed order {order}; {story}")
    panel.wait_entry(order, "the crash", fault(process, point))
    panel.wait_restarted(process, restarts)
    return order


def named_by_auditor(
    lab: Session, order: str, invariant: str, stuck_after: float | None = None, timeout: float = 30
) -> list[dict[str, str]]:
    """Wait until the auditor names `order` under an invariant containing `invariant`; returns the
    anomalies (the LabError on timeout says what was awaited)."""
    found: list[dict[str, str]] = []

    def named() -> bool:
        found[:] = [a for a in lab.panel.anomalies(order, stuck_after) if invariant in a["invariant"]]
        return bool(found)

    patience = f" ({stuck_after:g} s patience)" if stuck_after else ""
    lab.panel.wait(named, timeout, f"the auditor{patience} to name order {order} under {invariant!r}")
    return found
