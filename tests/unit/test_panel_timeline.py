"""The per-order timeline and the restart counts, from recorded telemetry (no system needed)."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from chaos_panel.acting.control_endpoints import outcome_counts, stalled_partitions
from chaos_panel.domain.timeline import build
from chaos_panel.reading.records import OutboxEvent, literal
from chaos_panel.reading.telemetry_store import TelemetryStore

T0 = 1_800_000_000.0


def _placed(published: bool = True) -> OutboxEvent:
    return OutboxEvent(
        database="orders",
        message_id="m-1",
        key="order-1",
        event_type="OrderPlaced",
        topic="orders.events",
        created_at=datetime.fromtimestamp(T0, UTC),
        published_at=datetime.fromtimestamp(T0 + 0.02, UTC) if published else None,
        attempts=1,
        last_error=None,
        trace_id=None,
        envelope="{}",
    )


def test_a_crash_after_commit_reads_as_crash_restart_duplicate_in_time_order() -> None:
    records = [
        {
            "kind": "delivery",
            "at": T0 + 0.5,
            "consumer": "inventory-reservation-v1",
            "message_id": "m-1",
            "event_type": "OrderPlaced",
            "outcome": "applied",
            "strategy": "correct",
        },
        {
            "kind": "fault",
            "at": T0 + 0.51,
            "process": "inventory",
            "point": "after_commit_before_ack",
            "action": "crash",
        },
        {
            "kind": "delivery",
            "at": T0 + 2.0,
            "consumer": "inventory-reservation-v1",
            "message_id": "m-1",
            "event_type": "OrderPlaced",
            "outcome": "duplicate",
            "strategy": "correct",
        },
        {"kind": "published", "at": T0 + 0.03, "message_id": "m-1", "topic": "orders.events"},
    ]
    starts = [
        {"kind": "started", "at": T0 + 1.2, "process": "inventory", "pid": 42},
        {"kind": "started", "at": T0 - 100, "process": "inventory", "pid": 41},
    ]
    entries = build([_placed()], records, starts)
    assert [e.kind for e in entries] == ["written", "published", "applied", "fault", "started", "duplicate"]
    assert entries[3].text == "crashed at after_commit_before_ack"
    assert entries[5].text.startswith("OrderPlaced: duplicate")


def test_the_database_publish_time_stands_in_when_telemetry_missed_it_and_not_twice() -> None:
    assert [e.kind for e in build([_placed()], [], [])] == ["written", "published"]
    told = [{"kind": "published", "at": T0 + 0.03, "message_id": "m-1", "topic": "orders.events"}]
    assert [e.kind for e in build([_placed()], told, [])] == ["written", "published"]
    assert [e.kind for e in build([_placed(published=False)], [], [])] == ["written"]


def test_a_teaching_strategy_and_a_failure_reason_show_in_the_detail() -> None:
    records = [
        {
            "kind": "delivery",
            "at": T0 + 1,
            "consumer": "c",
            "message_id": "m-1",
            "event_type": "OrderPlaced",
            "outcome": "retryable_failure",
            "error_class": "SerializationFailure",
            "strategy": "check_then_act",
        }
    ]
    (entry,) = [e for e in build([_placed()], records, []) if e.kind == "retryable_failure"]
    assert entry.detail == "SerializationFailure; strategy check_then_act"


def test_restarts_count_starts_after_the_first_within_the_latest_run() -> None:
    store = TelemetryStore()
    for at, process, run in [
        (1, "inventory", "a"),
        (2, "inventory", "a"),
        (3, "inventory", "b"),
        (4, "inventory", "b"),
        (5, "inventory", "b"),
        (6, "payment", "b"),
    ]:
        store.add({"kind": "started", "at": at, "process": process, "run_id": run})
    assert store.restarts() == {"inventory": 2, "payment": 0}


def test_records_are_found_by_every_order_key_they_carry() -> None:
    store = TelemetryStore()
    store.add({"kind": "fault", "at": 1, "keys": ["o-1", "o-2"]})
    store.add({"kind": "delivery", "at": 2, "key": "o-2"})
    assert len(store.for_key("o-1")) == 1 and len(store.for_key("o-2")) == 2 and store.for_key("o-3") == []


def test_outcomes_are_summed_per_outcome_across_event_types() -> None:
    registry = CollectorRegistry()
    outcomes = Counter("eo_consumer_messages", "", ["consumer", "event_type", "outcome", "strategy"], registry=registry)
    outcomes.labels("c", "A", "applied", "correct").inc(3)
    outcomes.labels("c", "B", "applied", "correct").inc(2)
    outcomes.labels("c", "A", "duplicate", "correct").inc(4)
    outcomes.labels("c", "B", "duplicate_with_different_content", "correct").inc(1)
    assert outcome_counts(generate_latest(registry).decode()) == {
        "applied": 5.0,
        "duplicate": 4.0,
        "duplicate_with_different_content": 1.0,
        "retryable_failure": 0.0,
        "terminal_failure": 0.0,
        "ignored": 0.0,
    }


def test_the_stalled_partitions_a_process_reports_are_read_from_its_metrics() -> None:
    registry = CollectorRegistry()
    stalled = Gauge("eo_consumer_partition_stalled", "", ["consumer", "topic", "partition"], registry=registry)
    stalled.labels("c", "inventory.events", "2").set(1)
    stalled.labels("c", "payment.events", "0").set(0)
    assert stalled_partitions(generate_latest(registry).decode()) == ["inventory.events/2"]


def test_ids_from_the_user_become_safe_sql_literals() -> None:
    assert literal("o'1") == "'o''1'"
    for hostile in ("x\x00y", "a\nb", "z" * 256):
        try:
            literal(hostile)
        except ValueError:
            continue
        raise AssertionError(f"{hostile!r} was accepted")


def test_a_batch_told_as_one_record_reads_as_its_deliveries() -> None:
    store = TelemetryStore()
    store.add(
        {
            "kind": "deliveries",
            "at": 5.0,
            "process": "inventory",
            "items": [
                {"consumer": "c", "message_id": "m-1", "key": "o-1", "outcome": "applied"},
                {"consumer": "c", "message_id": "m-2", "key": "o-2", "outcome": "duplicate"},
            ],
        }
    )
    (first,) = store.for_key("o-1")
    assert first["kind"] == "delivery" and first["at"] == 5.0 and first["outcome"] == "applied"
    assert store.for_key("o-2")[0]["outcome"] == "duplicate"


def test_a_lost_answer_and_its_retry_with_the_same_key_read_as_two_calls() -> None:
    records = [
        {
            "kind": "remote_call",
            "at": T0 + 3.1,
            "process": "payment-executor",
            "key": "order-1",
            "service": "payment provider",
            "idempotency_key": "pay-order-1-attempt-1",
            "call": 1,
            "result": "ReadTimeout",
        },
        {
            "kind": "remote_call",
            "at": T0 + 3.3,
            "process": "payment-executor",
            "key": "order-1",
            "service": "payment provider",
            "idempotency_key": "pay-order-1-attempt-1",
            "call": 2,
            "result": "HTTP 200, replayed",
        },
    ]
    calls = [e for e in build([_placed()], records, []) if e.kind == "remote_call"]
    assert [(e.actor, e.text) for e in calls] == [
        ("payment-executor", "payment provider call 1: ReadTimeout"),
        ("payment-executor", "payment provider call 2: HTTP 200, replayed"),
    ]
    assert {e.detail for e in calls} == {"Idempotency-Key pay-order-1-attempt-1"}
