"""The reference's testing strategy for the claim, against real PostgreSQL: each test is named
after what it proves. No Kafka here: the processor is the part that holds the invariant."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from prometheus_client import REGISTRY

from effectively_once.consumer.processor import Connection, Handler, NonRetryable, RetryLater, TerminalFailure
from effectively_once.contract.scenarios import deliver_at_once
from effectively_once.envelope import Envelope
from effectively_once.faults import FaultPoints
from effectively_once.outcomes import Outcome
from tests.integration.conftest import ProcessorFactory
from workbench.ledger import (
    LEDGER_ENTRY,
    advance_state,
    entry,
    ledger_handler,
    ledger_rows,
    markers,
    reserve,
)


def wait_until_waiting_on_a_lock(url: str, backend_pid: int, timeout: float = 10) -> None:
    """Return once that backend is blocked on a lock (the unique index's wait), or fail."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as observer:
        while time.monotonic() < deadline:
            row = observer.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (backend_pid,)
            ).fetchone()
            if row and row[0] == "Lock":
                return
            time.sleep(0.01)
    raise AssertionError(f"backend {backend_pid} never waited on a lock")


def test_a_sequential_duplicate_is_applied_once(make_processor: ProcessorFactory, runtime_db: str, name: str) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)})
    event = entry("order-1")
    assert processor.process(event) is Outcome.APPLIED
    assert processor.process(event) is Outcome.DUPLICATE
    assert ledger_rows(runtime_db, name, event.message_id) == 1
    assert markers(runtime_db, name, event.message_id) == 1


def test_two_connections_racing_one_message_apply_it_exactly_once(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    event = entry("order-race")
    outcomes = deliver_at_once(lambda faults: make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, faults), event)
    assert sorted(outcomes) == [Outcome.APPLIED, Outcome.DUPLICATE]
    assert ledger_rows(runtime_db, name, event.message_id) == 1


def test_a_business_failure_after_the_claim_rolls_back_both_marker_and_effect(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, max_handler_attempts=2)
    event = entry("order-fail", fail=True)
    with pytest.raises(TerminalFailure) as failure:
        processor.process(event)
    assert failure.value.reason == "handler_failed"
    assert failure.value.error_class == "RuntimeError"
    assert markers(runtime_db, name, event.message_id) == 0
    assert ledger_rows(runtime_db, name, event.message_id) == 0


def _race_with_the_winner_holding_its_claim(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
    winner_rolls_back: bool,
) -> tuple[Outcome | TerminalFailure, Outcome | TerminalFailure, Envelope]:
    """The winner claims and pauses before COMMIT until the loser is seen blocked on the claim."""
    winner_claimed = threading.Event()
    loser = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)})
    loser_pid = loser.session.connection.info.backend_pid

    def hold_claim(_point: str) -> None:
        winner_claimed.set()
        wait_until_waiting_on_a_lock(runtime_db, loser_pid)
        if winner_rolls_back:
            raise NonRetryable("the winner fails after the loser started waiting")

    winner_faults = FaultPoints()
    winner_faults.arm("before_commit", hold_claim)
    winner = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, winner_faults)
    event = entry("order-wait")
    results: dict[str, Outcome | TerminalFailure] = {}

    def run(label: str, processor: object) -> None:
        try:
            results[label] = processor.process(event)  # type: ignore[attr-defined]
        except TerminalFailure as failure:
            results[label] = failure

    first = threading.Thread(target=run, args=("winner", winner))
    first.start()
    assert winner_claimed.wait(10)
    second = threading.Thread(target=run, args=("loser", loser))
    second.start()
    first.join(30)
    second.join(30)
    return results["winner"], results["loser"], event


def test_while_the_winner_holds_the_claim_the_loser_waits_then_returns_duplicate(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    winner, loser, event = _race_with_the_winner_holding_its_claim(
        make_processor, runtime_db, name, winner_rolls_back=False
    )
    assert winner is Outcome.APPLIED
    assert loser is Outcome.DUPLICATE
    assert ledger_rows(runtime_db, name, event.message_id) == 1


def test_when_the_winner_rolls_back_the_waiting_loser_applies_once(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    winner, loser, event = _race_with_the_winner_holding_its_claim(
        make_processor, runtime_db, name, winner_rolls_back=True
    )
    assert isinstance(winner, TerminalFailure)
    assert loser is Outcome.APPLIED
    assert ledger_rows(runtime_db, name, event.message_id) == 1
    assert markers(runtime_db, name, event.message_id) == 1


def test_two_consumer_names_each_apply_the_same_message_once(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    other = name.replace("-v1", "-projection-v1")
    event = entry("order-shared")
    for consumer in (name, other):
        processor = make_processor(consumer, {LEDGER_ENTRY: ledger_handler(consumer)})
        assert processor.process(event) is Outcome.APPLIED
        assert processor.process(event) is Outcome.DUPLICATE
        assert ledger_rows(runtime_db, consumer, event.message_id) == 1


def _interfering_handler(runtime_db: str, counter: str, interfere_on: set[int], seen: list[str]) -> Handler:
    """Reads the counter, lets another connection update it and commit, then updates it:
    at REPEATABLE READ or SERIALIZABLE that is SQLSTATE 40001 on the attempts in `interfere_on`."""

    def handle(event: Envelope, transaction: Connection) -> None:
        seen.append(event.message_id)
        transaction.execute("SELECT value FROM counter WHERE name = %s", (counter,)).fetchone()
        if len(seen) in interfere_on:
            with psycopg.connect(runtime_db, autocommit=True) as other:
                other.execute("UPDATE counter SET value = value + 100 WHERE name = %s", (counter,))
        transaction.execute("UPDATE counter SET value = value + 1 WHERE name = %s", (counter,))

    return handle


def _counter(runtime_db: str) -> str:
    counter = f"counter-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        connection.execute("INSERT INTO counter (name, value) VALUES (%s, 0)", (counter,))
    return counter


def _counter_value(runtime_db: str, counter: str) -> int:
    with psycopg.connect(runtime_db) as connection:
        row = connection.execute("SELECT value FROM counter WHERE name = %s", (counter,)).fetchone()
    assert row
    return int(row[0])


@pytest.mark.parametrize("isolation_level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_a_serialization_failure_is_retried_whole_under_the_same_message_id(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
    isolation_level: str,
) -> None:
    counter, seen = _counter(runtime_db), list[str]()
    processor = make_processor(
        name,
        {"CounterIncrement": _interfering_handler(runtime_db, counter, {1}, seen)},
        isolation_level=isolation_level,
    )
    event = Envelope.new("CounterIncrement", "order-40001", {})
    assert processor.process(event) is Outcome.APPLIED
    assert seen == [event.message_id, event.message_id]
    assert _counter_value(runtime_db, counter) == 101  # the interference, then one increment
    assert markers(runtime_db, name, event.message_id) == 1
    retried = REGISTRY.get_sample_value(
        "eo_consumer_retries_total", {"consumer": name, "cause": "SerializationFailure"}
    )
    assert retried == 1


@pytest.mark.parametrize("isolation_level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_serialization_failures_past_the_bound_are_never_applied_and_go_to_dead_letter(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
    isolation_level: str,
) -> None:
    counter, seen = _counter(runtime_db), list[str]()
    processor = make_processor(
        name,
        {"CounterIncrement": _interfering_handler(runtime_db, counter, {1, 2, 3}, seen)},
        isolation_level=isolation_level,
        max_transaction_attempts=3,
    )
    event = Envelope.new("CounterIncrement", "order-40001", {})
    with pytest.raises(TerminalFailure) as failure:
        processor.process(event)
    assert failure.value.reason == "transaction_retries_exhausted"
    assert seen == [event.message_id] * 3
    assert _counter_value(runtime_db, counter) == 300  # only the interference committed
    assert markers(runtime_db, name, event.message_id) == 0


def test_a_semantic_duplicate_with_a_new_message_id_is_stopped_by_the_business_key(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    processor = make_processor(name, {"ReserveStock": reserve})
    order = f"order-{uuid.uuid4().hex[:8]}"
    first = Envelope.new("ReserveStock", order, {"sku": "sku-1", "quantity": 2})
    replayed_with_new_id = Envelope.new("ReserveStock", order, {"sku": "sku-1", "quantity": 2})
    assert processor.process(first) is Outcome.APPLIED
    assert processor.process(replayed_with_new_id) is Outcome.APPLIED  # a new id passes the marker
    with psycopg.connect(runtime_db) as connection:
        rows = connection.execute(
            "SELECT count(*), sum(quantity) FROM reservation WHERE order_key = %s", (order,)
        ).fetchone()
    assert rows == (1, 2)


def test_out_of_order_events_never_move_the_order_state_backwards(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    handlers = dict.fromkeys(("OrderPlaced", "InventoryReserved", "PaymentAuthorized"), advance_state)
    processor = make_processor(name, handlers)
    order = f"order-{uuid.uuid4().hex[:8]}"
    for event_type in ("PaymentAuthorized", "OrderPlaced", "InventoryReserved"):
        assert processor.process(Envelope.new(event_type, order, {})) is Outcome.APPLIED
    with psycopg.connect(runtime_db) as connection:
        state = connection.execute("SELECT state FROM order_state WHERE order_key = %s", (order,)).fetchone()
    assert state == ("PaymentAuthorized",)


def test_a_message_older_than_the_dedup_horizon_is_refused_not_applied(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, dedup_horizon=timedelta(days=7))
    old = Envelope(
        message_id=str(uuid.uuid4()),
        type=LEDGER_ENTRY,
        key="order-old",
        payload={},
        occurred_at=datetime.now(UTC) - timedelta(days=8),
    )
    with pytest.raises(TerminalFailure) as failure:
        processor.process(old)
    assert failure.value.reason == "beyond_dedup_horizon"
    assert ledger_rows(runtime_db, name, old.message_id) == 0
    assert markers(runtime_db, name, old.message_id) == 0


def test_an_unknown_event_type_is_refused_at_once(make_processor: ProcessorFactory, name: str) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)})
    with pytest.raises(TerminalFailure) as failure:
        processor.process(Envelope.new("SomethingElse", "order-x", {}))
    assert failure.value.reason == "unknown_type"


def test_the_server_ending_the_session_is_a_lost_connection_even_while_the_socket_looks_open(
    make_processor: ProcessorFactory, runtime_db: str, name: str
) -> None:
    """pg_terminate_backend's message can reach the client before the socket closes: the error
    (SQLSTATE 57P01) comes while the connection still looks usable. It must be retried on a new
    connection, never counted against the message and dead-lettered."""
    faults = FaultPoints()
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, faults=faults)
    event = entry("order-1")

    def the_server_says_goodbye(_point: str) -> None:
        raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")

    faults.arm("after_claim", the_server_says_goodbye, times=1)
    with pytest.raises(RetryLater):
        processor.process(event)
    assert markers(runtime_db, name, event.message_id) == 0  # rolled back, nothing acknowledged
    assert processor.process(event) is Outcome.APPLIED
    assert ledger_rows(runtime_db, name, event.message_id) == 1


def test_a_duplicate_does_not_wait_for_its_empty_commit_and_the_connection_goes_on(
    make_processor: ProcessorFactory, runtime_db: str, name: str
) -> None:
    """The duplicate's COMMIT is sent and its answer read before the connection's next use: one
    round trip fewer, and what follows on that connection is unaffected."""
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)})
    first, second = entry("order-1"), entry("order-1")
    assert processor.process(first) is Outcome.APPLIED
    assert processor.process(first) is Outcome.DUPLICATE
    assert processor.session.connection.pgconn.transaction_status == psycopg.pq.TransactionStatus.ACTIVE, (
        "the duplicate returned without waiting for its COMMIT"
    )
    assert processor.process(second) is Outcome.APPLIED
    assert processor.process(second) is Outcome.DUPLICATE
    for event in (first, second):
        assert ledger_rows(runtime_db, name, event.message_id) == 1
        assert markers(runtime_db, name, event.message_id) == 1


def test_a_connection_lost_behind_a_duplicates_commit_is_replaced_and_the_next_message_applies_once(
    make_processor: ProcessorFactory, runtime_db: str, name: str
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)})
    first, following = entry("order-1"), entry("order-2")
    assert processor.process(first) is Outcome.APPLIED
    assert processor.process(first) is Outcome.DUPLICATE
    with psycopg.connect(runtime_db, autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", (processor.session.connection.info.backend_pid,))
    outcomes: list[Outcome | str] = []
    for _ in range(3):  # the loop redelivers after RetryLater; here, the test does
        try:
            outcomes.append(processor.process(following))
            break
        except RetryLater:
            outcomes.append("retry later")
    assert outcomes[-1] is Outcome.APPLIED, outcomes
    assert ledger_rows(runtime_db, name, following.message_id) == 1
    assert markers(runtime_db, name, first.message_id) == 1
