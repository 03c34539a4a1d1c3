"""How many published events the platform's consumers have not consumed yet: the soak is quiet
only when every consumer has caught up, not merely when every order is final (a compensation
such as InventoryReleased is written after the order was cancelled).

A consumer group has caught up when its committed offsets reach the ends of its topics. A share
group commits no offsets (each record is acknowledged on its own, and the Python admin client
cannot read a share group's start offsets): it has caught up when every event of a type it handles
has its marker or its dead letter."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from auditor.dead_letters import read_dead_letters
from auditor.invariants import Query
from auditor.kafka_side import read_events
from effectively_once.kafka_client import client_config
from services import saga_contract as contract
from services.topology import CONSUMERS, TOPIC_PARTITIONS, Consumer


def unconsumed(bootstrap_servers: str, query: Query | None = None, share_groups: Collection[str] = ()) -> int:
    """Events on the consumers' topics beyond what each consumer group committed (a partition it
    never committed counts whole), and those the consumers in `share_groups` have neither marked
    nor dead-lettered (read through `query`); -1 while the brokers do not answer."""
    if share_groups and query is None:
        raise ValueError("share groups are read through their markers: a query is needed")
    admin = AdminClient(client_config(bootstrap_servers, {"log_level": 0}))
    try:
        ends, committed = _positions(admin, [c for c in CONSUMERS if c.name not in share_groups])
        behind = _unhandled(bootstrap_servers, query, share_groups) if query is not None and share_groups else 0
        for positions in committed.values():
            for tp in positions:
                end = ends[(tp.topic, tp.partition)]
                behind += end - tp.offset if tp.offset >= 0 else end
    except KafkaException:
        return -1  # the brokers are not answering yet: not quiet
    return behind


def _positions(
    admin: AdminClient, groups: Sequence[Consumer]
) -> tuple[dict[tuple[str, int], int], dict[str, list[TopicPartition]]]:
    """Each of the groups' partitions' end offset, and each group's committed offsets (an offset
    below 0: nothing committed). Raises KafkaException while the brokers do not answer."""
    partitions = {
        TopicPartition(topic, n) for consumer in groups for topic in consumer.topics for n in range(TOPIC_PARTITIONS)
    }
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    ends = {
        (tp.topic, tp.partition): future.result().offset
        for tp, future in admin.list_offsets(dict.fromkeys(partitions, latest)).items()
    }
    committed = {}
    for consumer in groups:
        wanted = [TopicPartition(topic, n) for topic in consumer.topics for n in range(TOPIC_PARTITIONS)]
        request = [ConsumerGroupTopicPartitions(consumer.name, wanted)]
        committed[consumer.name] = admin.list_consumer_group_offsets(request)[consumer.name].result().topic_partitions
    return ends, committed


def _unhandled(bootstrap_servers: str, query: Query, consumers: Collection[str]) -> int:
    events = read_events(bootstrap_servers)
    letters = {(letter.consumer, letter.message_id) for letter in read_dead_letters(bootstrap_servers)}
    missing = 0
    for consumer in CONSUMERS:
        if consumer.name not in consumers:
            continue
        marked = {
            str(row[0])
            for row in query(
                consumer.database,
                f"SELECT message_id::text FROM processed_message WHERE consumer_name = '{consumer.name}'",
            )
        }
        handled = contract.HANDLED_BY[consumer.name]
        missing += sum(
            1
            for event in events
            if event.topic in consumer.topics
            and event.event_type in handled
            and event.message_id not in marked
            and (consumer.name, event.message_id) not in letters
        )
    return missing


def lagging(
    bootstrap_servers: str, share_groups: Collection[str] = (), consumers: Sequence[Consumer] = CONSUMERS
) -> list[str]:
    """Where the consumer groups wait: each partition a group has not consumed to its end, with its
    committed offset and the end, and each such group's state and how many members it has (a
    partition no member holds waits for ever). Empty when all have caught up; one line saying so
    while the brokers do not answer."""
    admin = AdminClient(client_config(bootstrap_servers, {"log_level": 0}))
    groups = [consumer for consumer in consumers if consumer.name not in share_groups]
    lines: list[str] = []
    try:
        ends, committed = _positions(admin, groups)
        for consumer in groups:
            behind = [
                f"{tp.topic}/{tp.partition} at {tp.offset if tp.offset >= 0 else 'nothing committed'} of "
                f"{ends[(tp.topic, tp.partition)]}"
                for tp in sorted(committed[consumer.name], key=lambda tp: (tp.topic, tp.partition))
                if max(tp.offset, 0) < ends[(tp.topic, tp.partition)]
            ]
            if behind:
                described = admin.describe_consumer_groups([consumer.name])[consumer.name].result()
                held = sorted(
                    f"{tp.topic}/{tp.partition}"
                    for member in described.members
                    for tp in (member.assignment.topic_partitions if member.assignment else [])
                )
                lines.append(
                    f"{consumer.name} ({described.state.name.lower()}, {len(described.members)} member(s) "
                    f"holding {', '.join(held) or 'no partition'}): {'; '.join(behind)}"
                )
    except KafkaException as error:
        return [f"the brokers do not answer ({error.args[0] if error.args else error})"]
    return lines
