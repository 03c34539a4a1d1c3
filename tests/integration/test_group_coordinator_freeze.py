"""A consumer group whose coordinator freezes, on either group protocol.

Two static members of one group consume a topic on three Kafka nodes of the tests' own while
orders are published steadily; the node that coordinates the group is frozen (SIGSTOP) for longer
than the group's session, then thawed. Under the classic protocol the members find the coordinator
gone, look it up again and rejoin (a static member's own rejoin may fence its old session, and its
client then fails for good: the test starts it again, as the supervisor starts the process again);
under the consumer protocol (KIP-848) the coordinator moves to
another node with the group's partition of __consumer_offsets, which holds the members' sessions
and assignment. Either way every message the brokers confirmed is applied once, and nothing that
was never sent: none lost, none twice. A message produced around the freeze and never confirmed
need not be there, and is not waited for.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import psycopg
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, Message, Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from effectively_once.consumer import wiring
from effectively_once.consumer.deliveries import ClientFailed
from effectively_once.kafka_client import client_config
from infra.launcher import kafka_broker
from tests.support.kafka_nodes import KafkaNodes
from tests.support.waiting import wait_for
from workbench.ledger import LEDGER_ENTRY, entry, ledger_handler

pytestmark = pytest.mark.integration

FREEZE_SECONDS = 10
"""Longer than the group's session (6 s on the nodes and in the classic members' settings)."""


def _topic(nodes: KafkaNodes) -> str:
    name = f"test.coordinator-freeze.{uuid.uuid4().hex[:8]}"
    admin = kafka_broker.admin_client(nodes.bootstrap)
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=3, config=config)])[name].result()
    admin.create_topics([NewTopic(f"{name}.dlq", num_partitions=1, replication_factor=3)])[f"{name}.dlq"].result()
    kafka_broker.wait_until_replicated(nodes.bootstrap, 3, 60, topics=(name, f"{name}.dlq"))
    return name


@contextmanager
def _member(nodes: KafkaNodes, url: str, name: str, topic: str, protocol: str, n: int) -> Iterator[list[str]]:
    """A member run as its supervisor runs a process: started again at once when its client fails
    for good (a classic static member's own rejoin after the freeze can fence the session it had:
    tests/integration/test_fenced_member.py). Yields the failures it was started again after."""
    settings = wiring.ConsumerSettings(
        DATABASE_URL=url,
        KAFKA_BOOTSTRAP_SERVERS=nodes.bootstrap,
        CONSUMER_GROUP_PROTOCOL=protocol,  # type: ignore[arg-type]
        EO_INSTANCE_ID=f"{name}-{n}",
        MARKER_PURGE_INTERVAL_SECONDS=0,
    )
    stop = threading.Event()
    failures: list[str] = []

    def supervised() -> None:
        while not stop.is_set():
            loop = wiring.build(name, (topic,), {LEDGER_ENTRY: ledger_handler(name)}, settings, f"{topic}.dlq")
            try:
                loop.run(until=stop.is_set)
            except ClientFailed as failed:
                failures.append(str(failed))

    thread = threading.Thread(target=supervised, daemon=True)
    thread.start()
    try:
        yield failures
    finally:
        stop.set()
        thread.join(60)
        assert not thread.is_alive(), "a member did not close"


def _coordinator(nodes: KafkaNodes, group: str) -> int:
    admin = kafka_broker.admin_client(nodes.bootstrap)
    described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return int(described.coordinator.id)


def _committed(nodes: KafkaNodes, group: str) -> int:
    """How many of the group's partitions have a committed offset."""
    admin = kafka_broker.admin_client(nodes.bootstrap)
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    return sum(1 for partition in found.topic_partitions if partition.offset >= 0)


def _applied(url: str, name: str) -> dict[str, int]:
    """Message id -> ledger rows: the effect each message had."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT message_id::text, count(*) FROM ledger WHERE consumer_name = %s GROUP BY message_id", (name,)
        ).fetchall()
    return {str(message_id): int(count) for message_id, count in rows}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_frozen_group_coordinator_loses_and_doubles_nothing(
    kafka_nodes: KafkaNodes, runtime_db: str, name: str, protocol: str
) -> None:
    nodes = kafka_nodes
    nodes.start_any_dead()
    topic = _topic(nodes)
    producer = Producer({**client_config(nodes.bootstrap), "acks": "all", "linger.ms": 5})
    sent: list[str] = []  # every message produced, confirmed or not
    published: list[str] = []  # those the brokers confirmed: what must be applied
    stop = threading.Event()

    def confirmed(message_id: str) -> Callable[[KafkaError | None, Message], None]:
        def delivered(error: KafkaError | None, _: Message) -> None:
            if error is None:
                published.append(message_id)

        return delivered

    def publish() -> None:
        n = 0
        while not stop.is_set():
            event = entry(f"order-{n}", amount=1)
            sent.append(event.message_id)
            producer.produce(topic, key=event.key, value=event.to_json(), on_delivery=confirmed(event.message_id))
            producer.poll(0)
            n += 1
            stop.wait(0.05)
        producer.flush(60)  # one still unconfirmed then is not waited for: it need not be applied

    publisher = threading.Thread(target=publish)
    with ExitStack() as members:
        for n in range(2):
            members.enter_context(_member(nodes, runtime_db, name, topic, protocol, n))
        publisher.start()
        try:
            wait_for(lambda: len(_applied(runtime_db, name)) >= 40, 90, "both members to consume")
            wait_for(lambda: _committed(nodes, name) == 3, 30, "the group to commit on every partition")
            coordinator = _coordinator(nodes, name)
            nodes.freeze(coordinator)
            try:
                time.sleep(FREEZE_SECONDS)  # the fault itself lasts this long; nothing is awaited by it
            finally:
                nodes.thaw(coordinator)
            before = len(published)
            wait_for(lambda: len(published) > before + 40, 60, "orders to be published after the thaw")
        finally:
            stop.set()
            publisher.join(90)
        wait_for(
            lambda: set(_applied(runtime_db, name)) >= set(published),
            120,
            f"every published message to be applied after the {protocol} group's coordinator froze",
        )
    applied = _applied(runtime_db, name)
    doubled = {message_id: count for message_id, count in applied.items() if count != 1}
    assert not doubled, f"applied more than once: {list(doubled.items())[:5]}"
    assert set(applied) >= set(published), f"{len(set(published) - set(applied))} confirmed and missing"
    assert set(applied) <= set(sent), f"{len(set(applied) - set(sent))} applied and never sent"
