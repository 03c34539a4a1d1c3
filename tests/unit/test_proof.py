"""An order's proof, effect by effect: the sentence follows from what the outbox, the telemetry
and the databases say, for an effect made once, waiting, never due, made twice, or unguarded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from chaos_panel.domain.proof import Facts, build
from chaos_panel.reading.records import OutboxEvent

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
PLACED = OutboxEvent("orders", "m-placed", "o-1", "OrderPlaced", "orders.events", NOW, NOW, 1, None, None, "{}")
INVENTORY = "inventory-reservation-v1"


def _delivery(outcome: str, offset: int, at: float, consumer: str = INVENTORY, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "delivery",
        "consumer": consumer,
        "message_id": "m-placed",
        "outcome": outcome,
        "topic": "orders.events",
        "partition": 1,
        "offset": offset,
        "at": at,
        **extra,
    }


def _reservation(told: list[dict[str, Any]], marker: bool = True, rows: bool = True) -> Any:
    facts = Facts(
        idempotency_key="k-1",
        events=[PLACED],
        told=told,
        markers={(INVENTORY, "m-placed"): NOW} if marker else {},
        rows={"Reservation": ["1 × sku-1, reserved"]} if rows else {},
        outside={},
    )
    return next(p for p in build(facts) if p.spec.name == "Reservation")


def test_a_redelivered_event_is_proven_once_with_each_copy_where_it_came_from() -> None:
    proof = _reservation(
        [_delivery("duplicate", 7, 2.0), _delivery("applied", 7, 1.0), _delivery("duplicate", 7, 3.0, found="ahead")]
    )
    assert proof.verdict == "once"
    assert (
        "reached inventory-reservation-v1 3 times" in proof.sentence and "the 2 copies after found it" in proof.sentence
    )
    assert [d.outcome for d in proof.deliveries] == ["applied", "duplicate", "duplicate"]
    assert proof.deliveries[0].where == "orders.events/1 @ 7" and proof.deliveries[2].found_ahead


@pytest.mark.parametrize(
    ("told", "marker", "rows", "verdict", "says"),
    [
        ([], False, False, "waiting", "Waiting: OrderPlaced has not been applied"),
        ([_delivery("applied", 3, 1.0)], True, True, "once", "Once: one delivery of OrderPlaced claimed"),
        ([_delivery("applied", 3, 1.0), _delivery("applied", 3, 2.0)], True, True, "wrong", "Applied 2 times"),
        ([_delivery("applied", 3, 1.0)], True, False, "wrong", "Lost: inventory-reservation-v1's marker"),
        ([_delivery("applied", 3, 1.0)], False, True, "wrong", "Unguarded: the reservation is there without"),
    ],
)
def test_the_sentence_follows_from_the_facts(
    told: list[dict[str, Any]], marker: bool, rows: bool, verdict: str, says: str
) -> None:
    proof = _reservation(told, marker, rows)
    assert proof.verdict == verdict and proof.sentence.startswith(says), proof.sentence


def test_an_effect_whose_event_was_never_written_was_never_due_and_calls_with_one_key_are_one_charge() -> None:
    reserved = OutboxEvent(
        "inventory", "m-res", "o-1", "InventoryReserved", "inventory.events", NOW, NOW, 1, None, None, "{}"
    )
    calls = [
        {
            "kind": "remote_call",
            "service": "payment provider",
            "idempotency_key": "o-1:1",
            "call": n,
            "result": r,
            "at": float(n),
        }
        for n, r in ((1, "timed out"), (2, "200 authorized"))
    ]
    facts = Facts(
        idempotency_key=None,
        events=[PLACED, reserved],
        told=[
            {
                "kind": "delivery",
                "consumer": "payment-authorization-v1",
                "message_id": "m-res",
                "outcome": "applied",
                "at": 1.0,
            },
            *calls,
        ],
        markers={("payment-authorization-v1", "m-res"): NOW},
        rows={"Charge": ["attempt 1, key o-1:1: authorized"]},
        outside={"Charge": ["charge ch-1 for key o-1:1, 1000 cents"]},
    )
    proofs = {p.spec.name: p for p in build(facts)}
    assert proofs["Email"].verdict == "none" and "no PaymentAuthorized was written" in proofs["Email"].sentence
    charge = proofs["Charge"]
    assert charge.verdict == "once" and "Its 2 calls to the payment provider carried one key" in charge.sentence
    assert charge.calls[0] == "call 1 with Idempotency-Key o-1:1: timed out" and charge.outside


@pytest.mark.parametrize(
    ("failovers", "verdict", "says"),
    [
        ([1.5], "once", "Once: inventory-reservation-v1 applied OrderPlaced 2 times, but a failover"),
        ([0.5], "wrong", "Applied 2 times"),  # before both: it took back neither
        ([2.5], "wrong", "Applied 2 times"),  # after both: the second was not a re-application
        ([], "wrong", "Applied 2 times"),
    ],
)
def test_an_application_a_failover_to_an_asynchronous_standby_took_back_is_not_a_double(
    failovers: list[float], verdict: str, says: str
) -> None:
    facts = Facts(
        idempotency_key="k-1",
        events=[PLACED],
        told=[_delivery("applied", 3, 1.0), _delivery("applied", 3, 2.0)],
        markers={(INVENTORY, "m-placed"): NOW},
        rows={"Reservation": ["1 × sku-1, reserved"]},
        outside={},
        lossy_failovers=failovers,
    )
    proof = next(p for p in build(facts) if p.spec.name == "Reservation")
    assert proof.verdict == verdict and proof.sentence.startswith(says), proof.sentence
