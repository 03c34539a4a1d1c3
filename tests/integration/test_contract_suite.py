"""The runtime's contract suite, as a team runs it, on the demo's own inventory-reservation
consumer: its real handlers on a schema holding the runtime's tables and inventory's, against
the real PostgreSQL and Kafka. (examples/loyalty-points runs it from an installed wheel.)"""

from __future__ import annotations

import pytest

from effectively_once import contract
from effectively_once.consumer.processor import Connection
from effectively_once.envelope import Envelope
from services import saga_contract
from services.settings import Settings
from tests.integration.conftest import service_schema


def _placed(order_id: str) -> Envelope:
    payload = {
        "order_id": order_id,
        "customer_email": "ada@example.com",
        "payment_method": "pm_card_visa",
        "amount_cents": 1200,
        "lines": [{"sku": "sku-filter", "quantity": 1}],
    }
    return Envelope.new(saga_contract.ORDER_PLACED, order_id, payload)


def _units_reserved(connection: Connection, event: Envelope) -> int:
    """Units of stock the order holds: its one line's quantity (1) once reserved. The order's one
    decision (reservation_decision) keeps it at 1 under a semantic duplicate too, and the
    duplicate announces nothing new."""
    row = connection.execute(
        "SELECT coalesce(sum(quantity), 0) FROM reservation WHERE order_id = %s AND status = 'reserved'", (event.key,)
    ).fetchone()
    return int(row[0]) if row else 0


@pytest.fixture(scope="module")
def inventory(runtime_db: str, settings: Settings) -> contract.Subject:
    return contract.Subject(
        database_url=service_schema(runtime_db, "inventory"),
        bootstrap_servers=settings.kafka_bootstrap_servers,
        handlers="services.inventory.handlers:HANDLERS",
        make_event=_placed,
        effects=_units_reserved,
        same_fact=lambda event: Envelope.new(event.type, event.key, event.payload),
    )


UNDECLARED = {"out-of-order"}
"""A release before its reservation is not a state the saga can reach, so inventory declares no
order of its events; loyalty-points (examples/) declares one and runs that scenario."""


@pytest.mark.parametrize("scenario", [s for s in contract.SCENARIOS if s.name not in UNDECLARED], ids=str)
def test_the_inventory_consumer_keeps_the_runtime_contract(
    inventory: contract.Subject, scenario: contract.Scenario
) -> None:
    scenario.run(inventory)


def test_the_scenario_inventory_does_not_declare_refuses_to_run_rather_than_pass(inventory: contract.Subject) -> None:
    for scenario in (s for s in contract.SCENARIOS if s.name in UNDECLARED):
        with pytest.raises(contract.NotDeclared, match="in_order"):
            scenario.run(inventory)


# The suite fails what breaks the pattern: a handler without a business key, and one whose
# state depends on the order events arrive in. (workbench.ledger's domain, in runtime_tests.)

LEDGER_HANDLERS = "tests.integration.test_contract_suite:NAIVE_HANDLERS"


def _overwrite_state(event: Envelope, connection: Connection) -> None:
    """The last event wins, whatever it was: a late OrderPlaced moves a paid order back."""
    connection.execute(
        """INSERT INTO order_state (order_key, state, rank) VALUES (%s, %s, 0)
           ON CONFLICT (order_key) DO UPDATE SET state = EXCLUDED.state""",
        (event.key, event.type),
    )


def _append_ledger(event: Envelope, connection: Connection) -> None:
    """Writes a row per application, with no business key of its own."""
    connection.execute(
        "INSERT INTO ledger (consumer_name, message_id, order_key, amount) VALUES ('naive', %s, %s, 1)",
        (event.message_id, event.key),
    )


NAIVE_HANDLERS = {"LedgerEntry": _append_ledger, "OrderPlaced": _overwrite_state, "PaymentAuthorized": _overwrite_state}


def _ledger_rows_of_key(connection: Connection, event: Envelope) -> int:
    row = connection.execute("SELECT count(*) FROM ledger WHERE order_key = %s", (event.key,)).fetchone()
    return int(row[0]) if row else 0


def _state(connection: Connection, key: str) -> object:
    row = connection.execute("SELECT state FROM order_state WHERE order_key = %s", (key,)).fetchone()
    return row[0] if row else None


@pytest.fixture
def naive(runtime_db: str, settings: Settings) -> contract.Subject:
    return contract.Subject(
        database_url=runtime_db,
        bootstrap_servers=settings.kafka_bootstrap_servers,
        handlers=LEDGER_HANDLERS,
        make_event=lambda key: Envelope.new("LedgerEntry", key, {}),
        effects=_ledger_rows_of_key,
        same_fact=lambda event: Envelope.new(event.type, event.key, event.payload),
        in_order=lambda key: [Envelope.new("OrderPlaced", key, {}), Envelope.new("PaymentAuthorized", key, {})],
        state=_state,
    )


def _scenario(name: str) -> contract.Scenario:
    [found] = [s for s in contract.SCENARIOS if s.name == name]
    return found


def test_a_handler_without_a_business_key_fails_the_semantic_duplicate(naive: contract.Subject) -> None:
    _scenario("sequential-duplicate").run(naive)  # the marker still stops a redelivery
    with pytest.raises(contract.ContractViolation, match=r"under \d ids has its effect [2-4] times"):
        _scenario("semantic-duplicate").run(naive)


def test_a_handler_whose_state_depends_on_arrival_order_fails_out_of_order(naive: contract.Subject) -> None:
    with pytest.raises(contract.ContractViolation, match="in order the state is 'PaymentAuthorized'"):
        _scenario("out-of-order").run(naive)


def test_a_scenario_the_subject_does_not_declare_says_what_to_declare(naive: contract.Subject) -> None:
    undeclared = contract.Subject(
        database_url=naive.database_url,
        bootstrap_servers=naive.bootstrap_servers,
        handlers=naive.handlers,
        make_event=naive.make_event,
        effects=naive.effects,
    )
    with pytest.raises(contract.NotDeclared, match="same_fact"):
        _scenario("semantic-duplicate").run(undeclared)
    assert [s.name for s in contract.SCENARIOS][:8] == [
        "sequential-duplicate",
        "two-connections-racing",
        "winner-commits",
        "winner-rolls-back",
        "two-consumer-names",
        "crash-after-commit-before-ack",
        "serialization-failure-repeatable-read",
        "serialization-failure-serializable",
    ]
