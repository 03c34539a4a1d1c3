"""The runtime's contract suite on this service's own handlers and schema, against the real
PostgreSQL (DATABASE_URL) and Kafka (KAFKA_BOOTSTRAP_SERVERS) the environment names."""

from __future__ import annotations

import os
import uuid

import pytest
from loyalty_points import MIGRATIONS
from loyalty_points.handlers import ORDER_CONFIRMED, ORDER_REFUNDED

from effectively_once import contract
from effectively_once.consumer.processor import Connection
from effectively_once.envelope import Envelope


def confirmed(order_id: str) -> Envelope:
    customer = f"customer-{order_id}"
    return Envelope.new(
        ORDER_CONFIRMED, order_id, {"order_id": order_id, "customer_id": customer, "amount_cents": 4200}
    )


def same_fact(event: Envelope) -> Envelope:
    return Envelope.new(event.type, event.key, event.payload)


def in_order(order_id: str) -> list[Envelope]:
    refunded = Envelope.new(ORDER_REFUNDED, order_id, {"order_id": order_id, "customer_id": f"customer-{order_id}"})
    return [confirmed(order_id), refunded]


def effects(connection: Connection, event: Envelope) -> int:
    """Points awarded for the event's order, in whole awards: 1 once applied, 2 if doubled."""
    row = connection.execute(
        "SELECT points FROM points_balance WHERE customer_id = %s", (event.payload["customer_id"],)
    ).fetchone()
    return int(row[0]) // 42 if row else 0


def state(connection: Connection, order_id: str) -> tuple[object, ...]:
    award = connection.execute("SELECT status, points FROM points_award WHERE order_id = %s", (order_id,)).fetchone()
    balance = connection.execute(
        "SELECT points FROM points_balance WHERE customer_id = %s", (f"customer-{order_id}",)
    ).fetchone()
    return (award[0] if award else None, balance[0] if balance else 0)


SUBJECT = contract.Subject(
    database_url=os.environ.get("DATABASE_URL", ""),
    bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""),
    handlers="loyalty_points.handlers:HANDLERS",
    make_event=confirmed,
    effects=effects,
    same_fact=same_fact,
    in_order=in_order,
    state=state,
    own_migrations=[("loyalty_points", MIGRATIONS)],
    consumer_prefix=f"loyalty-{uuid.uuid4().hex[:4]}",
)


@pytest.mark.skipif(not SUBJECT.database_url or not SUBJECT.bootstrap_servers, reason="needs DATABASE_URL and Kafka")
@pytest.mark.parametrize("scenario", contract.SCENARIOS, ids=str)
def test_the_runtime_contract_holds_for_loyalty_points(scenario: contract.Scenario) -> None:
    scenario.run(SUBJECT)


def test_a_payload_that_does_not_fit_is_refused_with_its_field_named() -> None:
    from loyalty_points.handlers import HANDLERS

    from effectively_once.typed_payload import PayloadDoesNotFit

    bad = Envelope.new(ORDER_CONFIRMED, "o-1", {"order_id": "o-1", "customer_id": "c", "amount_cents": -5})
    with pytest.raises(PayloadDoesNotFit, match="amount_cents"):
        HANDLERS[ORDER_CONFIRMED].validate(bad)  # type: ignore[attr-defined]
