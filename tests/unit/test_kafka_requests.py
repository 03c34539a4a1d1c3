"""A process's Kafka requests by kind, from librdkafka's statistics (effectively_once/kafka_requests.py)."""

from __future__ import annotations

import json

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError

from effectively_once import kafka_requests
from effectively_once.consumer.loop import LoopConfig


def _statistics(client: str, **requests: int) -> str:
    return json.dumps({"name": client, "brokers": {"127.0.0.1:9092/1": {"req": requests}}})


def _counted(kind: str) -> float:
    return REGISTRY.get_sample_value("eo_kafka_requests_total", {"kind": kind}) or 0.0


def test_each_document_adds_what_grew_since_the_clients_last() -> None:
    fetches = _counted("Fetch")
    kafka_requests.record(_statistics("consumer-a#1", Fetch=5, Produce=0))
    kafka_requests.record(_statistics("consumer-a#1", Fetch=12, Produce=0))
    kafka_requests.record(_statistics("consumer-b#1", Fetch=3))  # another client counts on its own
    assert _counted("Fetch") - fetches == 15


def test_a_client_made_anew_counts_from_zero_again() -> None:
    commits = _counted("OffsetCommit")
    kafka_requests.record(_statistics("consumer-c#1", OffsetCommit=40))
    kafka_requests.record(_statistics("consumer-c#1", OffsetCommit=2))  # the same name, counters restarted
    assert _counted("OffsetCommit") - commits == 42


def test_an_unreadable_document_is_skipped() -> None:
    kafka_requests.record("{not json")


def test_statistics_are_asked_for_only_with_an_interval() -> None:
    assert kafka_requests.statistics_config({}) == {}
    assert kafka_requests.statistics_config({"KAFKA_STATISTICS_INTERVAL_MS": "0"}) == {}
    config = kafka_requests.statistics_config({"KAFKA_STATISTICS_INTERVAL_MS": "500"})
    assert config == {"statistics.interval.ms": 500, "stats_cb": kafka_requests.record}
    with pytest.raises(ValidationError, match="KAFKA_STATISTICS_INTERVAL_MS"):
        kafka_requests.statistics_config({"KAFKA_STATISTICS_INTERVAL_MS": "1s"})
    with pytest.raises(ValidationError, match="KAFKA_STATISTICS_INTERVAL_MS"):
        kafka_requests.statistics_config({"KAFKA_STATISTICS_INTERVAL_MS": "-5"})


def test_a_client_reading_its_own_statistics_keeps_its_callback_beside_the_counting() -> None:
    read: list[str] = []
    own = {"statistics.interval.ms": 5000, "stats_cb": read.append, "group.id": "g"}
    counting = kafka_requests.statistics_config({"KAFKA_STATISTICS_INTERVAL_MS": "1000"})
    config = kafka_requests.with_counting(own, counting)
    assert config["statistics.interval.ms"] == 1000 and config["group.id"] == "g"
    fetches = _counted("Fetch")
    document = _statistics("consumer-d#1", Fetch=7)
    config["stats_cb"](document)
    assert read == [document]
    assert _counted("Fetch") - fetches == 7
    assert kafka_requests.with_counting(own, {}) == own  # no counting asked: the client's own, untouched


def test_a_client_without_a_callback_of_its_own_gets_the_counting() -> None:
    counting = kafka_requests.statistics_config({"KAFKA_STATISTICS_INTERVAL_MS": "250"})
    assert kafka_requests.with_counting({"acks": "all"}, counting) == {**counting, "acks": "all"}


def test_a_members_lag_statistics_survive_the_request_counting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_STATISTICS_INTERVAL_MS", "1000")
    read: list[str] = []
    member = LoopConfig(bootstrap_servers="127.0.0.1:9", topics=("orders.events",))
    config = member.consumer_settings("g", {"statistics.interval.ms": 5000, "stats_cb": read.append})
    config["stats_cb"](_statistics("consumer-e#1", Fetch=1))
    assert len(read) == 1 and config["statistics.interval.ms"] == 1000
