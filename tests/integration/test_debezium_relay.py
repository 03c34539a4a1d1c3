"""Debezium as the second relay (RELAY=debezium): Kafka Connect's worker with the PostgreSQL
connector and its outbox event router, configured from the launcher's own templates, reads an
outbox's inserts from the write-ahead log and sends exactly what the built-in relay sends."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from effectively_once.outbox import add_to_outbox
from infra.launcher.kafka_broker import ensure_topics
from services.settings import Settings
from tests.support.outbox import make_relay, read_topic, write_events
from tests.support.waiting import wait_for
from workbench.cdc import Cdc, cdc_database
from workbench.ledger import entry

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def cdc(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cdc]:
    with cdc_database(settings, tmp_path_factory.mktemp("connect")) as running:
        yield running


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
        copies.setdefault(_message_id(message), []).append(_as_sent(message))
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


# JSON text PostgreSQL stores: jsonb refuses \u0000 and a lone surrogate (a service writing one fails its own commit)
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)
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


def _unmarked(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        return {row[0] for row in connection.execute("SELECT message_id FROM outbox WHERE published_at IS NULL")}


def _sent(settings: Settings, topic: str, at_least: int) -> set[str]:
    return {_message_id(message) for message in read_topic(settings.kafka_bootstrap_servers, topic, at_least, 10)}


def _confirmed_past(connection: psycopg.Connection, cdc: Cdc, position: Any) -> bool:
    row = connection.execute(
        "SELECT confirmed_flush_lsn >= %s FROM pg_replication_slots WHERE slot_name = %s",
        (position[0], cdc.slot),
    ).fetchone()
    return bool(row and row[0])


def _retained(cdc: Cdc) -> float:
    """What the relay last reported of the slot's retained write-ahead log (its metric)."""
    labels = {"database": "test", "slot": cdc.slot}
    value = REGISTRY.get_sample_value("eo_replication_slot_retained_bytes", labels)
    assert value is not None, "the relay reports the slot's retained log"
    return value


def test_the_relay_marks_a_row_only_once_debeziums_slot_has_confirmed_its_commit(
    settings: Settings, cdc: Cdc, topic: str
) -> None:
    """A row is never marked published before it is on its topic: not while Debezium is paused,
    and not when its transaction began before rows that Debezium sent and confirmed."""
    relay = make_relay(cdc.url, settings.kafka_bootstrap_servers, cdc_slot=cdc.slot)
    marks = psycopg.connect(cdc.url, autocommit=True)
    held = psycopg.connect(cdc.url)
    try:
        relay.mark_read(marks)
        early = entry("order-held")
        add_to_outbox(held, early, topic)  # its transaction stays open while later ones commit
        first = write_events(cdc.url, topic, ["order-a", "order-b"], per_key=2)
        wait_for(lambda: _sent(settings, topic, len(first)) == set(first), 30, "Debezium to send what committed")
        relay.mark_read(marks)  # a watermark taken now, which the slot passes before the pause
        position = marks.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        wait_for(lambda: _confirmed_past(marks, cdc, position), 30, "the slot to confirm past the watermark")
        cdc.connector("pause")
        held.commit()  # committed while Debezium does not read
        relay.mark_read(marks)
        retained_at_pause = _retained(cdc)
        paused = write_events(cdc.url, topic, ["order-c"], per_key=2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            relay.mark_read(marks)
            marked = {early.message_id, *first, *paused} - _unmarked(cdc.url)
            assert marked <= _sent(settings, topic, 1), "a row was marked published before it reached its topic"
        assert early.message_id in _unmarked(cdc.url), "the held transaction's row waits for Debezium"
        assert _retained(cdc) > retained_at_pause, "a paused connector's slot keeps the log written since"

        cdc.connector("resume")
        wait_for(lambda: (relay.mark_read(marks), not _unmarked(cdc.url))[1], 60, "every row to be marked")
        assert _sent(settings, topic, len(first) + 3) == {early.message_id, *first, *paused}
    finally:
        cdc.connector("resume")
        marks.close()
        held.close()


def _message_id(message: Message) -> str:
    value = dict(message.headers() or [])["eo-message-id"]
    assert isinstance(value, bytes)
    return value.decode()


def test_a_worker_killed_while_the_outbox_is_idle_starts_again_where_its_slot_is(
    settings: Settings, cdc: Cdc, topic: str
) -> None:
    """Other tables' log moves the idle slot on (the heartbeat's insert), and the connector's offset
    moves with it: a worker killed then starts from its offset, which its slot still holds."""
    first = write_events(cdc.url, topic, ["order-idle"], per_key=1)
    wait_for(lambda: _sent(settings, topic, 1) >= set(first), 30, "Debezium to send the first row")
    with psycopg.connect(cdc.url, autocommit=True) as connection:
        after_first = connection.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert after_first is not None
        connection.execute("CREATE TABLE IF NOT EXISTS elsewhere (n integer)")

        def slot_holds_only_later_log() -> bool:
            """Log the outbox is not in, and a checkpoint (which lets the slot's restart position
            move on), until the slot no longer holds the log of the first row's commit."""
            connection.execute("INSERT INTO elsewhere SELECT generate_series(1, 5000)")
            connection.execute("CHECKPOINT")
            row = connection.execute(
                "SELECT restart_lsn > %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                (after_first[0], cdc.slot),
            ).fetchone()
            return bool(row and row[0])

        wait_for(slot_holds_only_later_log, 60, "the idle slot to move past the first row's log", interval=0.5)
    cdc.kill()
    cdc.start()  # fails when the offset it resumes from is behind what the slot still holds
    later = write_events(cdc.url, topic, ["order-idle"], per_key=1)
    wait_for(lambda: _sent(settings, topic, 2) >= {*first, *later}, 60, "the restarted worker to send the next row")
