"""The safe horizon, read from the real broker: a topic's retention, a group's oldest message not
yet acknowledged and the oldest dead letter each set how long markers must be kept, and the
purge refuses to run with a shorter retention, leaving every marker where it was."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]
from prometheus_client import REGISTRY

from effectively_once import cli
from effectively_once.envelope import Envelope
from effectively_once.kafka_client import client_config
from effectively_once.redelivery_windows import read_windows
from effectively_once.retention import MarkerPurger
from effectively_once.safe_horizon import (
    OLDEST_DEAD_LETTER,
    OLDEST_UNACKNOWLEDGED,
    TOPIC_RETENTION,
    Verdict,
    Window,
    verdict,
)
from infra.launcher import kafka_broker
from services.settings import Settings
from tests.support.markers import backdated_markers, marker_count
from tests.support.waiting import wait_for

HOUR = 3600.0


def _topic(settings: Settings, retention_ms: int) -> str:
    topic = f"test.horizon.{uuid.uuid4().hex[:10]}"
    admin = kafka_broker.admin_client(settings.kafka_bootstrap_servers)
    config = {"retention.ms": str(retention_ms)}
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=-1, config=config)]
    ).values():
        future.result()
    return topic


def _publish(settings: Settings, topic: str, events: list[Envelope]) -> None:
    producer = Producer(client_config(settings.kafka_bootstrap_servers, {"acks": "all"}))
    for event in events:
        producer.produce(topic, key=event.key.encode(), value=event.to_json())
    assert producer.flush(30) == 0


def _aged(hours: float, key: str = "order-1") -> Envelope:
    return Envelope.new("Step", key, {}, at=datetime.now(UTC) - timedelta(hours=hours))


def _commit(settings: Settings, group: str, topic: str, offsets: dict[int, int]) -> None:
    committer = Consumer(client_config(settings.kafka_bootstrap_servers, {"group.id": group}))
    try:
        committer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        committer.close()


def _by_source(windows: list[Window]) -> dict[str, Window]:
    return {window.source: window for window in windows}


def test_each_window_is_read_from_what_the_broker_holds(settings: Settings) -> None:
    """Retention from the topic's config; the oldest unacknowledged message is the one at the
    committed offset (older acknowledged ones do not count); the oldest dead letter by its event."""
    events, dead_letters = _topic(settings, 6 * 3_600_000), _topic(settings, 7 * 86_400_000)
    group = f"horizon-{uuid.uuid4().hex[:8]}"
    first, waiting, later = _aged(50, "k"), _aged(3, "k"), _aged(1, "k")  # one key: one partition
    _publish(settings, events, [first, waiting, later])
    partition = _partition_of(settings, events)
    _commit(settings, group, events, {partition: 1})  # `first` acknowledged, `waiting` not
    _publish(settings, dead_letters, [_aged(40), _aged(2, "other")])

    windows = _by_source(read_windows(settings.kafka_bootstrap_servers, group, (events,), dead_letters))

    assert windows[TOPIC_RETENTION].seconds == 6 * HOUR and windows[TOPIC_RETENTION].detail == events
    assert windows[OLDEST_UNACKNOWLEDGED].seconds == pytest.approx(3 * HOUR, abs=60)
    assert windows[OLDEST_DEAD_LETTER].seconds == pytest.approx(40 * HOUR, abs=60)
    judged = verdict(timedelta(days=1), windows.values())
    assert not judged.safe and judged.bound_by == windows[OLDEST_DEAD_LETTER]
    assert verdict(timedelta(days=2), windows.values()).safe


def test_a_group_that_never_committed_waits_from_the_earliest_and_an_empty_dead_letter_topic_adds_nothing(
    settings: Settings,
) -> None:
    events, dead_letters = _topic(settings, 3_600_000), _topic(settings, 3_600_000)
    _publish(settings, events, [_aged(5)])
    windows = _by_source(
        read_windows(settings.kafka_bootstrap_servers, f"new-{uuid.uuid4().hex}", (events,), dead_letters)
    )
    assert windows[OLDEST_UNACKNOWLEDGED].seconds == pytest.approx(5 * HOUR, abs=60)
    assert OLDEST_DEAD_LETTER not in windows


def test_a_topic_kept_for_ever_has_no_safe_finite_horizon(settings: Settings) -> None:
    events = _topic(settings, -1)
    windows = read_windows(settings.kafka_bootstrap_servers, f"g-{uuid.uuid4().hex}", (events,), None)
    judged = verdict(timedelta(days=3650), windows)
    assert judged.shortest_safe_seconds is None and not judged.safe
    assert "no limit" in judged.reason()


def _partition_of(settings: Settings, topic: str) -> int:
    reader = Consumer(client_config(settings.kafka_bootstrap_servers, {"group.id": f"r-{uuid.uuid4().hex}"}))
    try:
        for partition in (0, 1):
            low, high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                return partition
    finally:
        reader.close()
    raise AssertionError("nothing published")


def _gauge(name: str, consumer: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"consumer": consumer})


def test_the_purge_refuses_a_retention_shorter_than_a_dead_letter_that_can_still_come_back(
    settings: Settings, runtime_db: str, name: str
) -> None:
    """A dead letter 35 days old can be re-driven; with markers kept 30 days its marker would be
    gone. The purger keeps every marker and says why; once the dead letter is gone, it purges."""
    events, dead_letters = _topic(settings, 7 * 86_400_000), _topic(settings, 60 * 86_400_000)
    _publish(settings, dead_letters, [_aged(35 * 24)])
    backdated_markers(runtime_db, name, 20, days_old=40)
    backdated_markers(runtime_db, name, 5, days_old=1)
    topics = [dead_letters]

    def weigh(horizon: timedelta) -> Verdict:
        dead_letter_topic = topics[0] if topics else None
        return verdict(horizon, read_windows(settings.kafka_bootstrap_servers, name, (events,), dead_letter_topic))

    purger = MarkerPurger(
        lambda: psycopg.connect(runtime_db), name, timedelta(days=30), timedelta(milliseconds=50), check=weigh
    )
    assert not purger.safe_to_purge()
    assert purger.last_verdict is not None and "oldest dead letter" in purger.last_verdict.reason()
    assert _gauge("eo_marker_purge_refused", name) == 1
    assert _gauge("eo_safe_horizon_seconds", name) == pytest.approx(35 * 86400, abs=120)
    assert _gauge("eo_oldest_dead_letter_seconds", name) == pytest.approx(35 * 86400, abs=120)
    purger.start()
    try:
        rounds = purger.rounds
        wait_for(lambda: purger.rounds >= rounds + 3, 30, "three refused rounds")
        assert marker_count(runtime_db, name) == 25, "a refused purge deleted markers"
        topics.clear()  # the dead letter was dealt with: nothing older than the retention is left
        wait_for(lambda: marker_count(runtime_db, name) == 5, 30, "the purge once it is safe")
    finally:
        purger.stop()
    assert _gauge("eo_marker_purge_refused", name) == 0


def test_the_horizon_command_prints_each_window_and_exits_1_when_the_retention_is_shorter(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    events = _topic(settings, 10 * 86_400_000)
    consumer = f"loyalty-{uuid.uuid4().hex[:8]}"
    common = ["--consumer", consumer, "--topic", events, "--bootstrap-servers", settings.kafka_bootstrap_servers]
    cli.horizon_main([*common, "--horizon-days", "30", "--window", "provider-keys=24"])
    said = capsys.readouterr().out
    assert f"topic retention ({events})" in said and "10.0 d" in said and "provider-keys (given)" in said
    assert "safe: the configured retention (30.0 d) covers the longest window, topic retention" in said
    with pytest.raises(SystemExit) as exit_:
        cli.horizon_main([*common, "--horizon-days", "7"])
    assert exit_.value.code == 1
    assert "UNSAFE: the configured retention (7.0 d) is shorter than topic retention" in capsys.readouterr().out


def test_a_weighed_purge_refuses_an_unsafe_retention_and_purges_nothing(
    settings: Settings, runtime_db: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    events = _topic(settings, 10 * 86_400_000)
    backdated_markers(runtime_db, name, 4, days_old=9)
    weighed = ["--database-url", runtime_db, "--consumer", name, "--no-outbox", "--topic", events]
    weighed += ["--bootstrap-servers", settings.kafka_bootstrap_servers]
    with pytest.raises(SystemExit, match="refused, nothing purged"):
        cli.purge_main([*weighed, "--horizon-days", "8"])
    assert marker_count(runtime_db, name) == 4
    cli.purge_main([*weighed, "--horizon-days", "11"])
    assert marker_count(runtime_db, name) == 4  # nothing is 11 days old: safe, and nothing to purge
    assert "safe: " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--consumer", "c"], "at least one --topic"),
        (["--consumer", "c", "--topic", "t", "--window", "keys"], "is not NAME=HOURS"),
        (["--consumer", "c", "--topic", "t", "--window", "keys=-3"], "is not NAME=HOURS"),
        (["--consumer", "c", "--topic", "t", "--horizon-days", "0"], "is not a positive number"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    arguments: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.horizon_main(arguments)
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_an_unreachable_broker_is_one_line_naming_what_could_not_be_read() -> None:
    with pytest.raises(SystemExit, match="could not read what could be delivered again"):
        cli.horizon_main(["--consumer", "c", "--topic", "t", "--bootstrap-servers", "127.0.0.1:9"])
