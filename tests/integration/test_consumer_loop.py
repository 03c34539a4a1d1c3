"""The Kafka loop in this process: poison messages dead-lettered with their reason while the
consumer keeps going, and batched mode end to end through the broker."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from prometheus_client import REGISTRY

from effectively_once.consumer import wiring
from effectively_once.consumer.loop import ConsumerLoop
from effectively_once.dead_letters import dead_letter_headers
from effectively_once.envelope import MAX_BODY_BYTES, Envelope
from effectively_once.kafka_client import client_config
from services.settings import Settings
from tests.integration.conftest import Topics
from tests.support.waiting import wait_for
from workbench.ledger import LEDGER_ENTRY, entry, ledger_handler, ledger_rows


def _loop(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
    kafka: Mapping[str, object] | None = None,
    **overrides: object,
) -> ConsumerLoop:
    consumer_settings = wiring.ConsumerSettings(
        DATABASE_URL=runtime_db,
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        **overrides,  # type: ignore[arg-type]
    )
    return wiring.build(
        name,
        (topics.events,),
        {LEDGER_ENTRY: ledger_handler(name)},
        consumer_settings,
        dead_letter_topic=topics.dead_letters,
        kafka=kafka,
    )


def _run_until(loop: ConsumerLoop, condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    loop.run(until=lambda: condition() or time.monotonic() > deadline)
    assert condition(), "the consumer did not get there in time"


def _read_all(settings: Settings, topic: str, count: int, timeout: float = 30) -> list[Message]:
    reader = Consumer(
        {
            **client_config(settings.kafka_bootstrap_servers),
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
        }
    )
    reader.subscribe([topic])
    found: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(found) < count and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            found.append(message)
    reader.close()
    return found


def test_every_kind_of_poison_is_dead_lettered_with_its_reason_and_the_consumer_keeps_going(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
) -> None:
    valid = json.loads(entry("order-1").to_json())

    def body(**changes: object) -> bytes:
        return json.dumps({**valid, "message_id": str(uuid.uuid4()), **changes}).encode()

    old = Envelope(
        message_id=str(uuid.uuid4()),
        type=LEDGER_ENTRY,
        key="order-1",
        payload={},
        occurred_at=datetime.now(UTC) - timedelta(days=400),
    )
    mismatched = entry("order-1")
    poison = {
        "undecodable": b"\xff\xfe not json",
        "missing_message_id": json.dumps({k: v for k, v in valid.items() if k != "message_id"}).encode(),
        "unknown_type": body(type="NoSuchEvent"),
        "oversized": body(payload={"blob": "x" * MAX_BODY_BYTES}),
        "invalid_message_id": body(message_id="evil\n'); DROP TABLE ledger; --"),
        "invalid_occurred_at": body(occurred_at="yesterday"),
        "beyond_dedup_horizon": old.to_json(),
        "message_id_mismatch": mismatched.to_json(),
    }
    mismatch: list[tuple[str, str | bytes | None]] = [("eo-message-id", b"not-the-envelopes-id")]
    producer = Producer({**client_config(settings.kafka_bootstrap_servers), "message.max.bytes": 2 * MAX_BODY_BYTES})
    for reason, raw in poison.items():
        producer.produce(
            topics.events, key=b"order-1", value=raw, headers=mismatch if reason == "message_id_mismatch" else []
        )
    last = entry("order-1")
    producer.produce(topics.events, key=b"order-1", value=last.to_json())
    assert producer.flush(30) == 0

    loop = _loop(settings, runtime_db, name, topics)
    _run_until(loop, lambda: ledger_rows(runtime_db, name, last.message_id) == 1)

    dead = _read_all(settings, topics.dead_letters, len(poison))
    reasons = {dead_letter_headers(m)["reason"]: m for m in dead}
    assert set(reasons) == set(poison)
    for reason, raw in poison.items():
        letter = reasons[reason]
        headers = dead_letter_headers(letter)
        assert letter.value() == raw, "the original bytes are kept for a re-drive"
        assert headers["original-topic"] == topics.events
        assert headers["consumer"] == name
        assert headers["error"]
    assert dead_letter_headers(reasons["beyond_dedup_horizon"])["message-id"] == old.message_id
    assert dead_letter_headers(reasons["message_id_mismatch"])["message-id"] == mismatched.message_id
    assert ledger_rows(runtime_db, name) == 1


def test_batched_mode_through_kafka_applies_each_once_and_dead_letters_the_failure(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
) -> None:
    events = [entry(f"order-{n % 5}", fail=(n == 42)) for n in range(200)]
    producer = Producer({**client_config(settings.kafka_bootstrap_servers), "linger.ms": 5})
    for event in [*events, *events[:30]]:  # the first 30 twice: redeliveries
        producer.produce(topics.events, key=event.key, value=event.to_json())
    assert producer.flush(30) == 0

    loop = _loop(settings, runtime_db, name, topics, CONSUMER_BATCH_SIZE=50)
    _run_until(loop, lambda: loop.handled >= 230)
    assert ledger_rows(runtime_db, name) == 199
    dead = _read_all(settings, topics.dead_letters, 1)
    assert [dead_letter_headers(m)["message-id"] for m in dead] == [events[42].message_id]


def test_a_connection_killed_mid_transaction_is_replaced_and_nothing_is_lost_or_doubled(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
) -> None:
    events = [entry(f"order-{n}") for n in range(20)]
    producer = Producer(client_config(settings.kafka_bootstrap_servers))
    for event in events:
        producer.produce(topics.events, key=event.key, value=event.to_json())
    assert producer.flush(30) == 0

    loop = _loop(settings, runtime_db, name, topics)
    killed: list[int] = []

    def kill_my_connection(_point: str) -> None:
        pid = loop.processor.session.connection.info.backend_pid
        with psycopg.connect(runtime_db, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        killed.append(pid)

    loop.processor.faults.arm("after_claim", kill_my_connection, times=3)
    _run_until(loop, lambda: ledger_rows(runtime_db, name) == 20 and loop.handled >= 20)
    assert len(killed) == 3
    assert ledger_rows(runtime_db, name) == 20
    for event in events:
        assert ledger_rows(runtime_db, name, event.message_id) == 1
    dead_lettered = {"consumer": name, "reason": "handler_failed"}
    assert REGISTRY.get_sample_value("eo_consumer_dead_letters_total", dead_lettered) == 0  # created at zero


def test_commit_on_revoke_hands_the_partitions_over_with_their_offsets(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
) -> None:
    events = [entry(f"order-{n}") for n in range(30)]
    producer = Producer(client_config(settings.kafka_bootstrap_servers))
    for event in events:
        producer.produce(topics.events, key=event.key, value=event.to_json())
    assert producer.flush(30) == 0

    # No background commits: only the revoke (or a close) may commit what is stored.
    never = {"auto.commit.interval.ms": 3_600_000}
    first = _loop(settings, runtime_db, name, topics, kafka=never)
    stop = threading.Event()
    runner_thread = threading.Thread(target=first.run, kwargs={"until": stop.is_set})
    runner_thread.start()
    second = None
    try:
        wait_for(lambda: first.handled == 30, 60, "the first member to handle everything")
        assert _committed_total(settings, name, topics.events) == 0
        second = _loop(settings, runtime_db, name, topics, kafka=never)
        second_thread = threading.Thread(target=second.run, kwargs={"until": stop.is_set})
        second_thread.start()
        wait_for(
            lambda: _committed_total(settings, name, topics.events) == 30,
            60,
            "the revoke to commit the stored offsets",
        )
    finally:
        stop.set()
        runner_thread.join(30)
        if second is not None:
            second_thread.join(30)
    assert ledger_rows(runtime_db, name) == 30
    assert second is not None and second.handled == 0  # nothing was handed over twice


def _committed_total(settings: Settings, group: str, topic: str) -> int:
    checker = Consumer({**client_config(settings.kafka_bootstrap_servers), "group.id": group})
    try:
        committed = checker.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    finally:
        checker.close()
    return sum(max(tp.offset, 0) for tp in committed)


def test_a_fatal_client_error_ends_the_loop_instead_of_polling_a_dead_client(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
) -> None:
    """A static member fenced by another with its group.instance.id (as librdkafka's own rejoin
    after a broker restart can do) gets a fatal error: its client will never consume again. The
    loop must end (the runner then ends the process, for its supervisor to restart it), not poll
    the dead client for ever while its partitions' messages wait (a soak found a saga stuck so).
    The classic protocol's fencing, which the member runs here: under the consumer protocol the
    member that joins with an id in use is the one refused (test_consumer_crashes.py)."""
    instance = f"{name}-0"
    loop = _loop(settings, runtime_db, name, topics, EO_INSTANCE_ID=instance, CONSUMER_GROUP_PROTOCOL="classic")
    failed: list[BaseException] = []

    def run() -> None:
        try:
            loop.run()
        except BaseException as error:
            failed.append(error)

    producer = Producer(client_config(settings.kafka_bootstrap_servers))
    producer.produce(topics.events, entry("order-1").to_json(), key=b"order-1")
    assert producer.flush(30) == 0
    member = threading.Thread(target=run)
    member.start()
    wait_for(lambda: loop.handled >= 1, 60, "the first member to be assigned its partition and consume")
    usurper = Consumer(
        {
            **client_config(settings.kafka_bootstrap_servers),
            "group.id": name,
            "group.instance.id": instance,
            "session.timeout.ms": 6000,
            "partition.assignment.strategy": loop.config.assignment,  # as the restarted process's
        }
    )
    usurper.subscribe([topics.events])
    try:
        deadline = time.monotonic() + 60
        while member.is_alive() and time.monotonic() < deadline:
            usurper.poll(0.2)
        member.join(timeout=5)
    finally:
        loop.stop()
        usurper.close()
    assert not member.is_alive(), "the fenced member kept polling a client that will never consume again"
    assert [type(error).__name__ for error in failed] == ["ClientFailed"], failed
    assert "fenced" in str(failed[0]).lower()


def _stalling_loop(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
    once_stopped: Callable[[], None],
    held: frozenset[str] = frozenset(),
) -> ConsumerLoop:
    """A loop whose client stops fetching every partition it is given, behind the loop's back: what a
    member out of a rebalance whose coordinator went away was left with (assigned, never fetched).
    `once_stopped` runs once it has stopped: messages written then cannot have been fetched before."""
    stopped: list[bool] = []

    def stop_fetching(consumer: Consumer) -> None:
        if not stopped and consumer.assignment():
            consumer.pause(consumer.assignment())
            stopped.append(True)
            once_stopped()

    return wiring.build(
        name,
        (topics.events,),
        {LEDGER_ENTRY: ledger_handler(name)},
        wiring.ConsumerSettings(
            DATABASE_URL=runtime_db,
            KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
            CONSUMER_STALL_SECONDS=2,
        ),
        dead_letter_topic=topics.dead_letters,
        between_polls=stop_fetching,
        held_on_purpose=lambda: held,
    )


def _produce(settings: Settings, topic: str, events: list[Envelope]) -> Callable[[], None]:
    def produce() -> None:
        producer = Producer(client_config(settings.kafka_bootstrap_servers, {"acks": "all"}))
        for event in events:
            producer.produce(topic, key=event.key.encode(), value=event.to_json())
        assert producer.flush(30) == 0

    return produce


def _recoveries(name: str, how: str) -> float:
    return REGISTRY.get_sample_value("eo_consumer_stall_recoveries_total", {"consumer": name, "how": how}) or 0.0


def test_a_partition_assigned_and_never_fetched_is_found_stalled_sought_and_its_messages_applied_once(
    settings: Settings, runtime_db: str, name: str, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [entry(f"order-{n}") for n in range(6)]
    loop = _stalling_loop(settings, runtime_db, name, topics, once_stopped=_produce(settings, topics.events, events))
    seen_stalled: list[list[tuple[str, int]]] = []
    check = loop.stall_watch.check

    def check_and_see(consumer: Consumer, held: Collection[str] = ()) -> bool:
        """What the watch holds stalled right after each look: the seek's next poll may consume
        the partition at once, before any condition between polls could see it stalled."""
        rejoin = check(consumer, held)
        if loop.stall_watch.stalled():
            seen_stalled.append(loop.stall_watch.stalled())
        return rejoin

    monkeypatch.setattr(loop.stall_watch, "check", check_and_see)

    def done() -> bool:
        return all(ledger_rows(runtime_db, name, event.message_id) == 1 for event in events)

    _run_until(loop, done, timeout=60)
    assert seen_stalled and all(topic == topics.events for topic, _ in seen_stalled[0]), seen_stalled
    assert _recoveries(name, "seek") >= 1
    assert loop.stall_watch.stalled() == [], "once consumed again, no partition is reported stalled"
    for topic, partition in seen_stalled[0]:
        labels = {"consumer": name, "topic": topic, "partition": str(partition)}
        assert REGISTRY.get_sample_value("eo_consumer_partition_stalled", labels) == 0


def test_a_topic_held_back_on_purpose_is_quiet_not_stalled(
    settings: Settings, runtime_db: str, name: str, topics: Topics
) -> None:
    event = entry("order-held")
    loop = _stalling_loop(
        settings,
        runtime_db,
        name,
        topics,
        once_stopped=_produce(settings, topics.events, [event]),
        held=frozenset({topics.events}),
    )
    started = time.monotonic()
    loop.run(until=lambda: time.monotonic() - started > 6)
    assert ledger_rows(runtime_db, name, event.message_id) == 0, "held back: not consumed"
    assert loop.stall_watch.stalled() == [] and _recoveries(name, "seek") == 0
