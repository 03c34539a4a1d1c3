"""The history checker names each kind of anomaly forged into an otherwise correct history, with
the order it concerns, and finds nothing in the correct one."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from soak.checker import DUPLICATED, LOST, MISSING_COMPENSATION, OUT_OF_ORDER, PHANTOM, READS, check

OUTCOMES = ("CONFIRMED", "REJECTED", "CANCELLED")
START = datetime(2026, 12, 4, tzinfo=UTC)


def _history(outcomes: list[str]) -> list[dict[str, Any]]:
    """A correct run: each order's events, the claims of each consumer and every ledger row."""
    clock = itertools.count()
    ids = itertools.count()
    lines: list[dict[str, Any]] = []

    def at() -> str:
        return (START + timedelta(milliseconds=next(clock))).isoformat()

    def event(service: str, order: str, event_type: str, *consumers: str) -> None:
        message_id = f"m{next(ids)}"
        lines.append(
            {
                "type": "event",
                "service": service,
                "message_id": message_id,
                "key": order,
                "event_type": event_type,
                "created_at": at(),
                "published": True,
            }
        )
        for consumer in consumers:
            lines.append({"type": "claim", "consumer": consumer, "message_id": message_id, "at": at()})
            if consumer == "orders-saga-v1":
                effect("history", order, event_type)

    def effect(ledger: str, order: str, status: str) -> None:
        lines.append({"type": "effect", "ledger": ledger, "order_id": order, "status": status})

    for number, outcome in enumerate(outcomes):
        order = f"order-{number}"
        lines.append({"type": "request", "op": "place_order", "answer": "ok", "order_id": order})
        event("orders", order, "OrderPlaced", "inventory-reservation-v1", "orders-saga-v1")
        effect("decision", order, "refused" if outcome == "REJECTED" else "reserved")
        if outcome == "REJECTED":
            event("inventory", order, "InventoryReservationFailed", "orders-saga-v1")
        else:
            event("inventory", order, "InventoryReserved", "orders-saga-v1", "payment-authorization-v1")
        if outcome == "CONFIRMED":
            event(
                "payment",
                order,
                "PaymentAuthorized",
                "orders-saga-v1",
                "inventory-reservation-v1",
                "notification-dispatch-v1",
                "sales-projection-v1",
            )
            event("notification", order, "NotificationSent", "orders-saga-v1")
            for ledger, status in (
                ("reservation", "sold"),
                ("payment", "authorized"),
                ("charge", "charged"),
                ("email", "sent"),
                ("notification", "sent"),
                ("projection", "projected"),
            ):
                effect(ledger, order, status)
        if outcome == "CANCELLED":
            event("payment", order, "PaymentFailed", "orders-saga-v1", "inventory-reservation-v1")
            event("inventory", order, "InventoryReleased", "orders-saga-v1")
            effect("reservation", order, "released")
            effect("payment", order, "declined")
        effect("order", order, outcome)
    return lines


def _order_of(lines: list[dict[str, Any]], outcome: str) -> str:
    return str(next(line["order_id"] for line in lines if line["type"] == "effect" and line["status"] == outcome))


def _without(lines: list[dict[str, Any]], order: str, event_type: str) -> list[dict[str, Any]]:
    return [line for line in lines if not (line.get("key") == order and line.get("event_type") == event_type)]


outcomes = st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=12).map(lambda drawn: [*OUTCOMES, *drawn])


@given(outcomes)
def test_a_correct_history_is_clean(drawn: list[str]) -> None:
    findings = check(_history(drawn))
    assert findings.clean, findings.anomalies
    assert findings.orders == len(drawn)


@given(outcomes, st.sampled_from(["InventoryReserved", "PaymentAuthorized"]))
def test_a_reaction_that_never_happened_is_named_lost(drawn: list[str], dropped: str) -> None:
    lines = _history(drawn)
    order = _order_of(lines, "CONFIRMED")
    found = check(_without(lines, order, dropped)).of_kind(LOST)
    assert order in {anomaly.order_id for anomaly in found}
    assert all(anomaly.lines for anomaly in found)


@given(outcomes)
def test_an_order_that_never_ended_and_an_event_left_in_its_outbox_are_lost(drawn: list[str]) -> None:
    lines = copy.deepcopy(_history(drawn))
    order = _order_of(lines, "REJECTED")
    for line in lines:
        if line.get("ledger") == "order" and line["order_id"] == order:
            line["status"] = "PENDING"
        if line.get("key") == order and line.get("event_type") == "OrderPlaced":
            line["published"] = False
    reasons = [anomaly.reason for anomaly in check(lines).of_kind(LOST) if anomaly.order_id == order]
    assert any("still PENDING" in reason for reason in reasons)
    assert any("never left" in reason for reason in reasons)


@given(outcomes, st.sampled_from(["charge", "email", "projection"]))
def test_an_effect_twice_is_named_duplicated(drawn: list[str], ledger: str) -> None:
    lines = _history(drawn)
    order = _order_of(lines, "CONFIRMED")
    twice = next(line for line in lines if line.get("ledger") == ledger and line["order_id"] == order)
    found = check([*lines, dict(twice)]).of_kind(DUPLICATED)
    assert [anomaly.order_id for anomaly in found] == [order]


@given(outcomes)
def test_a_decision_taken_twice_is_named_duplicated(drawn: list[str]) -> None:
    lines = _history(drawn)
    order = _order_of(lines, "CANCELLED")
    decision = next(line for line in lines if line.get("key") == order and line.get("event_type") == "PaymentFailed")
    found = check([*lines, {**decision, "message_id": "again"}]).of_kind(DUPLICATED)
    assert order in {anomaly.order_id for anomaly in found}


@given(outcomes)
def test_two_claims_of_one_outbox_in_the_wrong_order_are_named_out_of_order(drawn: list[str]) -> None:
    lines = copy.deepcopy(_history(drawn))
    order = _order_of(lines, "CANCELLED")  # the saga claims its InventoryReserved, then its InventoryReleased
    mine = {line["message_id"] for line in lines if line.get("key") == order and line.get("service") == "inventory"}
    claims = [
        line
        for line in lines
        if line["type"] == "claim" and line["consumer"] == "orders-saga-v1" and line["message_id"] in mine
    ]
    claims[0]["at"], claims[-1]["at"] = claims[-1]["at"], claims[0]["at"]
    found = check(lines).of_kind(OUT_OF_ORDER)
    assert {anomaly.order_id for anomaly in found} == {order}


@given(outcomes)
def test_a_failed_payment_without_its_release_is_a_missing_compensation(drawn: list[str]) -> None:
    lines = _history(drawn)
    order = _order_of(lines, "CANCELLED")
    found = check(_without(lines, order, "InventoryReleased")).of_kind(MISSING_COMPENSATION)
    assert [anomaly.order_id for anomaly in found] == [order]


@given(outcomes)
def test_a_cancelled_order_that_was_charged_is_a_missing_compensation(drawn: list[str]) -> None:
    lines = _history(drawn)
    order = _order_of(lines, "CANCELLED")
    charged = {"type": "effect", "ledger": "charge", "order_id": order, "status": "charged"}
    found = check([*lines, charged]).of_kind(MISSING_COMPENSATION)
    assert [anomaly.order_id for anomaly in found] == [order]


@given(outcomes)
def test_events_of_different_outboxes_may_be_claimed_in_either_order(drawn: list[str]) -> None:
    lines = copy.deepcopy(_history(drawn))
    order = _order_of(lines, "CONFIRMED")  # InventoryReserved, PaymentAuthorized, NotificationSent: three topics
    mine = {line["message_id"] for line in lines if line.get("key") == order}
    claims = [
        line
        for line in lines
        if line["type"] == "claim" and line["consumer"] == "orders-saga-v1" and line["message_id"] in mine
    ]
    claims[0]["at"], claims[-1]["at"] = claims[-1]["at"], claims[0]["at"]
    assert check(lines).clean


@given(outcomes, st.sampled_from(["InventoryReserved", "PaymentAuthorized", "NotificationSent", "OrderPlaced"]))
def test_a_business_fact_announced_twice_is_named_duplicated_with_both_events(drawn: list[str], fact: str) -> None:
    """A semantic duplicate that was announced again: a second event of one type for one order."""
    lines = _history(drawn)
    order = _order_of(lines, "CONFIRMED")
    first = next(line for line in lines if line.get("key") == order and line.get("event_type") == fact)
    found = check([*lines, {**first, "message_id": "announced-again"}]).of_kind(DUPLICATED)
    [named] = [anomaly for anomaly in found if "announced" in anomaly.reason]
    assert (named.order_id, named.reason) == (order, f"{fact} announced 2 times (one fact)")
    assert len(named.lines) == 2


@given(outcomes, st.sampled_from(["decision", "payment", "notification", "projection", "history"]))
def test_a_marker_without_its_effect_is_named_lost_with_the_claim(drawn: list[str], ledger: str) -> None:
    lines = _history(drawn)
    order = _order_of(lines, "CONFIRMED")
    dropped = [line for line in lines if not (line.get("ledger") == ledger and line.get("order_id") == order)]
    found = [a for a in check(dropped).of_kind(LOST) if "marker" in a.reason and a.order_id == order]
    assert found, f"removing the order's {ledger} rows went unnamed"
    assert all(f"no {ledger} row" in anomaly.reason and len(anomaly.lines) == 2 for anomaly in found)


TOPIC_OF_SERVICE = {
    "orders": "orders.events",
    "inventory": "inventory.events",
    "payment": "payment.events",
    "notification": "notification.events",
}


def _with_kafka(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`lines` and what Kafka holds of them: each event published (one partition per topic), and
    each group's committed offset past every record of the topics it reads."""
    offsets: dict[str, int] = {}
    kafka: list[dict[str, Any]] = []
    for line in lines:
        if line["type"] == "event":
            topic = TOPIC_OF_SERVICE[line["service"]]
            offset = offsets[topic] = offsets.get(topic, -1) + 1
            kafka.append(
                {
                    "type": "published",
                    "topic": topic,
                    "partition": 0,
                    "offset": offset,
                    "message_id": line["message_id"],
                    "key": line["key"],
                    "event_type": line["event_type"],
                }
            )
    for consumer, topics in READS.items():
        for topic in topics:
            kafka.append(
                {
                    "type": "acknowledged",
                    "consumer": consumer,
                    "topic": topic,
                    "partition": 0,
                    "offset": offsets.get(topic, -1) + 1,
                }
            )
    return [*lines, *kafka]


def _acknowledged_lost(lines: list[dict[str, Any]]) -> list[str]:
    return [anomaly.reason for anomaly in check(lines).of_kind(LOST) if "acknowledged" in anomaly.reason]


@given(outcomes)
def test_a_correct_history_with_what_kafka_holds_is_clean(drawn: list[str]) -> None:
    findings = check(_with_kafka(_history(drawn)))
    assert findings.clean, findings.anomalies


@given(outcomes, st.sampled_from(list(READS)))
def test_an_acknowledged_record_whose_claim_the_database_lost_is_named_lost(drawn: list[str], consumer: str) -> None:
    """A failover to an asynchronous standby: the claim (and its effect) went, the offset stayed."""
    lines = _with_kafka(_history(drawn))
    claim = next(line for line in lines if line["type"] == "claim" and line["consumer"] == consumer)
    forged = [line for line in lines if line is not claim]
    reasons = _acknowledged_lost(forged)
    assert len(reasons) == 1 and consumer in reasons[0] and claim["message_id"] in reasons[0], reasons
    dead_lettered = [*forged, {"type": "dead_letter", "consumer": consumer, "message_id": claim["message_id"]}]
    assert not _acknowledged_lost(dead_lettered), "a dead-lettered record was acknowledged on purpose"
    record = next(line for line in lines if line["type"] == "published" and line["message_id"] == claim["message_id"])
    behind = [
        {**line, "offset": record["offset"]}
        if line["type"] == "acknowledged" and line["consumer"] == consumer and line["topic"] == record["topic"]
        else line
        for line in forged
    ]
    assert not _acknowledged_lost(behind), "a record the group has not acknowledged will be delivered again"


@given(outcomes, st.sampled_from(["OrderPlaced", "InventoryReserved", "PaymentAuthorized"]))
def test_a_published_event_its_outbox_no_longer_holds_is_a_phantom_until_decided_again(
    drawn: list[str], event_type: str
) -> None:
    lines = _with_kafka(_history(drawn))
    order = _order_of(lines, "CONFIRMED")
    gone = next(
        line for line in lines if line["type"] == "event" and (line["key"], line["event_type"]) == (order, event_type)
    )
    forged = [line for line in lines if line is not gone]
    phantoms = check(forged).of_kind(PHANTOM)
    assert [(anomaly.order_id, gone["message_id"] in anomaly.reason) for anomaly in phantoms] == [(order, True)]
    decided_again = [*forged, {**gone, "message_id": "decided-again"}]
    assert not check(decided_again).of_kind(PHANTOM)
