"""The foundation works end to end: a message goes through the real broker, a consumer group
writes it to PostgreSQL, commits, and only then commits its offset."""

from __future__ import annotations

import time
import uuid

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition

from effectively_once.kafka_client import client_config
from infra.launcher.kafka_broker import ensure_topics
from services.settings import Settings
from services.topology import database

MESSAGES = 6


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            **client_config(bootstrap),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def test_message_round_trips_through_kafka_into_postgres_with_offset_committed_after(
    settings: Settings,
) -> None:
    run = uuid.uuid4().hex[:12]
    topic, group, consumer_name = f"test.round-trip.{run}", f"round-trip-{run}", f"round-trip-{run}"
    ensure_topics(settings.kafka_bootstrap_servers, (topic,))
    sent = {f"msg-{run}-{n}": f"order-{n % 3}" for n in range(MESSAGES)}

    producer = Producer(
        {
            **client_config(settings.kafka_bootstrap_servers),
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    for message_id, key in sent.items():
        producer.produce(topic, key=key, value=message_id.encode())
    assert producer.flush(30) == 0, "the broker did not confirm every message"

    orders = database("orders")
    consumer = _consumer(settings.kafka_bootstrap_servers, group)
    consumer.subscribe([topic])
    received: dict[str, tuple[int, int]] = {}
    deadline = time.monotonic() + 60
    try:
        with psycopg.connect(settings.service_database_url(orders)) as connection:
            while len(received) < MESSAGES and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None or message.error():
                    continue
                message_id = (message.value() or b"").decode()
                with connection.transaction():
                    connection.execute(
                        "INSERT INTO processed_message (consumer_name, message_id, id_time) "
                        "VALUES (%s, %s, message_id_time(%s))",
                        (consumer_name, message_id, message_id),
                    )
                # Acknowledge only once the transaction has committed.
                consumer.commit(message=message, asynchronous=False)
                received[message_id] = (message.partition() or 0, message.offset() or 0)
    finally:
        consumer.close()

    assert set(received) == set(sent)
    with psycopg.connect(settings.service_database_url(orders)) as connection:
        stored = {
            row[0]
            for row in connection.execute(
                "SELECT message_id FROM processed_message WHERE consumer_name = %s",
                (consumer_name,),
            )
        }
    assert stored == set(sent)

    # A new member of the group sees every offset committed past what it consumed.
    expected: dict[int, int] = {}
    for partition, offset in received.values():
        expected[partition] = max(expected.get(partition, -1), offset + 1)
    checker = _consumer(settings.kafka_bootstrap_servers, group)
    try:
        committed = checker.committed([TopicPartition(topic, p) for p in expected], timeout=10)
    finally:
        checker.close()
    assert {tp.partition: tp.offset for tp in committed} == expected
