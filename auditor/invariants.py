"""The auditor: proves from the databases and the sandboxes' ledgers that nothing was lost and
nothing doubled: the invariants. `make audit` prints the verdict (`__main__.py`); the panel shows it.

It reads through the read-only `auditor` role. Each check names the invariant it holds, and each
anomaly the order (or SKU) and the evidence.

Parked work is told apart from a stuck saga: a payment or an email parked with its reason has
ended its saga (cancelled, or confirmed with its notification failed) and waits for an operator,
so it is listed, not flagged. A saga that is not final after `stuck_after` is stuck, unless its
executor is still retrying a transient failure (it tried within that time and will park it at
the retry policy's maximum age): that one is listed as retrying.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from services import saga_contract as contract

FINAL = ("CONFIRMED", "REJECTED", "CANCELLED")


@dataclass(frozen=True)
class Anomaly:
    invariant: str
    subject: str
    evidence: str


@dataclass(frozen=True)
class Parked:
    service: str
    order_id: str
    reason: str


@dataclass
class Verdict:
    anomalies: list[Anomaly] = field(default_factory=list)
    checks: dict[str, int] = field(default_factory=dict)
    """Invariant -> how many things it looked at."""
    parked: list[Parked] = field(default_factory=list)
    """Work parked for an operator, with its reason: not an anomaly."""
    retrying: list[Parked] = field(default_factory=list)
    """Sagas waiting on an executor that is retrying a transient failure (the reason is its last error)."""

    @property
    def green(self) -> bool:
        return not self.anomalies

    def flag(self, invariant: str, subject: str, evidence: str) -> None:
        self.anomalies.append(Anomaly(invariant, subject, evidence))


Query = Callable[[str, str], list[tuple[Any, ...]]]
"""(database name, SQL) -> rows."""


def database_reader(url_of: Callable[[str], str]) -> Query:
    def query(name: str, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(url_of(name), connect_timeout=5) as connection:
            return connection.execute(sql).fetchall()

    return query


def audit(
    query: Query, stuck_after: timedelta = timedelta(seconds=60), unpublished_after: timedelta = timedelta(seconds=30)
) -> Verdict:
    """Check every invariant; return the verdict."""
    verdict = Verdict()
    _stock(query, verdict)
    _events_emitted_once(query, verdict)
    _facts_announced_once(query, verdict)
    charges = _charges(query, verdict)
    emails = _emails(query, verdict)
    work = _pending_work(query, verdict, stuck_after)
    _orders(query, verdict, charges, emails, stuck_after, work)
    _markers_and_effects(query, verdict, stuck_after)
    _saga_markers_and_history(query, verdict)
    _outboxes_published(query, verdict, unpublished_after)
    return verdict


STOCK_WITH_RESERVATIONS = """
SELECT s.sku, s.initial, s.available, s.reserved, s.sold,
       coalesce(sum(r.quantity) FILTER (WHERE r.status = 'reserved'), 0),
       coalesce(sum(r.quantity) FILTER (WHERE r.status = 'sold'), 0)
  FROM stock s LEFT JOIN reservation r ON r.sku = s.sku
 GROUP BY s.sku, s.initial, s.available, s.reserved, s.sold
"""
"""Stock and its reservations in one statement, so in one snapshot: read in two, a sale committed
between them (inventory still working through payment events) would look like a mismatch."""


def _stock(query: Query, verdict: Verdict) -> None:
    """available + reserved + sold = initial; reserved and sold agree with the reservations."""
    rows = query("inventory", STOCK_WITH_RESERVATIONS)
    verdict.checks["stock conserved"] = len(rows)
    for sku, initial, available, reserved, sold, held_reserved, held_sold in rows:
        if available + reserved + sold != initial:
            verdict.flag(
                "stock conserved", sku, f"available {available} + reserved {reserved} + sold {sold} ≠ initial {initial}"
            )
        if reserved != held_reserved or sold != held_sold:
            verdict.flag(
                "stock matches its reservations",
                sku,
                f"stock says reserved {reserved}, sold {sold}; reservations say {held_reserved}, {held_sold}",
            )


def _events_emitted_once(query: Query, verdict: Verdict) -> None:
    """Each consumer's effect, its event included, happens once per order: a second one means a
    delivery was applied twice."""
    per_service = {
        "inventory": (contract.INVENTORY_RESERVED, contract.INVENTORY_RESERVATION_FAILED),
        "payment": (contract.PAYMENT_AUTHORIZED, contract.PAYMENT_FAILED),
        "notification": (contract.NOTIFICATION_SENT,),
    }
    for service, types in per_service.items():
        names = ", ".join(f"'{t}'" for t in types)
        rows = query(service, f"SELECT aggregate_key, count(*) FROM outbox WHERE event_type IN ({names}) GROUP BY 1")
        verdict.checks[f"{service} decides once per order"] = len(rows)
        for order_id, count in rows:
            if count > 1:
                verdict.flag(
                    f"{service} decides once per order", order_id, f"{count} {' or '.join(types)} events for one order"
                )


ANNOUNCED = """
SELECT aggregate_key, event_type, count(*),
       string_agg(message_id || ' at ' || to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), ', '
                  ORDER BY created_at)
  FROM outbox GROUP BY aggregate_key, event_type HAVING count(*) > 1
"""
"""Two events of one type for one order in one outbox: the fact is announced twice."""


def _facts_announced_once(query: Query, verdict: Verdict) -> None:
    """Each service announces each business fact once: every event type happens at most once in
    an order's saga, so a second event of one type for one order from one service is a fact decided
    or announced again (a semantic duplicate let through, or a message applied twice)."""
    for service in ("orders", "inventory", "payment", "notification"):
        invariant = f"{service} announces each fact once"
        rows = query(service, ANNOUNCED)
        verdict.checks[invariant] = len(query(service, "SELECT DISTINCT aggregate_key, event_type FROM outbox"))
        for order_id, event_type, count, events in rows:
            verdict.flag(invariant, order_id, f"{count} {event_type} events: {events}")


def _charges(query: Query, verdict: Verdict) -> Counter[str]:
    charges: Counter[str] = Counter(row[0] for row in query("payment_provider", "SELECT order_id FROM charge"))
    verdict.checks["at most one charge per order"] = len(charges)
    for order_id, count in charges.items():
        if count > 1:
            verdict.flag("at most one charge per order", order_id, f"{count} charges in the provider's ledger")
    return charges


def _emails(query: Query, verdict: Verdict) -> Counter[str]:
    emails: Counter[str] = Counter(
        row[0] for row in query("mail", "SELECT order_id FROM mail_message WHERE order_id IS NOT NULL")
    )
    verdict.checks["at most one email per order"] = len(emails)
    for order_id, count in emails.items():
        if count > 1:
            verdict.flag("at most one email per order", order_id, f"{count} emails in the mail sandbox")
    return emails


@dataclass(frozen=True)
class PendingWork:
    parked_emails: set[str]
    retrying: dict[str, Parked]
    """Order -> the executor's last error, for work retried within `stuck_after`."""


def _pending_work(query: Query, verdict: Verdict, stuck_after: timedelta) -> PendingWork:
    """Parked rows (listed with their reasons) and rows being retried, in payment and notification."""
    seconds = int(stuck_after.total_seconds())
    retrying: dict[str, Parked] = {}
    parked_emails: set[str] = set()
    for service, table in (("payment", "payment_attempt"), ("notification", "notification")):
        rows = query(
            service,
            f"""SELECT order_id, status, coalesce(failure_reason, last_error, ''),
                       status = 'pending' AND last_error IS NOT NULL
                       AND next_attempt_at > now() - interval '{seconds} seconds'
                  FROM {table} WHERE status = 'failed' OR (status = 'pending' AND last_error IS NOT NULL)""",
        )
        for order_id, status, reason, retried in rows:
            if status == "failed":
                verdict.parked.append(Parked(service, order_id, reason))
                if service == "notification":
                    parked_emails.add(order_id)
            elif retried:
                retrying[order_id] = Parked(service, order_id, reason)
    return PendingWork(parked_emails, retrying)


def _orders(
    query: Query,
    verdict: Verdict,
    charges: Counter[str],
    emails: Counter[str],
    stuck_after: timedelta,
    work: PendingWork,
) -> None:
    """Every order ends, and its ending agrees with the ledgers (an email parked for an operator
    stands in for the email of a confirmed order)."""
    rows = query(
        "orders",
        f"""SELECT order_id, status, now() - created_at > interval '{int(stuck_after.total_seconds())}
                                  seconds' FROM customer_order""",
    )
    verdict.checks["every order ends, as its ledgers say"] = len(rows)
    known = set()
    for order_id, status, old in rows:
        known.add(order_id)
        if status not in FINAL and old:
            if order_id in work.retrying:
                verdict.retrying.append(work.retrying[order_id])
            else:
                verdict.flag("no saga stuck", order_id, f"still {status} after {stuck_after}")
        mailed = emails[order_id] + (1 if order_id in work.parked_emails and not emails[order_id] else 0)
        if status == "CONFIRMED" and (charges[order_id], mailed) != (1, 1):
            verdict.flag(
                "a confirmed order was charged and mailed once",
                order_id,
                f"{charges[order_id]} charge(s), {emails[order_id]} email(s)",
            )
        if status in ("REJECTED", "CANCELLED") and (charges[order_id] or emails[order_id]):
            verdict.flag(
                f"a {status.lower()} order was neither charged nor mailed",
                order_id,
                f"{charges[order_id]} charge(s), {emails[order_id]} email(s)",
            )
    for order_id in (set(charges) | set(emails)) - known:
        verdict.flag("every charge and email belongs to an order", order_id, "no such order")


def _events(query: Query, service: str, event_type: str) -> dict[str, tuple[str, Any]]:
    """message id -> (order id, when it was written) of one event type in a service's outbox."""
    rows = query(service, f"SELECT message_id, aggregate_key, created_at FROM outbox WHERE event_type = '{event_type}'")
    return {row[0]: (row[1], row[2]) for row in rows}


def _markers_and_effects(query: Query, verdict: Verdict, lost_after: timedelta) -> None:
    """A marker without its business effect lost the change; an effect without its marker will
    be applied again on the next redelivery, unless retention purged that marker on purpose
    (its event is older than what `marker_retention` says was purged: a late replay of it is
    refused by the runtime, not applied). An event older than `lost_after` with no effect at all
    was lost on its way (acknowledged and never applied, or suppressed by another consumer)."""
    placed = _events(query, "orders", contract.ORDER_PLACED)
    reserved = _events(query, "inventory", contract.INVENTORY_RESERVED)
    authorized = _events(query, "payment", contract.PAYMENT_AUTHORIZED)
    decided = "SELECT order_id FROM reservation_decision WHERE outcome IS NOT NULL"
    pairs = (
        ("inventory", "inventory-reservation-v1", placed, decided),
        ("payment", "payment-authorization-v1", reserved, "SELECT order_id FROM payment_attempt"),
        ("notification", "notification-dispatch-v1", authorized, "SELECT order_id FROM notification"),
        ("notification", "sales-projection-v1", authorized, "SELECT order_id FROM sales_projection"),
    )
    for service, consumer, events, effects_sql in pairs:
        marked, effects, purged_through = _markers_with_effects(query, service, consumer, effects_sql)
        invariant = f"{consumer}: every marker has its effect and every effect its marker"
        verdict.checks[invariant] = len(events)
        orders_marked = {events[m][0]: m for m in marked if m in events}
        retained = {
            order_id for order_id, written in events.values() if purged_through is None or written >= purged_through
        }
        for order_id in sorted(set(orders_marked) - effects):
            evidence = f"marker committed for message {orders_marked[order_id]}, business effect missing"
            verdict.flag(invariant, order_id, evidence)
        for order_id in sorted((effects & retained) - set(orders_marked)):
            verdict.flag(invariant, order_id, "business effect committed, marker missing")
        reached = f"{consumer}: every event reaches its effect"
        verdict.checks[reached] = len(events)
        cutoff = datetime.now(UTC) - lost_after
        for order_id in sorted({o for o, written in events.values() if written < cutoff} - effects):
            verdict.flag(reached, order_id, f"its event is older than {lost_after} and {consumer} has no effect of it")


def _markers_with_effects(
    query: Query, service: str, consumer: str, effects_sql: str
) -> tuple[set[str], set[str], datetime | None]:
    """A consumer's markers, its business effects and how far its markers were purged, read in one
    statement, so in one snapshot: read one after the other, a message committed in between would
    show a marker without its effect (or the other way round) that is not there."""
    rows = query(
        service,
        f"""SELECT 'marker', message_id::text, NULL::timestamptz FROM processed_message
             WHERE consumer_name = '{consumer}'
            UNION ALL SELECT 'effect', effect::text, NULL FROM ({effects_sql}) AS effects (effect)
            UNION ALL SELECT 'purged', NULL, purged_through FROM marker_retention WHERE consumer_name = '{consumer}'""",
    )
    marked = {row[1] for row in rows if row[0] == "marker"}
    effects = {row[1] for row in rows if row[0] == "effect"}
    purged = [row[2] for row in rows if row[0] == "purged"]
    return marked, effects, purged[0] if purged else None


SAGA = "orders-saga-v1"
SAGA_READING = f"""
SELECT 'marker', message_id, NULL FROM processed_message WHERE consumer_name = '{SAGA}'
UNION ALL SELECT 'history', order_id, event_type FROM order_history
"""
"""The saga's markers and the order histories it writes, in one statement (one snapshot)."""


def _saga_markers_and_history(query: Query, verdict: Verdict) -> None:
    """The saga's effect of an event is its line in the order's history: a marker for an event
    (still in its outbox) whose order has no history line of that type lost the change."""
    events: dict[str, tuple[str, str]] = {}
    for service in ("orders", "inventory", "payment", "notification"):
        for message_id, order_id, event_type in query(
            service, "SELECT message_id, aggregate_key, event_type FROM outbox"
        ):
            events[message_id] = (order_id, event_type)
    rows = query("orders", SAGA_READING)
    recorded = {(row[1], row[2]) for row in rows if row[0] == "history"}
    marked = [row[1] for row in rows if row[0] == "marker" and row[1] in events]
    invariant = f"{SAGA}: every marker has its effect"
    verdict.checks[invariant] = len(marked)
    for message_id in marked:
        order_id, event_type = events[message_id]
        if (order_id, event_type) not in recorded:
            evidence = f"marker committed for {event_type} {message_id}, and the order's history has no {event_type}"
            verdict.flag(invariant, order_id, evidence)


def _outboxes_published(query: Query, verdict: Verdict, after: timedelta) -> None:
    for service in ("orders", "inventory", "payment", "notification"):
        rows = query(
            service,
            f"""SELECT aggregate_key, event_type, last_error FROM outbox WHERE published_at IS NULL
                                   AND created_at < now() - interval '{int(after.total_seconds())} seconds'""",
        )
        verdict.checks[f"{service} outbox published"] = len(rows)
        for order_id, event_type, error in rows:
            verdict.flag(
                "every outbox row is published",
                order_id,
                f"{service}: {event_type} unpublished after {after}" + (f" ({error})" if error else ""),
            )


def report(verdict: Verdict) -> Iterable[str]:
    """The verdict as lines of text, anomalies first."""
    yield (
        "AUDIT: GREEN — nothing lost, nothing doubled"
        if verdict.green
        else (f"AUDIT: RED — {len(verdict.anomalies)} anomal{'y' if len(verdict.anomalies) == 1 else 'ies'}")
    )
    for anomaly in verdict.anomalies:
        yield f"  ✗ {anomaly.invariant}: {anomaly.subject}: {anomaly.evidence}"
    failing = {anomaly.invariant for anomaly in verdict.anomalies}
    for invariant, count in verdict.checks.items():
        if invariant not in failing:
            yield f"  ✓ {invariant} ({count} checked)"
    if verdict.parked:
        yield f"PARKED: {len(verdict.parked)} (each ended its saga and waits for an operator with its reason)"
        for parked in verdict.parked[:20]:
            yield f"  {parked.service}: {parked.order_id}: {parked.reason}"
    if verdict.retrying:
        yield f"RETRYING: {len(verdict.retrying)} (transient failures, parked if they outlast the retry policy)"
        for retrying in verdict.retrying[:20]:
            yield f"  {retrying.service}: {retrying.order_id}: {retrying.reason}"
