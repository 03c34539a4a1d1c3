"""Where a soak's sagas wait once every event is on Kafka (soak/consumer_lag.lagging): the group,
its state and members, and each partition it has not consumed to its end."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer, TopicPartition

from effectively_once.kafka_client import client_config
from infra.launcher.kafka_broker import ensure_topics
from services.settings import Settings
from services.topology import Consumer
from soak.consumer_lag import lagging


def test_a_group_behind_on_a_partition_is_named_with_its_offsets_and_its_members(settings: Settings) -> None:
    bootstrap = settings.kafka_bootstrap_servers
    run = uuid.uuid4().hex[:10]
    group = Consumer(f"lag-probe-{run}-v1", "inventory", (f"test.lag.{run}",))
    ensure_topics(bootstrap, group.topics)
    producer = Producer({**client_config(bootstrap), "acks": "all"})
    for n in range(3):
        producer.produce(group.topics[0], value=b"{}", partition=0, key=str(n))
    assert producer.flush(30) == 0
    committer = KafkaConsumer({**client_config(bootstrap), "group.id": group.name, "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(group.topics[0], 0, 1)], asynchronous=False)
        [line] = lagging(bootstrap, consumers=[group])
        assert line.startswith(f"{group.name} (") and "0 member(s) holding no partition" in line, line
        assert f"{group.topics[0]}/0 at 1 of 3" in line, line
        assert f"{group.topics[0]}/1 at nothing committed" not in line, line  # an empty partition is not behind
        committer.commit(offsets=[TopicPartition(group.topics[0], 0, 3)], asynchronous=False)
        assert lagging(bootstrap, consumers=[group]) == []
    finally:
        committer.close()
