"""Share-group members (KIP-932) on the real broker and database: more members than partitions
apply every message once, and a record whose lock expired while its first member was still at
work is applied by another member and found taken by the first (one effect, one duplicate, the
record delivered twice), while a strategy without a marker applies it twice; a record the database
never takes is dead-lettered on its last delivery, not archived by the broker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, Message, Producer
from prometheus_client import REGISTRY

from auditor.dead_letters import dead_letter_of
from effectively_once.consumer import wiring
from effectively_once.consumer.share_loop import DELIVERY_LIMIT, ShareGroupLoop, share_group_id
from effectively_once.envelope import Envelope
from effectively_once.faults import FaultAction, FaultPoints
from effectively_once.kafka_client import client_config
from effectively_once.lab import PATHS as TEACHING_PATHS
from effectively_once.outcomes import Strategy
from infra.launcher.kafka_broker import ensure_share_groups
from services.settings import Settings
from services.topology import TOPIC_PARTITIONS
from tests.integration.conftest import Topics
from tests.support.waiting import wait_for
from workbench.ledger import LEDGER_ENTRY, entry, ledger_handler, ledger_rows

MEMBERS = 2 * TOPIC_PARTITIONS
"""Twice the partitions: the broker's assignor then gives every partition two members, so a
record one member lets go of has another to go to."""


def _members(
    settings: Settings, runtime_db: str, name: str, topics: Topics, faults: FaultPoints, strategy: Strategy
) -> list[ShareGroupLoop]:
    consumer_settings = wiring.ConsumerSettings(
        DATABASE_URL=runtime_db,
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        CONSUMER_SHARE_GROUP=True,
        CONSUMER_STRATEGY=strategy,
    )
    return [
        wiring.build_share_member(
            name,
            (topics.events,),
            {LEDGER_ENTRY: ledger_handler(name)},
            consumer_settings,
            dead_letter_topic=topics.dead_letters,
            faults=faults,
            paths=TEACHING_PATHS,
            purge=False,
        )
        for _ in range(MEMBERS)
    ]


@contextmanager
def _running(members: list[ShareGroupLoop]) -> Iterator[None]:
    stop = threading.Event()
    threads = [threading.Thread(target=member.run, kwargs={"until": stop.is_set}) for member in members]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def _publish(settings: Settings, topic: str, events: list[Envelope]) -> None:
    producer = Producer(client_config(settings.kafka_bootstrap_servers, {"acks": "all"}))
    for event in events:
        producer.produce(topic, key=event.key.encode(), value=event.to_json())
    assert producer.flush(30) == 0


def _counted(name: str, outcome: str) -> float:
    sample = REGISTRY.get_sample_value(
        "eo_consumer_messages_total",
        {"consumer": name, "event_type": LEDGER_ENTRY, "outcome": outcome, "strategy": "correct"},
    )
    return sample or 0.0


def test_more_members_than_partitions_apply_every_message_once(
    settings: Settings, runtime_db: str, name: str, topics: Topics
) -> None:
    ensure_share_groups(settings.kafka_bootstrap_servers, (share_group_id(name),))
    members = _members(settings, runtime_db, name, topics, FaultPoints(), Strategy.CORRECT)

    def working() -> int:
        return sum(1 for m in members if m.handled)

    events: list[Envelope] = []
    copies: list[Envelope] = []
    with _running(members):
        # A trickle (one record every 20 ms, every fifth published twice, as a relay retrying
        # would) until more members than partitions have worked, while the group takes them all in.
        producer = Producer(client_config(settings.kafka_bootstrap_servers, {"acks": "all"}))
        deadline = time.monotonic() + 60
        while working() <= TOPIC_PARTITIONS and time.monotonic() < deadline:
            event = entry(f"order-{len(events)}", amount=1)
            events.append(event)
            copies += [event] if len(events) % 5 == 0 else []
            for copy in [event] * (1 + (len(events) % 5 == 0)):
                producer.produce(topics.events, key=copy.key.encode(), value=copy.to_json())
            producer.poll(0)
            threading.Event().wait(0.02)
        assert producer.flush(30) == 0
        wait_for(lambda: sum(m.handled for m in members) >= len(events) + len(copies), 60, "every record handled")
    assert working() > TOPIC_PARTITIONS, "more members worked than there are partitions"
    assert ledger_rows(runtime_db, name) == len(events), "each message applied once"
    assert all(ledger_rows(runtime_db, name, event.message_id) == 1 for event in events)
    assert _counted(name, "duplicate") == len(copies)


@pytest.mark.parametrize(
    ("strategy", "stalled_at", "effects", "duplicates"),
    [(Strategy.CORRECT, "before_claim", 1, 1), (Strategy.NO_DEDUP, "before_commit", 2, 0)],
    ids=["the-marker-makes-it-a-duplicate", "without-a-marker-it-is-applied-twice"],
)
def test_a_record_whose_lock_expired_under_its_first_member_is_applied_by_another(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
    strategy: Strategy,
    stalled_at: str,
    effects: int,
    duplicates: int,
) -> None:
    lock_seconds = 2.0
    ensure_share_groups(settings.kafka_bootstrap_servers, (share_group_id(name),), lock_seconds=lock_seconds)
    faults = FaultPoints()
    # The first member to get there stalls past the record's lock (the point fires once): before
    # its claim, or, with no marker to claim, with its change made and not yet committed.
    faults.arm(stalled_at, FaultAction.STALL, times=1, stall_seconds=3 * lock_seconds)
    members = _members(settings, runtime_db, name, topics, faults, strategy)
    event = entry("order-locked", amount=1)
    with _running(members):
        _publish(settings, topics.events, [event])
        wait_for(lambda: faults.fired.get(stalled_at) == 1, 30, "the first member to stall")
        wait_for(lambda: ledger_rows(runtime_db, name, event.message_id) >= 1, 30, "another member to apply it")
        wait_for(lambda: sum(m.handled for m in members) == 2, 30, "the stalled member to finish")
    assert ledger_rows(runtime_db, name, event.message_id) == effects
    handled_by = [m for m in members if m.handled]
    assert len(handled_by) == 2, "two members handled the one record"
    if strategy is Strategy.CORRECT:
        assert _counted(name, "duplicate") == duplicates
    redelivered = REGISTRY.get_sample_value("eo_consumer_share_redeliveries_total", {"consumer": name})
    assert redelivered == 1, "the second delivery says it is one"


def test_a_record_the_database_never_takes_is_dead_lettered_on_its_last_delivery(
    settings: Settings, name: str, topics: Topics
) -> None:
    """The broker archives a record delivered as many times as it allows, with no trace: on that
    delivery the member dead-letters it (reason delivery_limit) and rejects it instead."""
    ensure_share_groups(settings.kafka_bootstrap_servers, (share_group_id(name),))
    unreachable = wiring.ConsumerSettings(
        DATABASE_URL="postgresql://nobody:nothing@127.0.0.1:9/none?connect_timeout=1",
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        CONSUMER_SHARE_GROUP=True,
        CONSUMER_SHARE_DELIVERY_LIMIT=3,
    )
    member = wiring.build_share_member(
        name,
        (topics.events,),
        {LEDGER_ENTRY: ledger_handler(name)},
        unreachable,
        dead_letter_topic=topics.dead_letters,
        faults=FaultPoints(),
        purge=False,
    )
    event = entry("order-never-taken", amount=1)
    letters: list[Message] = []
    reader = Consumer(
        client_config(settings.kafka_bootstrap_servers, {"group.id": f"{name}-reader", "auto.offset.reset": "earliest"})
    )
    reader.subscribe([topics.dead_letters])
    try:
        with _running([member]):
            _publish(settings, topics.events, [event])

            def lettered() -> bool:
                letter = reader.poll(0.5)
                if letter is not None and letter.error() is None:
                    letters.append(letter)
                return bool(letters)

            wait_for(lettered, 60, "the record's dead letter")
    finally:
        reader.close()
    letter = dead_letter_of(letters[0])
    assert (letter.reason, letter.message_id) == (DELIVERY_LIMIT, event.message_id), letter
    assert "not processed in 3 deliveries" in letter.error, letter
