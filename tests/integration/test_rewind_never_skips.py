"""A member's rewind against a real broker: back to the time, never past a message it has not had.

The member stands after offset 1 of six messages (0-2 written a minute before 3-5). A rewind to
the later minute would land on 3 and skip 2; a rewind to a time after every message would land on
the partition's end, resolved at the next fetch. Both must leave it at 2.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from effectively_once.contract.kafka import new_topics
from effectively_once.kafka_client import client_config
from effectively_once.lab.controls import LabControls
from effectively_once.telemetry import NoTelemetry
from services.settings import Settings

pytestmark = pytest.mark.integration

EARLIER_MS = int(time.time() * 1000) - 120_000
LATER_MS = EARLIER_MS + 60_000


@pytest.fixture
def topic(settings: Settings) -> str:
    topic = new_topics(settings.kafka_bootstrap_servers, "rewind").events
    producer = Producer({**client_config(settings.kafka_bootstrap_servers), "acks": "all"})
    for offset in range(6):
        stamp = EARLIER_MS if offset < 3 else LATER_MS
        producer.produce(topic, value=str(offset).encode(), timestamp=stamp)
    assert producer.flush(30) == 0
    return topic


def _member(settings: Settings, topic: str, group: str) -> Consumer:
    consumer = Consumer(
        client_config(
            settings.kafka_bootstrap_servers,
            {"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"},
        )
    )
    consumer.assign([TopicPartition(topic, 0)])
    return consumer


def _next(consumer: Consumer) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message: Message | None = consumer.poll(1)
        if message is not None and message.error() is None:
            return message.offset() or 0
    raise AssertionError("no message within 30 s")


@pytest.fixture
def standing_after_one(settings: Settings, topic: str) -> Iterator[Consumer]:
    """A member that has had offsets 0 and 1, and stands at 2."""
    consumer = _member(settings, topic, f"rewind-{uuid.uuid4().hex[:8]}")
    assert [_next(consumer), _next(consumer)] == [0, 1]
    yield consumer
    consumer.close()


def _rewind(consumer: Consumer, to_ms: int | None) -> object:
    return LabControls("rewind-test-v1", NoTelemetry())._rewind(consumer, to_ms)[0]["offset"]


@pytest.mark.parametrize(
    ("to_ms", "lands_on"),
    [
        pytest.param(LATER_MS, 2, id="a time the member has not reached"),
        pytest.param(LATER_MS + 3_600_000, 2, id="a time after every message"),
        pytest.param(EARLIER_MS, 0, id="a time the member is past"),
        pytest.param(None, "beginning", id="the beginning"),
    ],
)
def test_a_rewind_never_skips_what_the_member_has_not_had(
    standing_after_one: Consumer, to_ms: int | None, lands_on: object
) -> None:
    assert _rewind(standing_after_one, to_ms) == lands_on
    assert _next(standing_after_one) == (0 if lands_on == "beginning" else lands_on)


def test_a_member_that_has_had_nothing_yet_stands_at_its_group_committed_offset(settings: Settings, topic: str) -> None:
    group = f"rewind-{uuid.uuid4().hex[:8]}"
    committer = _member(settings, topic, group)
    committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    committer.close()
    fresh = _member(settings, topic, group)
    try:
        assert _rewind(fresh, LATER_MS) == 1
        assert _next(fresh) == 1
    finally:
        fresh.close()
