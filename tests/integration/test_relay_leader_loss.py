"""Confirmed by a leader that then died: what the relay's acknowledgement setting decides.

Staged the same way for both settings, on three Kafka nodes of the test's own: the two followers
of a partition freeze (SIGSTOP: they copy nothing, and with two of three nodes frozen the quorum
can change no in-sync replica set), the relay publishes a batch of outbox rows, the leader is
SIGKILLed, the followers thaw and one of them becomes leader.

One broker timer is waited out rather than observed: a follower's fetch request waits at the
leader for new data up to replica.fetch.wait.max.ms (500 ms). A fetch parked when its follower froze
would carry the first rows into the frozen follower's socket, to be read when it thaws; after that
time the leader holds no fetch of theirs, and the rows reach no follower.

- `RELAY_ACKS=1` on a topic that allows it (min.insync.replicas=1, unclean leader election on):
  the dying leader alone confirmed every row, the relay marked them published, and none of them is
  on the topic afterwards. Lost, every time.
- `RELAY_ACKS=all` (the default) on a topic with min.insync.replicas=2 and unclean election off:
  the frozen followers never confirm, so the relay marks nothing and retries; after the new leader
  takes over every row is published once, and nothing marked published is missing.
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from effectively_once.envelope import decode
from effectively_once.faults import FaultPoints
from effectively_once.relay.publish import producer_settings
from effectively_once.relay.worker import DatabaseRelay
from infra.launcher import kafka_broker
from tests.support.kafka_nodes import KafkaNodes
from tests.support.outbox import read_topic, relay_settings, write_events
from tests.support.waiting import wait_for

ROWS = 20
REPLICA_FETCH_WAIT_MAX_SECONDS = 0.5
"""The brokers' replica.fetch.wait.max.ms (Kafka's default; server.properties.template keeps it)."""

MISTAKEN = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
CORRECT = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}


def _topic(nodes: KafkaNodes, config: dict[str, str]) -> str:
    name = f"test.leader-loss.{uuid.uuid4().hex[:8]}"
    admin = kafka_broker.admin_client(nodes.bootstrap)
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=3, config=config)])[name].result()
    kafka_broker.wait_until_replicated(nodes.bootstrap, 3, 60, topics=(name,))
    return name


def _leader(nodes: KafkaNodes, topic: str) -> int:
    partition = kafka_broker.admin_client(nodes.bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[0]
    return int(partition.leader)


def _failed_attempts(url: str) -> int:
    """Publication attempts the broker did not confirm, over every row."""
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT coalesce(sum(attempts), 0) FROM outbox").fetchone()
    return int(row[0]) if row else 0


def _marked_published(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT message_id FROM outbox WHERE published_at IS NOT NULL").fetchall()
    return {str(row[0]) for row in rows}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("acks", "topic_config", "lost_expected"),
    [("1", MISTAKEN, True), ("all", CORRECT, False)],
    ids=["acks=1 loses what it marked published", "acks=all loses nothing"],
)
def test_a_leader_that_dies_before_its_followers_copied_the_rows(
    kafka_nodes: KafkaNodes, outbox_url: str, acks: str, topic_config: dict[str, str], lost_expected: bool
) -> None:
    nodes = kafka_nodes
    nodes.start_any_dead()
    topic = _topic(nodes, topic_config)
    leader = _leader(nodes, topic)
    followers = [node for node in (1, 2, 3) if node != leader]
    settings = relay_settings(
        nodes.bootstrap,
        RELAY_ACKS=acks,
        RELAY_DELIVERY_TIMEOUT_SECONDS=3,
        RELAY_RETRY_BASE_SECONDS=0.2,
        RELAY_RETRY_CAP_SECONDS=1,
    )
    producer = Producer(producer_settings(nodes.bootstrap, settings.RELAY_DELIVERY_TIMEOUT_SECONDS, acks))
    producer.list_topics(topic, timeout=10)  # the leader is known before the followers freeze
    relay = DatabaseRelay("test", lambda: psycopg.connect(outbox_url), producer, settings, FaultPoints())
    for follower in followers:
        nodes.freeze(follower)
    time.sleep(2 * REPLICA_FETCH_WAIT_MAX_SECONDS)  # the followers' parked fetches expire (module docstring)
    try:
        ids = write_events(outbox_url, topic, [f"order-{n}" for n in range(ROWS)], per_key=1)
        relaying = threading.Thread(target=relay.run, daemon=True)
        relaying.start()
        if lost_expected:  # the leader alone confirms
            wait_for(lambda: _marked_published(outbox_url) == set(ids), 30, "the leader to confirm every row")
        else:  # every in-sync replica must confirm, and two of three are frozen: the batch times out
            wait_for(lambda: _failed_attempts(outbox_url) >= ROWS, 60, "the relay to record the unconfirmed batch")
            assert _marked_published(outbox_url) == set(), "a row was marked published with its followers frozen"
        nodes.kill(leader)
    finally:
        for follower in followers:
            nodes.thaw(follower)
    wait_for(lambda: _leader(nodes, topic) in followers, 60, "a follower to take over the partition")
    wait_for(lambda: _marked_published(outbox_url) == set(ids), 90, "every row to be marked published")
    relay.stop()
    relaying.join(30)
    producer.purge()  # nothing is left to send; destroying a producer with queued sends blocks
    producer.flush(5)
    on_topic = {decode(message.value()).message_id for message in read_topic(nodes.bootstrap, topic, ROWS, 20)}
    lost = set(ids) - on_topic
    if lost_expected:
        assert lost == set(ids), f"{len(lost)} of {ROWS} rows marked published are missing from the topic"
    else:
        assert not lost, f"{len(lost)} rows marked published are missing from the topic: {sorted(lost)[:5]}"
        assert len(on_topic) == ROWS
