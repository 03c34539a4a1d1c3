"""Batched mode: many messages, one transaction, a marker each; one failure falls back to one at
a time, so it neither blocks nor doubles the rest."""

from __future__ import annotations

import uuid

import psycopg

from effectively_once.consumer.processor import TerminalFailure
from effectively_once.envelope import Envelope
from effectively_once.outcomes import Outcome
from tests.integration.conftest import ProcessorFactory
from tests.support.fake_consumer import RecordedTelemetry
from workbench.ledger import (
    LEDGER_ENTRY,
    advance_state,
    entry,
    ledger_bulk_handler,
    ledger_handler,
    ledger_rows,
)


def test_a_batch_applies_each_message_once_and_counts_in_batch_duplicates(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)})
    events = [entry(f"order-{n}") for n in range(20)]
    first = processor.process_batch([*events, events[3]])
    assert first.results == [Outcome.APPLIED] * 20 + [Outcome.DUPLICATE]
    again = processor.process_batch(events)
    assert again.results == [Outcome.DUPLICATE] * 20
    assert ledger_rows(runtime_db, name) == 20


def test_one_failing_message_falls_back_to_one_at_a_time_and_the_rest_apply_once(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, max_handler_attempts=2)
    events = [entry(f"order-{n}", fail=(n == 7)) for n in range(15)]
    batch = processor.process_batch(events)
    assert batch.retry_later is None
    failures = [r for r in batch.results if isinstance(r, TerminalFailure)]
    assert len(failures) == 1 and failures[0].reason == "handler_failed"
    assert batch.results[7] is failures[0]
    assert batch.results[:7] + batch.results[8:] == [Outcome.APPLIED] * 14
    assert ledger_rows(runtime_db, name) == 14


def test_a_bulk_handler_applies_each_claimed_message_once_and_falls_back_on_failure(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    processor = make_processor(
        name,
        {LEDGER_ENTRY: ledger_handler(name)},
        bulk_handlers={LEDGER_ENTRY: ledger_bulk_handler(name)},
        max_handler_attempts=1,
    )
    events = [entry(f"order-{n}") for n in range(30)]
    assert processor.process_batch(events[:10]).results == [Outcome.APPLIED] * 10
    # 10 already applied, 19 new, 1 that fails: the batch rolls back and goes one at a time.
    mixed = [*events, entry("order-bad", fail=True)]
    results = processor.process_batch(mixed).results
    assert results[:10] == [Outcome.DUPLICATE] * 10
    assert results[10:30] == [Outcome.APPLIED] * 20
    assert isinstance(results[30], TerminalFailure)
    assert ledger_rows(runtime_db, name) == 30


def test_a_batch_keeps_message_order_across_event_types(
    make_processor: ProcessorFactory,
    runtime_db: str,
    name: str,
) -> None:
    handlers = dict.fromkeys(("OrderPlaced", "InventoryReserved", "PaymentAuthorized"), advance_state)
    processor = make_processor(name, handlers)
    order = f"order-{uuid.uuid4().hex[:8]}"
    events = [Envelope.new(t, order, {}) for t in ("OrderPlaced", "InventoryReserved", "PaymentAuthorized")]
    assert processor.process_batch(events).results == [Outcome.APPLIED] * 3
    with psycopg.connect(runtime_db) as connection:
        state = connection.execute("SELECT state FROM order_state WHERE order_key = %s", (order,)).fetchone()
    assert state == ("PaymentAuthorized",)


def test_a_batch_is_told_as_one_telemetry_record_and_a_single_message_as_its_own(
    make_processor: ProcessorFactory,
    name: str,
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)})
    told = RecordedTelemetry()
    processor.recorder.telemetry = told
    events = [entry(f"order-{n}") for n in range(5)]
    processor.process_batch([*events, events[0]])
    ((kind, fields),) = told.records
    assert kind == "deliveries"
    assert [(item["key"], item["outcome"]) for item in fields["items"]] == [
        *((event.key, "applied") for event in events),
        (events[0].key, "duplicate"),
    ]
    processor.process(entry("order-9"))
    assert told.records[-1][0] == "delivery" and told.records[-1][1]["key"] == "order-9"
