"""A run of redeliveries: one read finds the poll's committed markers, those messages are
duplicates without a transaction each, and every other message still applies exactly once."""

from __future__ import annotations

import random
import time
from typing import Any

from confluent_kafka import Producer
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from effectively_once.consumer import wiring
from effectively_once.kafka_client import client_config
from effectively_once.outcomes import Outcome, Strategy
from services.settings import Settings
from tests.integration.conftest import ProcessorFactory, Topics
from workbench.ledger import LEDGER_ENTRY, entry, ledger_handler, ledger_rows


class ToldDeliveries:
    """A telemetry sink that keeps every delivery record, batched ones unpacked."""

    def __init__(self) -> None:
        self.deliveries: list[dict[str, Any]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        if kind == "delivery":
            self.deliveries.append(fields)
        elif kind == "deliveries":
            self.deliveries.extend(fields["items"])

    def flush(self, timeout: float) -> None:
        pass


@hypothesis_settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    applied=st.lists(st.booleans(), min_size=1, max_size=30),
    repeats=st.lists(st.integers(min_value=0, max_value=29), max_size=10),
)
def test_the_read_finds_exactly_the_committed_markers_and_the_rest_apply_once(
    make_processor: ProcessorFactory, name: str, runtime_db: str, applied: list[bool], repeats: list[int]
) -> None:
    consumer = f"{name}-{random.getrandbits(32):08x}"
    processor = make_processor(consumer, {LEDGER_ENTRY: ledger_handler(consumer)})
    events = [entry(f"order-{n % 3}") for n in range(len(applied))]
    before = {event.message_id for event, done in zip(events, applied, strict=True) if done}
    for event in events:
        if event.message_id in before:
            assert processor.process(event) is Outcome.APPLIED
    copies = events + [events[n % len(events)] for n in repeats]  # a message may come twice in one poll

    found = processor.duplicates_ahead(copies)

    assert found == before
    for event in copies:
        if event.message_id not in found:
            processor.process(event)
    for event in events:
        assert ledger_rows(runtime_db, consumer, event.message_id) == 1


def test_a_teaching_strategy_meets_every_copy_itself(make_processor: ProcessorFactory, name: str) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, strategy=Strategy.NO_DEDUP)
    event = entry("order-1")
    processor.process(event)
    assert processor.duplicates_ahead([event, entry("order-1")]) == set()


def test_a_rewound_group_finds_its_applied_messages_ahead_and_applies_the_new_ones_once(
    settings: Settings, runtime_db: str, name: str, topics: Topics, make_processor: ProcessorFactory
) -> None:
    events = [entry(f"order-{n % 7}") for n in range(300)]
    earlier = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)})
    applied_before = {event.message_id for event in events[::2]}  # every other one, as a replay meets them
    for event in events[::2]:
        assert earlier.process(event) is Outcome.APPLIED
    earlier.close()
    producer = Producer({**client_config(settings.kafka_bootstrap_servers), "acks": "all"})
    for event in events:
        producer.produce(topics.events, key=event.key, value=event.to_json())
    assert producer.flush(30) == 0

    told = ToldDeliveries()
    loop = wiring.build(
        name,
        (topics.events,),
        {LEDGER_ENTRY: ledger_handler(name)},
        wiring.ConsumerSettings(DATABASE_URL=runtime_db, KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers),
        dead_letter_topic=topics.dead_letters,
        telemetry=told,
    )
    deadline = time.monotonic() + 60
    loop.run(until=lambda: loop.handled >= len(events) or time.monotonic() > deadline)
    assert loop.handled == len(events), "the consumer did not reach the end in time"

    outcomes = {d["message_id"]: d["outcome"] for d in told.deliveries}
    assert {i for i, outcome in outcomes.items() if outcome == "duplicate"} == applied_before
    assert {i for i, outcome in outcomes.items() if outcome == "applied"} == {e.message_id for e in events[1::2]}
    assert len(told.deliveries) == len(events), "each delivery counted once"
    ahead = [d for d in told.deliveries if d.get("found") == "ahead"]
    assert {d["message_id"] for d in ahead} <= applied_before
    assert len(ahead) >= len(applied_before) // 2, "most duplicates were found by the read, not a claim each"
    for event in events:
        assert ledger_rows(runtime_db, name, event.message_id) == 1
