"""A consumer group on either of Kafka's group protocols, and on both at once during a swap.

The classic protocol has the members assign partitions; the consumer protocol (KIP-848, brokers
4.0 and later) has the broker assign them, incrementally. A group whose members use both is
served by the broker as a consumer group, the classic members through the old requests. Whatever
the mix, a member that joins takes partitions, a member that leaves hands its partitions over
with their offsets, and every message is applied once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from effectively_once.consumer.loop import ConsumerLoop
from effectively_once.kafka_client import client_config
from services.settings import Settings
from tests.integration.conftest import Topics
from tests.integration.test_consumer_loop import _loop
from tests.support.waiting import wait_for
from workbench.ledger import entry, ledger_rows

pytestmark = pytest.mark.integration


def _publish(settings: Settings, topic: str, keys: range) -> None:
    producer = Producer({**client_config(settings.kafka_bootstrap_servers), "acks": "all"})
    for key in keys:
        event = entry(f"order-{key}")
        producer.produce(topic, key=event.key, value=event.to_json())
    assert producer.flush(30) == 0


@contextmanager
def _member(settings: Settings, runtime_db: str, name: str, topics: Topics, protocol: str) -> Iterator[ConsumerLoop]:
    loop = _loop(
        settings, runtime_db, name, topics, CONSUMER_GROUP_PROTOCOL=protocol, CONSUMER_ASSIGNMENT="range,roundrobin"
    )
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, kwargs={"until": stop.is_set})
    thread.start()
    try:
        yield loop
    finally:
        stop.set()
        thread.join(60)
        assert not thread.is_alive(), "the member did not close"


def _group(settings: Settings, name: str) -> tuple[str, list[int]]:
    """The group's type (classic or consumer) and how many partitions each member holds."""
    admin = AdminClient(client_config(settings.kafka_bootstrap_servers))
    described = admin.describe_consumer_groups([name])[name].result(timeout=10)
    held = sorted(len(member.assignment.topic_partitions) for member in described.members)
    return str(described.type.name).lower(), held


@pytest.mark.parametrize(
    ("first", "second"),
    [("classic", "classic"), ("consumer", "consumer"), ("classic", "consumer")],
    ids=["classic", "consumer", "a swap from classic to consumer"],
)
def test_members_of_either_protocol_share_the_partitions_and_apply_each_message_once(
    settings: Settings, runtime_db: str, name: str, topics: Topics, first: str, second: str
) -> None:
    _publish(settings, topics.events, range(0, 30))
    with _member(settings, runtime_db, name, topics, first):
        wait_for(lambda: ledger_rows(runtime_db, name) == 30, 60, "the first member to apply the first 30")
        with _member(settings, runtime_db, name, topics, second):
            wait_for(lambda: _group(settings, name)[1] == [1, 2], 60, "the two members to share the 3 partitions")
            kind, _ = _group(settings, name)
            assert kind == ("consumer" if "consumer" in (first, second) else "classic")
            _publish(settings, topics.events, range(30, 60))
            wait_for(lambda: ledger_rows(runtime_db, name) == 60, 60, "both members to apply the next 30")
        # The second left: the first takes its partitions back, from their committed offsets.
        wait_for(lambda: _group(settings, name)[1] == [3], 60, "the first member to hold every partition again")
        _publish(settings, topics.events, range(60, 90))
        wait_for(lambda: ledger_rows(runtime_db, name) == 90, 60, "the first member to apply the last 30")
    assert ledger_rows(runtime_db, name) == 90
