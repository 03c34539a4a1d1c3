"""How many published events the platform's consumer groups have not consumed yet: the soak is
quiet only when every group has caught up, not merely when every order is final (a compensation
such as InventoryReleased is written after the order was cancelled)."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from effectively_once.kafka_client import client_config
from services.topology import CONSUMERS, TOPIC_PARTITIONS


def unconsumed(bootstrap_servers: str) -> int:
    """Events on the consumers' topics beyond what each group committed (a partition it never
    committed counts whole)."""
    admin = AdminClient(client_config(bootstrap_servers, {"log_level": 0}))
    partitions = {
        TopicPartition(topic, n) for consumer in CONSUMERS for topic in consumer.topics for n in range(TOPIC_PARTITIONS)
    }
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    try:
        ends = {
            (tp.topic, tp.partition): future.result().offset
            for tp, future in admin.list_offsets(dict.fromkeys(partitions, latest)).items()
        }
        behind = 0
        for consumer in CONSUMERS:
            wanted = [TopicPartition(topic, n) for topic in consumer.topics for n in range(TOPIC_PARTITIONS)]
            request = [ConsumerGroupTopicPartitions(consumer.name, wanted)]
            committed = admin.list_consumer_group_offsets(request)[consumer.name].result().topic_partitions
            for tp in committed:
                end = ends[(tp.topic, tp.partition)]
                behind += end - tp.offset if tp.offset >= 0 else end
    except KafkaException:
        return -1  # the brokers are not answering yet: not quiet
    return behind
