"""Debezium as the second relay (RELAY=debezium): Kafka Connect's worker with the PostgreSQL
connector and its outbox event router, configured from the launcher's own templates, reads an
outbox's inserts from the write-ahead log and sends exactly what the built-in relay sends."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from psycopg import sql

from effectively_once import schema
from effectively_once.outbox import add_to_outbox
from infra.launcher import kafka_connect
from infra.launcher.kafka_broker import ensure_topics
from infra.launcher.preflight import require_java
from services.kafka_access import ADMIN
from services.settings import Settings
from tests.support.ledger import entry
from tests.support.network import free_port
from tests.support.outbox import make_relay, read_topic, write_events

pytestmark = pytest.mark.timeout(600)


@dataclass
class Cdc:
    """A database of its own with the runtime's tables, read by a Connect worker of its own."""

    url: str
    worker: subprocess.Popen[bytes]
    log: Path


@pytest.fixture(scope="module")
def cdc(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cdc]:
    name = f"cdc_{uuid.uuid4().hex[:8]}"
    role, password = f"{name}_reader", uuid.uuid4().hex
    admin_url = settings.admin_database_url
    url = kafka_connect.database_url(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN REPLICATION PASSWORD {}").format(sql.Identifier(role), sql.Literal(password))
        )
    with psycopg.connect(url, autocommit=True) as connection:
        for migration in sorted(schema.MIGRATIONS.glob("*.sql")):
            connection.execute(migration.read_text())
        connection.execute(sql.SQL("GRANT SELECT ON outbox TO {}").format(sql.Identifier(role)))
    kafka_connect.ensure_slot(url, kafka_connect.slot_name(name))

    directory = tmp_path_factory.mktemp("connect")
    port = free_port()
    worker = kafka_connect.render_worker(
        directory, settings.kafka_bootstrap_servers, settings.kafka_principal(ADMIN), port
    )
    connector = kafka_connect.render_connector(directory, admin_url, name, role, password)
    libs = kafka_connect.ensure_jars(settings, print)
    command = kafka_connect.java_command(require_java(None), libs, "256m", worker, [connector])
    log = directory / "worker.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)

    def alive() -> None:
        if process.poll() is not None:
            raise AssertionError(f"the Connect worker exited: {log.read_text()[-3000:]}")

    try:
        kafka_connect.wait_until_running(port, 180, alive, [name])
        yield Cdc(url, process, log)
    finally:
        process.kill()
        process.wait()
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("SELECT pg_drop_replication_slot(%s)", (kafka_connect.slot_name(name),))
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def topic(settings: Settings) -> str:
    name = f"test.cdc.{uuid.uuid4().hex[:10]}"
    ensure_topics(settings.kafka_bootstrap_servers, (name,))
    return name


def _as_sent(message: Message) -> tuple[Any, ...]:
    """What a consumer receives, beside where: key, value, headers (in any order), partition."""
    return (message.key(), message.value(), sorted(message.headers() or []), message.partition())


def _both_relays_send(settings: Settings, cdc: Cdc, topic: str, count: int) -> dict[str, list[tuple[Any, ...]]]:
    """Read Debezium's copy of `count` rows, then let the built-in relay send the same rows; each
    message id's two copies, Debezium's first."""
    from_debezium = read_topic(settings.kafka_bootstrap_servers, topic, count)
    assert len(from_debezium) == count, f"Debezium sent {len(from_debezium)} of {count}: {cdc.log.read_text()[-2000:]}"
    relay = make_relay(cdc.url, settings.kafka_bootstrap_servers)
    with psycopg.connect(cdc.url) as work:
        while relay.relay_once(work):
            pass
    copies: dict[str, list[tuple[Any, ...]]] = {}
    for message in read_topic(settings.kafka_bootstrap_servers, topic, 2 * count):
        headers = dict(message.headers() or [])
        message_id = headers["eo-message-id"]
        assert isinstance(message_id, bytes)
        copies.setdefault(message_id.decode(), []).append(_as_sent(message))
    return copies


def test_debezium_sends_what_the_built_in_relay_sends_to_the_same_partition(
    settings: Settings, cdc: Cdc, topic: str
) -> None:
    ids = write_events(cdc.url, topic, [f"order-{n}" for n in range(6)], per_key=3)
    copies = _both_relays_send(settings, cdc, topic, len(ids))
    assert set(copies) == set(ids)
    for message_id, (debezium, builtin) in ((i, copies[i]) for i in ids):
        assert debezium == builtin, f"{message_id}: Debezium sent {debezium}, the built-in relay {builtin}"
        assert [name for name, _ in debezium[2]] == ["eo-message-id", "eo-trace-id"]


TEXT = st.text(st.characters(blacklist_characters="\x00"), max_size=40)  # jsonb refuses \u0000
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)


@hypothesis_settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.dictionaries(TEXT, JSON_VALUES, max_size=5), min_size=1, max_size=15))
def test_any_payload_reaches_consumers_as_the_same_bytes_from_either_relay(
    settings: Settings, cdc: Cdc, payloads: list[dict[str, Any]]
) -> None:
    topic = f"test.cdc.{uuid.uuid4().hex[:10]}"
    ensure_topics(settings.kafka_bootstrap_servers, (topic,))
    ids = []
    with psycopg.connect(cdc.url) as connection:
        for payload in payloads:
            event = entry("order-any", **{"blob": payload})
            with connection.transaction():
                add_to_outbox(connection, event, topic)
            ids.append(event.message_id)
    copies = _both_relays_send(settings, cdc, topic, len(ids))
    for message_id in ids:
        debezium, builtin = copies[message_id]
        assert debezium == builtin
