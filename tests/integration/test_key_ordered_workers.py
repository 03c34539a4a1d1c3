"""CONSUMER_WORKERS: several workers inside one group member, in order per key, through the real
broker and database. Each key's messages are applied strictly in order while keys run in
parallel. A partition's stored offset never passes a message that is not done, so what was
committed after it is delivered again and counted a duplicate. A rebalance in the middle of the
flow loses and doubles nothing."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Literal

import psycopg
import pytest
from confluent_kafka import Consumer, ConsumerGroupState, Producer, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]
from prometheus_client import REGISTRY

from effectively_once.consumer import wiring
from effectively_once.consumer.lanes import lane_of
from effectively_once.consumer.loop import ConsumerLoop
from effectively_once.consumer.processor import Connection, Handler
from effectively_once.envelope import Envelope
from effectively_once.kafka_client import client_config
from infra.launcher import kafka_broker
from infra.launcher.kafka_broker import ensure_topics
from services.settings import Settings
from tests.support.waiting import wait_for

STEP = "KeyedStep"
TABLE = """
CREATE TABLE IF NOT EXISTS keyed_step (
    id            bigserial PRIMARY KEY,
    consumer_name text      NOT NULL,
    order_key     text      NOT NULL,
    step          integer   NOT NULL,
    message_id    text      NOT NULL
)
"""


@pytest.fixture
def steps_db(runtime_db: str) -> str:
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        connection.execute(TABLE)
    return runtime_db


class Recorder:
    """The handler: one row per application, after a random pause; it counts how many run at once."""

    def __init__(self, name: str, seed: int, most_seconds: float = 0.02) -> None:
        self.name, self.most_seconds = name, most_seconds
        self.random = random.Random(seed)
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()
        self.before: Callable[[Envelope, Connection], None] = lambda event, transaction: None

    def handler(self) -> Handler:
        def handle(event: Envelope, transaction: Connection) -> None:
            with self.lock:
                self.running += 1
                self.most_at_once = max(self.most_at_once, self.running)
                pause = self.random.uniform(0, self.most_seconds)
            try:
                self.before(event, transaction)
                time.sleep(pause)
                transaction.execute(
                    "INSERT INTO keyed_step (consumer_name, order_key, step, message_id) VALUES (%s, %s, %s, %s)",
                    (self.name, event.key, int(event.payload["step"]), event.message_id),
                )
            finally:
                with self.lock:
                    self.running -= 1

        return handle


def _loop(
    settings: Settings,
    db: str,
    name: str,
    topic: str,
    recorder: Recorder,
    workers: int,
    batch_size: int = 1,
    assignment: Literal["cooperative-sticky", "range,roundrobin"] = "cooperative-sticky",
    protocol: Literal["consumer", "classic"] = "consumer",
) -> ConsumerLoop:
    consumer_settings = wiring.ConsumerSettings(
        CONSUMER_ASSIGNMENT=assignment,
        CONSUMER_GROUP_PROTOCOL=protocol,
        DATABASE_URL=db,
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        CONSUMER_WORKERS=workers,
        CONSUMER_BATCH_SIZE=batch_size,
        MARKER_PURGE_INTERVAL_SECONDS=0,
        TELEMETRY_TOPIC="",
    )
    return wiring.build(name, (topic,), {STEP: recorder.handler()}, consumer_settings, dead_letter_topic=f"{topic}.dlq")


def _publish(settings: Settings, topic: str, events: list[Envelope]) -> None:
    producer = Producer(client_config(settings.kafka_bootstrap_servers, {"acks": "all", "linger.ms": 5}))
    for event in events:
        producer.produce(topic, key=event.key.encode(), value=event.to_json())
    assert producer.flush(30) == 0


def _steps(db: str, name: str) -> dict[str, list[int]]:
    """Each key's steps in the order they were applied."""
    with psycopg.connect(db) as connection:
        rows = connection.execute(
            "SELECT order_key, step FROM keyed_step WHERE consumer_name = %s ORDER BY id", (name,)
        ).fetchall()
    applied: dict[str, list[int]] = {}
    for key, step in rows:
        applied.setdefault(str(key), []).append(int(step))
    return applied


def _applied(db: str, name: str) -> int:
    return sum(len(steps) for steps in _steps(db, name).values())


def _new_topic(settings: Settings, partitions: int) -> str:
    topic = f"test.workers.{uuid.uuid4().hex[:10]}"
    if partitions == 3:
        ensure_topics(settings.kafka_bootstrap_servers, (topic, f"{topic}.dlq"))
        return topic
    admin = kafka_broker.admin_client(settings.kafka_bootstrap_servers)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=-1) for name in (topic, f"{topic}.dlq")]
    )
    for future in futures.values():
        future.result()
    return topic


def _events(keys: int, steps: int) -> list[Envelope]:
    """`steps` events per key, keys interleaved: key k's step s comes after every key's step s-1."""
    run = uuid.uuid4().hex[:6]
    return [Envelope.new(STEP, f"order-{run}-{k}", {"step": s}) for s in range(steps) for k in range(keys)]


def _run(loop: ConsumerLoop, until: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    loop.run(until=lambda: until() or time.monotonic() > deadline)
    assert until(), "the consumer did not get there in time"


@pytest.mark.parametrize("batch_size", [1, 10], ids=["a transaction per message", "batches of 10"])
def test_eight_workers_apply_each_keys_messages_in_order_and_different_keys_at_once(
    settings: Settings, steps_db: str, batch_size: int
) -> None:
    name, topic = f"workers-order-{uuid.uuid4().hex[:8]}", _new_topic(settings, 3)
    events = _events(keys=24, steps=12)
    _publish(settings, topic, events)
    recorder = Recorder(name, seed=8)
    loop = _loop(settings, steps_db, name, topic, recorder, workers=8, batch_size=batch_size)
    _run(loop, lambda: _applied(steps_db, name) >= len(events))
    applied = _steps(steps_db, name)
    assert len(applied) == 24
    assert all(steps == list(range(12)) for steps in applied.values()), applied
    assert recorder.most_at_once > 1, "the workers never ran at the same time"


def test_an_earlier_message_not_done_holds_its_partitions_offset_and_what_came_after_is_a_duplicate(
    settings: Settings, steps_db: str
) -> None:
    """One partition: A's first message fails for want of its database session while B's later
    messages commit on another worker. The member stops there (as a crash would leave it): the
    committed offset is not past A's message, and a new member delivers B's again, as duplicates."""
    name, topic = f"workers-gap-{uuid.uuid4().hex[:8]}", _new_topic(settings, 1)
    run = uuid.uuid4().hex[:6]
    a = next(f"a-{run}-{n}" for n in range(100) if lane_of(f"a-{run}-{n}", 2) == 0)
    b = next(f"b-{run}-{n}" for n in range(100) if lane_of(f"b-{run}-{n}", 2) == 1)
    first = Envelope.new(STEP, a, {"step": 0})
    later = [Envelope.new(STEP, b, {"step": s}) for s in range(3)]
    _publish(settings, topic, [first, *later])
    recorder = Recorder(name, seed=1, most_seconds=0)
    attempts: list[str] = []

    def session_dies_on_the_first_try(event: Envelope, transaction: Connection) -> None:
        if event.key == a and not attempts:
            attempts.append(event.message_id)
            wait_for(lambda: len(_steps(steps_db, name).get(b, [])) == 3, 30, "B's messages to commit first")
            transaction.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    recorder.before = session_dies_on_the_first_try
    crashed = _loop(settings, steps_db, name, topic, recorder, workers=2)
    _run(crashed, lambda: bool(attempts) and len(_steps(steps_db, name).get(b, [])) == 3)

    reader = Consumer(client_config(settings.kafka_bootstrap_servers, {"group.id": name}))
    [committed] = reader.committed([TopicPartition(topic, 0)], timeout=10)
    reader.close()
    assert committed.offset < 1, f"the offset passed A's message: {committed.offset}"

    restarted = _loop(settings, steps_db, name, topic, recorder, workers=2)
    duplicates = _counter(name, "duplicate")
    _run(restarted, lambda: a in _steps(steps_db, name) and _counter(name, "duplicate") - duplicates >= 3)
    assert _steps(steps_db, name) == {a: [0], b: [0, 1, 2]}


def test_a_rebalance_in_the_middle_of_the_flow_loses_and_doubles_nothing(settings: Settings, steps_db: str) -> None:
    """The first member's workers hold messages in hand while a second member joins; the group
    waits in PreparingRebalance until they are done, the first stores its acknowledged prefix as
    its partitions go, and the second takes over from there. The classic protocol's rebalance, whose
    states the test follows (the consumer protocol's hands partitions over one by one, without a
    group-wide state: tests/integration/test_group_protocols.py)."""
    name, topic = f"workers-rebalance-{uuid.uuid4().hex[:8]}", _new_topic(settings, 3)
    events = _events(keys=30, steps=10)
    before, after = events[: len(events) // 2], events[len(events) // 2 :]  # steps 0-4, then 5-9
    recorder = Recorder(name, seed=3, most_seconds=0.01)
    gate = threading.Event()

    def held(event: Envelope, transaction: Connection) -> None:
        gate.wait(60)

    recorder.before = held
    first = _loop(settings, steps_db, name, topic, recorder, workers=4, protocol="classic")
    second = _loop(settings, steps_db, name, topic, recorder, workers=4, protocol="classic")
    done = threading.Event()
    threads = [threading.Thread(target=member.run, kwargs={"until": done.is_set}) for member in (first, second)]
    admin = kafka_broker.admin_client(settings.kafka_bootstrap_servers)

    def group() -> tuple[ConsumerGroupState, int]:
        described = admin.describe_consumer_groups([name])[name].result()
        return described.state, len(described.members)

    def state() -> ConsumerGroupState:
        return group()[0]

    try:
        threads[0].start()
        _publish(settings, topic, before)
        wait_for(lambda: recorder.running > 1, 60, "the first member's workers to have messages in hand")
        threads[1].start()
        wait_for(lambda: state() == ConsumerGroupState.PREPARING_REBALANCING, 60, "the second member to ask to join")
        in_hand = recorder.running
        gate.set()
        wait_for(lambda: group() == (ConsumerGroupState.STABLE, 2), 60, "both members to hold partitions")
        _publish(settings, topic, after)  # over every partition: both members have work now
        wait_for(lambda: _applied(steps_db, name) >= len(events), 120, "every message to be applied")
        wait_for(lambda: second.handled > 0, 30, "the second member to acknowledge its part")
    finally:
        gate.set()
        done.set()
        for thread in threads:
            thread.join(60)
    assert in_hand > 1
    applied = _steps(steps_db, name)
    assert len(applied) == 30
    assert all(steps == list(range(10)) for steps in applied.values()), applied


def _counter(name: str, outcome: str) -> float:
    total = 0.0
    for family in REGISTRY.collect():
        if family.name == "eo_consumer_messages":
            for sample in family.samples:
                if (
                    sample.name.endswith("_total")
                    and sample.labels.get("consumer") == name
                    and sample.labels.get("outcome") == outcome
                ):
                    total += sample.value
    return total


@pytest.mark.parametrize(
    ("assignment", "keeps_partitions"),
    [("cooperative-sticky", True), ("range,roundrobin", False)],
    ids=["cooperative-sticky: only what moves is revoked", "eager: everything is revoked"],
)
def test_a_joining_member_takes_only_the_partitions_that_move(
    settings: Settings,
    steps_db: str,
    assignment: Literal["cooperative-sticky", "range,roundrobin"],
    keeps_partitions: bool,
) -> None:
    """Cooperative-sticky (CONSUMER_ASSIGNMENT's default): when a second member joins, the first
    gives up only the partitions the second takes and goes on with the rest; eager assignment
    revokes every partition from every member first. Either way nothing is lost or doubled. The
    client's assignors, which the classic protocol runs (the consumer protocol's broker assigns
    incrementally whatever CONSUMER_ASSIGNMENT says)."""
    name, topic = f"workers-sticky-{uuid.uuid4().hex[:8]}", _new_topic(settings, 4)
    events = _events(keys=20, steps=6)
    recorder = Recorder(name, seed=5, most_seconds=0)
    members = [
        _loop(settings, steps_db, name, topic, recorder, workers=2, assignment=assignment, protocol="classic")
        for _ in range(2)
    ]
    revoked: list[set[int]] = [set(), set()]
    assigned: list[set[int]] = [set(), set()]
    for index, member in enumerate(members):
        on_revoke = member._on_revoke

        def recording(
            consumer: Consumer,
            partitions: list[TopicPartition],
            index: int = index,
            on_revoke: Callable[[Consumer, list[TopicPartition]], None] = on_revoke,
        ) -> None:
            revoked[index] |= {partition.partition for partition in partitions}
            on_revoke(consumer, partitions)

        member._on_revoke = recording  # type: ignore[method-assign]

        def watching(consumer: Consumer, index: int = index) -> None:
            assigned[index] = {partition.partition for partition in consumer.assignment()}

        member.between_polls = watching
    done = threading.Event()
    threads = [threading.Thread(target=member.run, kwargs={"until": done.is_set}) for member in members]
    try:
        threads[0].start()
        _publish(settings, topic, events[: len(events) // 2])
        wait_for(lambda: assigned[0] == {0, 1, 2, 3}, 60, "the first member to hold every partition")
        threads[1].start()
        wait_for(lambda: len(assigned[1]) == 2 and len(assigned[0]) == 2, 60, "the partitions to be shared")
        _publish(settings, topic, events[len(events) // 2 :])
        wait_for(lambda: _applied(steps_db, name) >= len(events), 120, "every message to be applied")
        revoked_while_joining = set(revoked[0])  # closing revokes the rest
    finally:
        done.set()
        for thread in threads:
            thread.join(60)
    if keeps_partitions:
        assert revoked_while_joining == assigned[1], f"revoked {revoked_while_joining}, moved {assigned[1]}"
    else:
        assert revoked_while_joining == {0, 1, 2, 3}
    applied = _steps(steps_db, name)
    assert len(applied) == 20
    assert all(steps == list(range(6)) for steps in applied.values()), applied
