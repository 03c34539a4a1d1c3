"""Each teaching strategy shows its own anomaly in a deterministic scenario, and the correct
strategy shows none in the same scenario. (ack_before_commit needs Kafka and a real crash: it is
in test_consumer_crashes.py.)"""

from __future__ import annotations

import pytest

from effectively_once.contract.scenarios import deliver_at_once
from effectively_once.faults import FaultAction, FaultPoints
from effectively_once.outcomes import Outcome, Strategy
from tests.integration.conftest import ProcessorFactory
from workbench.ledger import LEDGER_ENTRY, entry, ledger_handler, ledger_rows, markers


@pytest.mark.parametrize(
    ("strategy", "pause_at", "effects"),
    [
        (Strategy.CHECK_THEN_ACT, "after_check", 2),
        (Strategy.CORRECT, "before_claim", 1),
    ],
)
def test_two_simultaneous_deliveries_double_only_under_check_then_act(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
    strategy: Strategy,
    pause_at: str,
    effects: int,
) -> None:
    # Both deliveries are held at the step just before each decides "new or seen" is acted on,
    # until both have reached it: check-then-act has then already decided "new" twice.
    event = entry("order-storm")
    handlers = {LEDGER_ENTRY: ledger_handler(name)}
    deliver_at_once(lambda faults: make_processor(name, handlers, faults, strategy=strategy), event, at=pause_at)
    assert ledger_rows(runtime_db, name, event.message_id) == effects


@pytest.mark.parametrize(
    ("strategy", "crash_at", "effects", "second_outcome"),
    [
        # The marker committed alone; the crash lost the change; the retry sees the marker: lost.
        (Strategy.MARKER_BEFORE_IN_SEPARATE_TXN, "between_transactions", 0, Outcome.DUPLICATE),
        # The change committed alone; the crash lost the marker; the retry applies it again: doubled.
        (Strategy.MARKER_AFTER_IN_SEPARATE_TXN, "between_transactions", 2, Outcome.APPLIED),
        # One transaction: the failed attempt left nothing; the retry applies it once.
        (Strategy.CORRECT, "before_commit", 1, Outcome.APPLIED),
    ],
)
def test_a_failure_between_marker_and_change_loses_or_doubles_only_with_separate_transactions(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
    strategy: Strategy,
    crash_at: str,
    effects: int,
    second_outcome: Outcome,
) -> None:
    faults = FaultPoints()
    faults.arm(crash_at, FaultAction.RAISE)  # the process fails there once, then is retried
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, faults, strategy=strategy)
    event = entry("order-split")
    assert processor.process(event) is second_outcome
    assert ledger_rows(runtime_db, name, event.message_id) == effects
    assert markers(runtime_db, name, event.message_id) == 1


@pytest.mark.parametrize(
    ("strategy", "effects", "after_restart"),
    [
        (Strategy.MEMORY_DEDUP_ONLY, 2, Outcome.APPLIED),
        (Strategy.CORRECT, 1, Outcome.DUPLICATE),
    ],
)
def test_a_redelivery_after_a_restart_doubles_only_with_in_memory_dedup(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
    strategy: Strategy,
    effects: int,
    after_restart: Outcome,
) -> None:
    event = entry("order-restart")
    before = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, strategy=strategy)
    assert before.process(event) is Outcome.APPLIED
    assert before.process(event) is Outcome.DUPLICATE  # memory works while the process lives
    restarted = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, strategy=strategy)
    assert restarted.process(event) is after_restart
    assert ledger_rows(runtime_db, name, event.message_id) == effects


@pytest.mark.parametrize(
    ("strategy", "second_consumer_effects"),
    [
        (Strategy.MESSAGE_ID_ONLY_KEY, 0),
        (Strategy.CORRECT, 1),
    ],
)
def test_a_second_consumer_of_the_same_event_is_suppressed_only_by_a_message_id_only_key(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
    strategy: Strategy,
    second_consumer_effects: int,
) -> None:
    projection = name.replace("-v1", "-projection-v1")
    event = entry("order-two-consumers")
    for consumer in (name, projection):
        make_processor(consumer, {LEDGER_ENTRY: ledger_handler(consumer)}, strategy=strategy).process(event)
    assert ledger_rows(runtime_db, name, event.message_id) == 1
    assert ledger_rows(runtime_db, projection, event.message_id) == second_consumer_effects


@pytest.mark.parametrize(("strategy", "effects"), [(Strategy.NO_DEDUP, 2), (Strategy.CORRECT, 1)])
def test_a_plain_redelivery_doubles_only_without_dedup(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
    strategy: Strategy,
    effects: int,
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, strategy=strategy)
    event = entry("order-plain")
    processor.process(event)
    processor.process(event)
    assert ledger_rows(runtime_db, name, event.message_id) == effects
