"""Lab 17: the primary dies, and an asynchronous standby takes back work Kafka had acknowledged.

Staged so that it loses work on every run: inventory holds its OrderPlaced events back while the
orders are placed (so their rows reach the standby), the standby is detached (its WAL receiver
stopped), inventory is let go, and every order runs to its end on the primary alone, each
consumer acknowledging after its commit. Then the primary is SIGKILLed and the standby promoted:
the orders are back where the standby last saw them, and Kafka's groups are past their events.
Rewinding every consumer to before the first lost message brings each order to its end once.
Beside it, the same staging with a synchronous standby loses nothing: the commits wait for the
standby, which never acknowledges them, and nothing is acknowledged to Kafka until after the
failover, on the new primary.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

from labs.client import FINAL, LabError, PanelClient
from labs.lab import Session, described

INVENTORY = "inventory-reservation-v1"
ORDERS = 3
HOLD_SECONDS = 15
REWIND_MARGIN = timedelta(seconds=30)
# How long the standby may take to stream and replay everything: after the first half's failover
# the old primary is being rebuilt as the new one's standby, which took 75 s on a busy machine.
STANDBY_READY_SECONDS = 180


def _caught_up(panel: PanelClient, synchronous: bool) -> bool:
    """The standby streams and has replayed everything; synchronous, it confirms the commits too."""
    primary = next((n for n in panel.databases()["nodes"] if n["role"] == "primary"), None)
    if primary is None or primary["behind_bytes"] != 0:
        return False
    return bool(primary["synchronous_standby"]) == synchronous


def _pair(panel: PanelClient) -> str:
    """Each node as `make db` shows it: role, replication, commits waiting for the standby."""
    try:
        nodes = panel.databases()["nodes"]
    except LabError as error:
        return str(error)
    return "; ".join(
        f"node {n['node']} {n['role']} ({n['replication'] or 'no replication'}, {n['waiting_commits']} waiting)"
        for n in nodes
    )


def _hold_inventory(panel: PanelClient, seconds: float) -> None:
    """Hold orders.events back in every process of inventory's group (each replica), or let go (0)."""
    members = [name for name, state in panel.processes().items() if state.get("consumer") == INVENTORY]
    if not members:
        raise LabError(f"no process of {INVENTORY} answers")
    for member in members:
        panel.act("hold", process=member, topic="orders.events", seconds=seconds)


def _stage(lab: Session, synchronous: bool) -> list[str]:
    """Orders whose rows the standby has and whose later work happens with the standby detached."""
    panel = lab.panel
    panel.act("databases/sync", mode="on" if synchronous else "off")
    mode = "synchronous" if synchronous else "asynchronous"
    panel.wait(
        lambda: _caught_up(panel, synchronous),
        STANDBY_READY_SECONDS,
        f"the standby to stream, {mode}, and replay everything",
    )
    _hold_inventory(panel, HOLD_SECONDS)
    try:
        orders = [panel.place_order() for _ in range(ORDERS)]
    except LabError as error:
        raise LabError(f"{error}; the pair then: {_pair(panel)}") from None
    panel.wait(lambda: _caught_up(panel, synchronous), 10, "the standby to replay the new orders")
    panel.act("databases/detach-standby")
    lab.step(
        f"{'synchronous' if synchronous else 'asynchronous'} standby: placed {', '.join(orders)} while inventory "
        "held them back; the standby has them, and is now detached"
    )
    _hold_inventory(panel, 0)
    return orders


def _failover(lab: Session) -> None:
    lab.step(str(lab.panel.act("databases/failover")["message"]))


def _asynchronous(lab: Session) -> None:
    panel = lab.panel
    orders = _stage(lab, synchronous=False)
    lab.order_id = orders[0]
    lab.look = f"/orders/{orders[0]}"
    before = [panel.wait_status(order, timeout=60) for order in orders]
    lab.check("every order reached its end on the primary alone", all(s in FINAL for s in before), ", ".join(before))
    _failover(lab)
    after = [panel.status(order) for order in orders]
    lab.check(
        "after the failover the orders are back where the standby last saw them",
        all(status not in FINAL for status in after),
        ", ".join(after),
    )
    side = panel.kafka_side()
    ours = [entry for entry in side["lost"] if entry["order_id"] in orders]
    lab.check(
        "Kafka's groups acknowledged work the databases no longer have: the auditor names each order lost",
        {entry["order_id"] for entry in ours} == set(orders),
        f"{len(ours)} acknowledged message(s) of these orders without their marker, "
        f"{sum(p['order_id'] in orders for p in side['phantoms'])} phantom event(s)",
    )
    if not ours:
        raise LabError("nothing of these orders was lost: the staging did not hold (was the standby detached?)")
    earliest = min(datetime.fromisoformat(entry["at"]) for entry in ours)
    to = (earliest - REWIND_MARGIN).isoformat()
    lab.step(f"rewind every consumer to {to}, {REWIND_MARGIN.seconds} s before the first lost message")
    panel.act("rewind-all", to=to)
    ended = [panel.wait_status(order, timeout=90) for order in orders]
    lab.check("after the rewind every lost order reached its end", all(s in FINAL for s in ended), ", ".join(ended))
    duplicates = sum(1 for order in orders for entry in panel.timeline(order) if entry["kind"] == "duplicate")
    lab.check(
        "what survived the failover came back as duplicates, absorbed by the markers",
        duplicates > 0,
        f"{duplicates} duplicate(s)",
    )

    def left() -> list[dict[str, str]]:
        side = panel.kafka_side()
        return [entry for entry in side["lost"] + side["phantoms"] if entry["order_id"] in orders]

    with contextlib.suppress(LabError):  # the check below says what is left
        panel.wait(lambda: not left(), 60, "the Kafka side of these orders to be clean")
    remaining = left()
    lab.check(
        "nothing acknowledged is lost any more, and every phantom was superseded by the fact decided again",
        not remaining,
        ", ".join(f"{entry['event_type']} of {entry['order_id']}" for entry in remaining) or "none left",
    )
    anomalies = [a for a in panel.audit()["anomalies"] if a["subject"] in orders]
    lab.check("each was applied once: the auditor finds nothing lost or doubled", not anomalies, described(anomalies))


def _synchronous(lab: Session) -> None:
    panel = lab.panel
    orders = _stage(lab, synchronous=True)

    def waiting_commits() -> int:
        return sum(int(node["waiting_commits"]) for node in panel.databases()["nodes"] if node["role"] == "primary")

    panel.wait(lambda: waiting_commits() > 0, 30, "inventory's commit to wait for the standby")
    statuses = [panel.status(order) for order in orders]
    lab.check(
        "with the standby away, a synchronous commit waits: no order goes on",
        all(status not in FINAL for status in statuses),
        f"{', '.join(statuses)}; {waiting_commits()} commit(s) waiting for the standby",
    )
    _failover(lab)
    ended = [panel.wait_status(order, timeout=90) for order in orders]
    lab.check(
        "after the failover every order reached its end, with no rewind",
        all(s in FINAL for s in ended),
        ", ".join(ended),
    )
    lost = {entry["order_id"] for entry in panel.kafka_side()["lost"]} & set(orders)
    lab.check("nothing acknowledged was lost", not lost, ", ".join(sorted(lost)) or "none")
    anomalies = [a for a in panel.audit()["anomalies"] if a["subject"] in orders]
    lab.check("the auditor finds nothing lost or doubled", not anomalies, described(anomalies))


def run(lab: Session) -> None:
    panel = lab.panel
    try:
        nodes = panel.databases()["nodes"]
    except LabError as error:
        raise LabError(f"this lab needs a primary and a standby: make down && make up POSTGRES=ha ({error})") from None
    roles = sorted(node["role"] for node in nodes)
    lab.check("the panel shows a primary and a standby", roles == ["primary", "standby"], ", ".join(roles))
    try:
        _asynchronous(lab)
        _synchronous(lab)
    finally:
        panel.act("databases/sync", mode="on")
