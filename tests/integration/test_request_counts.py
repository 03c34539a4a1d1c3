"""What `make bench` counts per order (benchmarks/order_counts.py), against the real servers: a
Kafka client's requests by kind, and a session's statements and transactions as PostgreSQL logs
them under its application_name."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from confluent_kafka import Producer
from prometheus_client import REGISTRY

from benchmarks.order_counts import Statements, count_statements, statement_log
from effectively_once.kafka_client import client_config
from services.settings import Settings
from tests.integration.conftest import Topics
from tests.support.waiting import wait_for


def _produced() -> float:
    return REGISTRY.get_sample_value("eo_kafka_requests_total", {"kind": "Produce"}) or 0.0


def test_a_client_asked_for_statistics_counts_its_produce_requests(
    settings: Settings, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_STATISTICS_INTERVAL_MS", "100")
    before = _produced()
    producer = Producer({**client_config(settings.kafka_bootstrap_servers), "acks": "all", "linger.ms": 0})
    for n in range(5):
        producer.produce(topics.events, key=str(n), value=b"{}")
        assert producer.flush(30) == 0  # one request each: the next is sent after the last is confirmed

    def counted() -> bool:
        producer.poll(0.1)  # the statistics are delivered from poll
        return _produced() - before >= 5

    wait_for(counted, 30, "the producer's statistics to count its five Produce requests")


def test_the_statement_log_counts_a_sessions_statements_and_transactions(settings: Settings) -> None:
    application = f"count-probe-{uuid.uuid4().hex[:8]}"
    log = settings.EO_STATE_DIR / "logs" / "postgres.log"
    with statement_log(settings.admin_database_url, log) as logged:
        with psycopg.connect(settings.admin_database_url, application_name=application, autocommit=True) as session:
            with session.transaction():
                session.execute("SELECT 1")
                session.execute("SELECT %s::int", (2,))
            session.execute("SELECT 3")

        def ours() -> Statements:
            return count_statements(logged()).get(application, Statements())

        wait_for(lambda: ours().statements >= 5, 30, "the server to log the session's five statements")
        assert ours() == Statements(statements=5, transactions=2)
    with psycopg.connect(settings.admin_database_url, autocommit=True) as admin:
        restored = admin.execute("SELECT setting FROM pg_settings WHERE name = 'log_statement'").fetchone()
    assert restored == ("none",)
