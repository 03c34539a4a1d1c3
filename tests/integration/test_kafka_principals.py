"""Every process is its own Kafka principal, and the broker refuses what its ACLs do not allow.

A forged event written into a topic by anyone but the relay is refused at the broker: it never
reaches a consumer. Refused writes leave nothing on the topic, so these tests may aim them at the
platform's own topics; the writes that are allowed are what the end-to-end saga exercises.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from effectively_once.envelope import Envelope
from effectively_once.kafka_client import KafkaPrincipal, client_config
from effectively_once.redelivery_windows import read_windows
from effectively_once.safe_horizon import OLDEST_UNACKNOWLEDGED, TOPIC_RETENTION
from infra.launcher.kafka_broker import admin_client
from infra.launcher.kafka_principals import EVERY_ACL, acl_key, bindings, ensure_principals
from services.kafka_access import OPERATOR, PRINCIPALS, RELAY, Principal
from services.settings import Settings
from services.topology import CONSUMERS, ORDERS_EVENTS, all_topics
from services.topology import Consumer as TopologyConsumer


@pytest.fixture(scope="module")
def enforcing(settings: Settings) -> Settings:
    """The session's Kafka, when it enforces ACLs (the launcher's does; a bare container does not)."""
    admin = admin_client(settings.kafka_bootstrap_servers)  # kept while its future is pending
    try:
        admin.describe_acls(EVERY_ACL).result()
    except KafkaException as error:
        if error.args[0].code() != KafkaError.SECURITY_DISABLED:
            raise
        pytest.skip(f"this Kafka does not enforce ACLs: {error}")
    return settings


def _write(settings: Settings, principal: KafkaPrincipal | None, topic: str) -> KafkaError | None:
    """Produce one forged OrderPlaced to `topic` as `principal`; the delivery's error, None if stored."""
    forged = Envelope.new("OrderPlaced", "order-forged", {"order_id": "order-forged", "lines": []})
    producer = Producer(
        client_config(
            settings.kafka_bootstrap_servers,
            {"acks": "all", "message.timeout.ms": 10_000, "log_level": 0},
            principal or KafkaPrincipal("nobody", "not-a-password"),
        )
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, key=b"order-forged", value=forged.to_json(), on_delivery=lambda e, _: outcome.append(e))
    producer.flush(20)
    return outcome[0] if outcome else KafkaError(KafkaError._MSG_TIMED_OUT)


def _end_offsets(settings: Settings, topic: str) -> list[int]:
    reader = Consumer(client_config(settings.kafka_bootstrap_servers, {"group.id": f"ends-{uuid.uuid4().hex}"}))
    try:
        partitions = reader.list_topics(topic, timeout=10).topics[topic].partitions
        return [reader.get_watermark_offsets(TopicPartition(topic, n), timeout=10)[1] for n in sorted(partitions)]
    finally:
        reader.close()


def _may_write(principal: Principal, topic: str) -> bool:
    return any(
        grant.resource == "topic" and grant.name == topic and "WRITE" in grant.operations for grant in principal.grants
    )


def test_a_forged_event_from_a_consumer_principal_is_refused_and_never_reaches_the_topic(enforcing: Settings) -> None:
    before = _end_offsets(enforcing, ORDERS_EVENTS)
    error = _write(enforcing, enforcing.kafka_principal("payment-authorization-v1"), ORDERS_EVENTS)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    assert _end_offsets(enforcing, ORDERS_EVENTS) == before


def test_a_client_without_a_known_principal_cannot_write_at_all(enforcing: Settings) -> None:
    before = _end_offsets(enforcing, ORDERS_EVENTS)
    error = _write(enforcing, KafkaPrincipal(RELAY, "a-guessed-password"), ORDERS_EVENTS)
    assert error is not None  # authentication fails: the message is never sent
    assert _end_offsets(enforcing, ORDERS_EVENTS) == before


@pytest.mark.parametrize("principal", [p for p in PRINCIPALS if p.name != OPERATOR], ids=lambda p: p.name)
def test_each_principal_is_refused_every_topic_it_was_not_granted(enforcing: Settings, principal: Principal) -> None:
    """Every (principal, topic) write the ACLs do not grant is refused by the broker."""
    refused = [topic for topic in all_topics() if not _may_write(principal, topic)]
    assert refused, "every principal but the operator lacks some topic"
    producer = Producer(
        client_config(
            enforcing.kafka_bootstrap_servers,
            {"acks": "all", "message.timeout.ms": 10_000},
            enforcing.kafka_principal(principal.name),
        )
    )
    outcomes: dict[str, KafkaError | None] = {}
    for topic in refused:
        producer.produce(topic, value=b"forged", on_delivery=lambda e, m: outcomes.__setitem__(str(m.topic()), e))
    producer.flush(30)
    codes = {topic: error.code() if error else None for topic, error in outcomes.items()}
    assert codes == dict.fromkeys(refused, KafkaError.TOPIC_AUTHORIZATION_FAILED)


@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda c: c.name)
def test_a_consumer_principal_may_not_read_what_it_does_not_consume(
    enforcing: Settings, consumer: TopologyConsumer
) -> None:
    other = next(topic for topic in all_topics() if topic not in (*consumer.topics, consumer.dead_letter_topic))
    reader = Consumer(
        client_config(
            enforcing.kafka_bootstrap_servers,
            # A group of its own under the consumer's prefix: the real group is not disturbed.
            {"group.id": f"{consumer.name}-check-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False},
            enforcing.kafka_principal(consumer.name),
        )
    )
    try:
        reader.subscribe([other])
        message = reader.poll(15)
        error = message.error() if message is not None else None
        assert error is not None, "no refusal within 15 s"
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    finally:
        reader.close()


@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda c: c.name)
def test_a_consumer_principal_may_read_what_its_marker_purge_weighs(
    enforcing: Settings, consumer: TopologyConsumer
) -> None:
    """Its topics' retention, its group's committed offsets and its own dead letters: the purge's
    safety check runs as the consumer itself."""
    windows = read_windows(
        enforcing.kafka_bootstrap_servers,
        consumer.name,
        consumer.topics,
        consumer.dead_letter_topic,
        principal=enforcing.kafka_principal(consumer.name),
    )
    retained = [window.detail for window in windows if window.source == TOPIC_RETENTION]
    assert retained == list(consumer.topics)
    assert any(window.source == OLDEST_UNACKNOWLEDGED for window in windows)


def test_the_launcher_takes_back_an_acl_no_longer_granted_and_restores_one_removed(enforcing: Settings) -> None:
    """ensure_principals makes the ACLs exactly the listed ones: an extra grant to a platform
    principal is removed, a listed one that was deleted is created again."""
    admin = admin_client(enforcing.kafka_bootstrap_servers)
    extra = AclBinding(
        ResourceType.TOPIC,
        ORDERS_EVENTS,
        ResourcePatternType.LITERAL,
        "User:payment-authorization-v1",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    relay = next(principal for principal in PRINCIPALS if principal.name == RELAY)
    listed = next(binding for binding in bindings(relay) if binding.name == ORDERS_EVENTS)
    admin.create_acls([extra])[extra].result()
    admin.delete_acls([AclBindingFilter(*acl_key(listed))])[AclBindingFilter(*acl_key(listed))].result()
    changed = ensure_principals(enforcing.kafka_bootstrap_servers, enforcing)
    assert changed == 2
    now = {acl_key(binding) for binding in admin.describe_acls(EVERY_ACL).result()}
    assert acl_key(extra) not in now and acl_key(listed) in now
    error = _write(enforcing, enforcing.kafka_principal("payment-authorization-v1"), ORDERS_EVENTS)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
