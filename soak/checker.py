"""An independent checker of a soak's history (soak/history.py): it reads only the history's lines
and shares no code with the auditor, so the two are two readings of one run that must agree.

It names five kinds of anomaly, each with the order and the history lines that prove it:

- **lost**: an accepted order that never ended; an event left in its outbox; an event with no
  reaction downstream (an OrderPlaced that inventory never decided, an InventoryReserved that
  payment never decided, a PaymentAuthorized with no notification or no projection row); a
  consumer's marker without its effect (the claim committed, the change it stands for absent); a
  record a consumer group acknowledged (its committed offset is past it) with no claim of it by
  that consumer and no dead letter: the databases lost it after Kafka was told (a failover to an
  asynchronous standby);
- **duplicated**: a reaction or an effect that happened more than once for one order (decisions,
  releases, charges, emails, notifications, projection rows), and a business fact announced twice
  (two events of one type for one order from one service);
- **out of order**: a consumer that claimed two events of one order from one outbox (one topic,
  so one partition) in the opposite order to the one they were written in. Events of one order
  from different services travel on different topics, which Kafka does not order between them:
  the saga tolerates those arriving either way, so they are not compared;
- **missing compensation**: a PaymentFailed with no InventoryReleased for its order, or a
  rejected or cancelled order that was charged or mailed;
- **phantom**: an event record in Kafka whose outbox no longer holds it, nor another event of its
  type for its order: a fact told to the world that the service that decided it does not have.

`python -m soak.checker artifacts/soak/history.jsonl` prints them and exits 1 if there is any.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

LOST = "lost"
DUPLICATED = "duplicated"
OUT_OF_ORDER = "out of order"
MISSING_COMPENSATION = "missing compensation"
PHANTOM = "phantom"

TERMINAL = {"CONFIRMED", "REJECTED", "CANCELLED"}

REACTIONS = (
    # (the event, what must follow it once for the same order, who reacts)
    ("OrderPlaced", ("InventoryReserved", "InventoryReservationFailed"), "inventory's decision"),
    ("InventoryReserved", ("PaymentAuthorized", "PaymentFailed"), "payment's decision"),
)
ONCE_PER_ORDER_LEDGERS = ("charge", "email", "notification", "projection", "decision")
MARKED_EFFECTS = {
    # (consumer, the event its marker is for) -> the ledger its effect must be in, for that order
    ("inventory-reservation-v1", "OrderPlaced"): "decision",
    ("payment-authorization-v1", "InventoryReserved"): "payment",
    ("notification-dispatch-v1", "PaymentAuthorized"): "notification",
    ("sales-projection-v1", "PaymentAuthorized"): "projection",
}
SAGA = "orders-saga-v1"
"""Its effect of any event: a line of the order's history for that event type."""
APPLIES = {
    SAGA: None,  # every type of the four topics
    "inventory-reservation-v1": {"OrderPlaced", "PaymentFailed", "PaymentAuthorized"},
    "payment-authorization-v1": {"InventoryReserved"},
    "notification-dispatch-v1": {"PaymentAuthorized"},
    "sales-projection-v1": {"PaymentAuthorized"},
}
"""Consumer -> the event types it applies under a marker (None: all it reads); the rest it ignores."""
READS = {
    SAGA: {"orders.events", "inventory.events", "payment.events", "notification.events"},
    "inventory-reservation-v1": {"orders.events", "payment.events"},
    "payment-authorization-v1": {"inventory.events"},
    "notification-dispatch-v1": {"payment.events"},
    "sales-projection-v1": {"payment.events"},
}
WRITES = {"orders.events": "orders", "inventory.events": "inventory", "payment.events": "payment"}
WRITES["notification.events"] = "notification"
"""Topic -> the service whose outbox its events come from."""


@dataclass(frozen=True)
class Anomaly:
    kind: str
    order_id: str
    reason: str
    lines: tuple[int, ...]
    """1-based line numbers of the history lines that prove it."""

    def describe(self) -> str:
        return f"{self.kind}: {self.order_id}: {self.reason} (history lines {', '.join(map(str, self.lines))})"


@dataclass
class Findings:
    orders: int = 0
    events: int = 0
    anomalies: list[Anomaly] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.anomalies

    def of_kind(self, kind: str) -> list[Anomaly]:
        return [anomaly for anomaly in self.anomalies if anomaly.kind == kind]


@dataclass
class _Read:
    """The history, indexed: each record with its line number."""

    accepted: dict[str, int] = field(default_factory=dict)
    events: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    events_of: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    """(order, event type) -> lines."""
    claims: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    published: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    acknowledged: dict[tuple[str, str, int], tuple[int, int]] = field(default_factory=dict)
    """(consumer, topic, partition) -> (line, committed offset)."""
    dead_letters: set[tuple[str, str]] = field(default_factory=set)
    effects: dict[tuple[str, str], list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    """(ledger, order) -> (line, status)."""


def _index(records: Iterable[dict[str, Any]]) -> _Read:
    read = _Read()
    for number, record in enumerate(records, start=1):
        kind = record.get("type")
        if kind == "request" and record.get("answer") == "ok":
            read.accepted[record["order_id"]] = number
        elif kind == "event":
            read.events[record["message_id"]] = (number, record)
            read.events_of[(record["key"], record["event_type"])].append(number)
        elif kind == "claim":
            read.claims.append((number, record))
        elif kind == "effect":
            read.effects[(record["ledger"], record["order_id"])].append((number, str(record.get("status"))))
        elif kind == "published":
            read.published.append((number, record))
        elif kind == "acknowledged":
            read.acknowledged[(record["consumer"], record["topic"], record["partition"])] = (number, record["offset"])
        elif kind == "dead_letter":
            read.dead_letters.add((record["consumer"], record["message_id"]))
    return read


def _lost_orders(read: _Read, found: list[Anomaly]) -> None:
    for order_id, line in read.accepted.items():
        status = read.effects.get(("order", order_id), [])
        if not status:
            found.append(Anomaly(LOST, order_id, "accepted, and no such order in the orders ledger", (line,)))
        elif status[0][1] not in TERMINAL:
            found.append(Anomaly(LOST, order_id, f"accepted, and still {status[0][1]}", (line, status[0][0])))


def _events_left_behind(read: _Read, found: list[Anomaly]) -> None:
    for line, event in read.events.values():
        if not event["published"]:
            found.append(
                Anomaly(LOST, event["key"], f"{event['event_type']} never left the {event['service']} outbox", (line,))
            )


def _reactions(read: _Read, found: list[Anomaly]) -> None:
    for cause, answers, who in REACTIONS:
        for (order_id, event_type), causes in list(read.events_of.items()):
            if event_type != cause:
                continue
            reacted = sorted(line for answer in answers for line in read.events_of.get((order_id, answer), []))
            if not reacted:
                found.append(Anomaly(LOST, order_id, f"{cause} and no {who}", tuple(causes)))
            elif len(reacted) > 1:
                found.append(Anomaly(DUPLICATED, order_id, f"{len(reacted)} of {who} for one {cause}", tuple(reacted)))
    for (order_id, event_type), lines in list(read.events_of.items()):
        if event_type == "PaymentAuthorized":
            for ledger in ("notification", "projection"):
                if not read.effects.get((ledger, order_id)):
                    found.append(Anomaly(LOST, order_id, f"PaymentAuthorized and no {ledger} row", tuple(lines)))
        if len(lines) > 1:
            found.append(
                Anomaly(DUPLICATED, order_id, f"{event_type} announced {len(lines)} times (one fact)", tuple(lines))
            )


def _markers_with_their_effects(read: _Read, found: list[Anomaly]) -> None:
    """A claim commits with its effect: a marker whose effect is absent lost the change."""
    for line, claim in read.claims:
        known = read.events.get(claim["message_id"])
        if known is None:
            continue
        event_line, event = known
        consumer, order_id, event_type = claim["consumer"], event["key"], event["event_type"]
        if consumer == SAGA:
            recorded = [n for n, status in read.effects.get(("history", order_id), []) if status == event_type]
            ledger = "history"
        elif (ledger := MARKED_EFFECTS.get((consumer, event_type), "")) != "":
            recorded = [n for n, _ in read.effects.get((ledger, order_id), [])]
        else:
            continue
        if not recorded:
            reason = f"{consumer}'s marker for {event_type} committed, and no {ledger} row for the order"
            found.append(Anomaly(LOST, order_id, reason, (line, event_line)))


def _ledgers_once(read: _Read, found: list[Anomaly]) -> None:
    for (ledger, order_id), rows in read.effects.items():
        if ledger in ONCE_PER_ORDER_LEDGERS and len(rows) > 1:
            found.append(
                Anomaly(DUPLICATED, order_id, f"{len(rows)} rows in the {ledger} ledger", tuple(n for n, _ in rows))
            )


def _order_of_claims(read: _Read, found: list[Anomaly]) -> None:
    """Per consumer, order and outbox: claims sorted by when they happened follow the writing order."""
    claimed: dict[tuple[str, str, str], list[tuple[str, str, int, int]]] = defaultdict(list)
    for line, claim in read.claims:
        known = read.events.get(claim["message_id"])
        if known is None:  # an event of a run whose outbox rows were purged: nothing to compare
            continue
        event_line, event = known
        claimed[(claim["consumer"], event["key"], event["service"])].append(
            (claim["at"], event["created_at"], line, event_line)
        )
    for (consumer, order_id, _), claims in claimed.items():
        claims.sort()
        for (_, written_before, line_a, event_a), (_, written_after, line_b, event_b) in pairwise(claims):
            if written_after < written_before:
                found.append(
                    Anomaly(
                        OUT_OF_ORDER,
                        order_id,
                        f"{consumer} claimed an event before one written earlier",
                        (line_a, event_a, line_b, event_b),
                    )
                )


def _compensations(read: _Read, found: list[Anomaly]) -> None:
    for (order_id, event_type), lines in list(read.events_of.items()):
        if event_type == "PaymentFailed" and not read.events_of.get((order_id, "InventoryReleased")):
            found.append(
                Anomaly(MISSING_COMPENSATION, order_id, "PaymentFailed and no InventoryReleased", tuple(lines))
            )
    for (ledger, order_id), status in list(read.effects.items()):
        if ledger != "order" or status[0][1] not in ("REJECTED", "CANCELLED"):
            continue
        for effect in ("charge", "email"):
            rows = read.effects.get((effect, order_id), [])
            if rows:
                proof = (status[0][0], *(n for n, _ in rows))
                found.append(Anomaly(MISSING_COMPENSATION, order_id, f"{status[0][1]} and yet a {effect}", proof))


def _acknowledged_without_claim(read: _Read, found: list[Anomaly]) -> None:
    claimed = {(claim["consumer"], claim["message_id"]) for _, claim in read.claims}
    for line, record in read.published:
        for consumer, topics in READS.items():
            types = APPLIES[consumer]
            if record["topic"] not in topics or (types is not None and record["event_type"] not in types):
                continue
            committed = read.acknowledged.get((consumer, record["topic"], record["partition"]))
            if committed is None or record["offset"] >= committed[1]:
                continue
            if (consumer, record["message_id"]) in claimed | read.dead_letters:
                continue
            reason = f"{consumer} acknowledged {record['event_type']} {record['message_id']} and has no claim of it"
            found.append(Anomaly(LOST, record["key"], reason, (line, committed[0])))


def _phantoms(read: _Read, found: list[Anomaly]) -> None:
    for line, record in read.published:
        if record["message_id"] in read.events or (record["key"], record["event_type"]) in read.events_of:
            continue
        service = WRITES.get(record["topic"], "?")
        reason = f"{record['event_type']} {record['message_id']} is in Kafka and not in the {service} outbox"
        found.append(Anomaly(PHANTOM, record["key"], reason, (line,)))


def check(records: Iterable[dict[str, Any]]) -> Findings:
    read = _index(records)
    found: list[Anomaly] = []
    rules = (
        _lost_orders,
        _events_left_behind,
        _reactions,
        _markers_with_their_effects,
        _ledgers_once,
        _order_of_claims,
        _compensations,
        _acknowledged_without_claim,
        _phantoms,
    )
    for rule in rules:
        rule(read, found)
    return Findings(orders=len(read.accepted), events=len(read.events), anomalies=found)


def load(path: Path) -> list[dict[str, Any]]:
    with path.open() as history:
        return [json.loads(line) for line in history if line.strip()]


def report(findings: Findings) -> list[str]:
    lines = [
        f"CHECKER: {'CLEAN' if findings.clean else f'{len(findings.anomalies)} ANOMALIES'}"
        f" — {findings.orders} accepted orders, {findings.events} events",
    ]
    lines += [f"  ✗ {anomaly.describe()}" for anomaly in findings.anomalies[:50]]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) != 1:
        print("usage: python -m soak.checker HISTORY.jsonl", file=sys.stderr)
        return 2
    findings = check(load(Path(arguments[0])))
    print("\n".join(report(findings)))
    return 0 if findings.clean else 1


if __name__ == "__main__":
    sys.exit(main())
