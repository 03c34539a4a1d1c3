"""What could still be delivered again to one consumer, read from Kafka: its topics' retention, its
group's oldest unacknowledged message and its oldest dead letter (safe_horizon.py weighs them).

Nothing here joins the group or commits: the committed offsets are read, and single messages are
fetched by assigning partitions. A message's age is taken as the consumer's horizon check takes
it: from the time its UUIDv7 id carries, else its envelope's `occurred_at`, else (an undecodable
message) its Kafka timestamp.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

from .envelope import PoisonMessage, decode
from .kafka_client import KafkaPrincipal, client_config
from .message_ids import message_id_time
from .safe_horizon import OLDEST_DEAD_LETTER, OLDEST_UNACKNOWLEDGED, TOPIC_RETENTION, HorizonUnknown, Window

UNLIMITED = -1


class WindowsUnavailable(HorizonUnknown):
    """Kafka could not be read (unreachable, or this principal may not describe the topics)."""


def read_windows(
    bootstrap_servers: str,
    group: str,
    topics: Sequence[str],
    dead_letter_topic: str | None,
    now: datetime | None = None,
    timeout: float = 10,
    principal: KafkaPrincipal | None = None,
) -> list[Window]:
    """The consumer's windows: one per topic's retention, its oldest unacknowledged message, and its
    oldest dead letter (when its dead-letter topic holds any). As `principal`, else the environment's."""
    now = now or datetime.now(UTC)
    try:
        admin = AdminClient(client_config(bootstrap_servers, {"log_level": 0}, principal))
        windows = _retention(admin, topics, timeout)
        reader = Consumer(
            client_config(
                bootstrap_servers,
                {"group.id": group, "enable.auto.commit": False, "log_level": 0},
                principal,
            )
        )
        try:
            windows.append(_oldest_unacknowledged(reader, topics, now, timeout))
            if dead_letter_topic:
                oldest = _oldest_dead_letter(reader, dead_letter_topic, now, timeout)
                if oldest is not None:
                    windows.append(oldest)
        finally:
            reader.close()
    except KafkaException as error:
        raise WindowsUnavailable(str(error.args[0])) from error
    except TimeoutError as error:  # an admin request's future that did not finish
        raise WindowsUnavailable(f"Kafka did not answer within {timeout} s") from error
    return windows


def _retention(admin: AdminClient, topics: Sequence[str], timeout: float) -> list[Window]:
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in topics]
    windows = []
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        entries = future.result(timeout=timeout)
        milliseconds = int(entries["retention.ms"].value)
        compacted = "compact" in str(entries["cleanup.policy"].value)
        unlimited = milliseconds == UNLIMITED or compacted
        windows.append(
            Window(
                TOPIC_RETENTION,
                None if unlimited else milliseconds / 1000,
                f"{resource.name}{', compacted' if compacted else ''}",
            )
        )
    return windows


def _oldest_unacknowledged(reader: Consumer, topics: Sequence[str], now: datetime, timeout: float) -> Window:
    """The oldest message at a committed offset short of its partition's end: the first one a
    restarted member would be given (a partition never committed starts at its earliest)."""
    metadata = reader.list_topics(timeout=timeout)
    partitions = [
        TopicPartition(topic, partition)
        for topic in topics
        for partition in sorted(metadata.topics[topic].partitions if topic in metadata.topics else {})
    ]
    waiting = []
    for committed in reader.committed(partitions, timeout=timeout):
        low, high = reader.get_watermark_offsets(TopicPartition(committed.topic, committed.partition), timeout=timeout)
        position = low if committed.offset == OFFSET_INVALID or committed.offset < low else committed.offset
        if position < high:
            waiting.append(TopicPartition(committed.topic, committed.partition, position))
    ages = [_age(message, now) for message in _fetch(reader, waiting, timeout)]
    where = f"{len(waiting)} partition(s) behind" if waiting else "nothing waiting"
    return Window(OLDEST_UNACKNOWLEDGED, max(ages, default=0.0), where)


def _oldest_dead_letter(reader: Consumer, topic: str, now: datetime, timeout: float) -> Window | None:
    metadata = reader.list_topics(topic, timeout=timeout)
    firsts = []
    for partition in sorted(metadata.topics[topic].partitions if topic in metadata.topics else {}):
        low, high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        if low < high:
            firsts.append(TopicPartition(topic, partition, low))
    ages = [_age(message, now) for message in _fetch(reader, firsts, timeout)]
    return Window(OLDEST_DEAD_LETTER, max(ages), topic) if ages else None


def _fetch(reader: Consumer, positions: list[TopicPartition], timeout: float) -> list[Message]:
    """The one message at each position (a partition whose message was deleted meanwhile gives the
    next one, which is younger: the age read is never more than the truth)."""
    if not positions:
        return []
    reader.assign(positions)
    wanted = {(position.topic, position.partition) for position in positions}
    found: dict[tuple[str, int], Message] = {}
    try:
        deadline = time.monotonic() + timeout
        while wanted - found.keys() and time.monotonic() < deadline:
            message = reader.poll(0.2)
            if message is None or message.error() is not None:
                continue
            where = (message.topic() or "", message.partition() or 0)
            if where in wanted and where not in found:
                found[where] = message
                reader.pause([TopicPartition(*where)])
    finally:
        reader.unassign()
    if wanted - found.keys():
        raise WindowsUnavailable(f"could not read {sorted(wanted - found.keys())} within {timeout} s")
    return list(found.values())


def _age(message: Message, now: datetime) -> float:
    """As marker retention counts it: from the time the message id carries, else occurred_at."""
    try:
        event = decode(message.value())
        born = message_id_time(event.message_id) or event.occurred_at
    except PoisonMessage:
        _, milliseconds = message.timestamp()
        born = datetime.fromtimestamp(milliseconds / 1000, UTC)
    return max(0.0, (now - born).total_seconds())
