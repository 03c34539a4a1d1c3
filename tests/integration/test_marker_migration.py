"""Upgrades lose no claim: a message applied before migration 0008 is a duplicate after it, under
whatever occurred_at a copy carries, whether its marker was written in 0005's table (keyed with
occurred_at, the bug's doubles among them) or left in the legacy table from before 0005."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import psycopg
from hypothesis import given, settings
from hypothesis import strategies as st

from effectively_once import schema
from effectively_once.consumer.duplicates_ahead import committed_markers
from effectively_once.consumer.transaction import claim
from effectively_once.envelope import Envelope
from effectively_once.retention import purge_markers
from tests.integration.conftest import isolated_schema
from tests.support.markers import minted_at

RUNTIME = sorted(schema.MIGRATIONS.glob("*.sql"))
BEFORE_0005 = [m for m in RUNTIME if m.name < "0005"]
FROM_0005_TO_0007 = [m for m in RUNTIME if "0005" <= m.name < "0008"]
KEYED_BY_MESSAGE_ID = schema.MIGRATIONS / "0008_markers_keyed_by_message_id.sql"
NOW = datetime.now(UTC)


def _copy(message_id: str, occurred_at: datetime) -> Envelope:
    return replace(Envelope.new("Test", "k", {}), message_id=message_id, occurred_at=occurred_at)


def _markers(connection: psycopg.Connection, consumer: str) -> list[tuple[str, int]]:
    rows = connection.execute(
        "SELECT message_id, count(*) FROM processed_message WHERE consumer_name = %s GROUP BY 1 ORDER BY 1", (consumer,)
    )
    return [(row[0], int(row[1])) for row in rows]


@settings(max_examples=12, deadline=None)
@given(
    old=st.lists(
        st.tuples(st.booleans(), st.lists(st.integers(-40 * 86_400, 86_400), min_size=1, max_size=3)),
        min_size=1,
        max_size=5,
    ),
    legacy=st.integers(0, 3),
    moved=st.integers(-10 * 86_400, 10 * 86_400),
)
def test_every_message_applied_before_the_migration_is_a_duplicate_after_it_whatever_its_occurred_at(
    runtime_db: str, old: list[tuple[bool, list[int]]], legacy: int, moved: int
) -> None:
    """`old`: messages marked in 0005's table, each under a UUIDv7 id or an untimed one, with the
    occurred_at of each copy it claimed (several: the bug's doubles); `legacy`: messages marked
    before 0005; `moved`: how far a copy after the upgrade moves its occurred_at."""
    url = isolated_schema(runtime_db, *BEFORE_0005)
    consumer = f"upgrading-{uuid.uuid4().hex[:8]}-v1"
    applied: list[str] = []
    with psycopg.connect(url, autocommit=True) as connection:
        for n in range(legacy):
            applied.append(f"legacy-{n}-{uuid.uuid4()}")
            connection.execute(
                "INSERT INTO processed_message (consumer_name, message_id) VALUES (%s, %s)", (consumer, applied[-1])
            )
        for migration in FROM_0005_TO_0007:
            connection.execute(migration.read_text())
        for timed, shifts in old:
            message_id = minted_at(NOW - timedelta(days=3)) if timed else str(uuid.uuid4())
            applied.append(message_id)
            for shift in shifts:
                connection.execute(
                    "INSERT INTO processed_message (consumer_name, message_id, occurred_at) VALUES (%s, %s, %s) "
                    "ON CONFLICT DO NOTHING",
                    (consumer, message_id, NOW + timedelta(seconds=shift)),
                )
        connection.execute(KEYED_BY_MESSAGE_ID.read_text())
        assert _markers(connection, consumer) == sorted((message_id, 1) for message_id in applied)
        legacy_left = connection.execute("SELECT to_regclass('processed_message_legacy')").fetchone()
        assert legacy_left == (None,), "the markers from before 0005 moved into the new table"

        connection.autocommit = False
        for message_id in applied:
            copy = _copy(message_id, NOW + timedelta(seconds=moved))
            assert not claim(connection, consumer, copy, b"BEGIN"), f"{message_id} was claimed again"
            connection.rollback()
        copies = [_copy(message_id, NOW - timedelta(seconds=moved)) for message_id in applied]
        assert set(committed_markers(connection, consumer, copies)) == set(applied)
        fresh = Envelope.new("Test", "k", {})
        assert claim(connection, consumer, fresh, b"BEGIN")
        connection.commit()


def test_applying_the_migration_again_changes_nothing_and_retention_takes_the_moved_markers(runtime_db: str) -> None:
    url = isolated_schema(runtime_db, *RUNTIME)
    consumer = f"again-{uuid.uuid4().hex[:8]}-v1"
    month_ago = minted_at(NOW - timedelta(days=40))
    with psycopg.connect(url, autocommit=True) as connection:
        connection.autocommit = False
        for event in (Envelope.new("Test", "k", {}), _copy(month_ago, NOW), _copy("untimed-id", NOW)):
            assert claim(connection, consumer, event, b"BEGIN")
            connection.commit()
        connection.autocommit = True
        connection.execute(KEYED_BY_MESSAGE_ID.read_text())
        assert len(_markers(connection, consumer)) == 3
        assert purge_markers(connection, timedelta(days=30), consumer_name=consumer) == 1, "the 40-day-old id's day"
        connection.autocommit = False
        assert not claim(connection, consumer, _copy("untimed-id", NOW - timedelta(days=2)), b"BEGIN")
        connection.rollback()


def test_no_writer_chooses_a_markers_partition_the_id_time_is_the_ids_own(runtime_db: str) -> None:
    url = isolated_schema(runtime_db, *RUNTIME)
    message_id = minted_at(NOW)
    with psycopg.connect(url, autocommit=True) as connection:
        for wrong in ("now() + interval '1 day'", "'-infinity'"):
            try:
                connection.execute(
                    f"INSERT INTO processed_message (consumer_name, message_id, id_time) VALUES ('c', %s, {wrong})",
                    (message_id,),
                )
            except psycopg.errors.CheckViolation as refused:
                assert "processed_message_id_time_is_the_ids" in str(refused)
            else:
                raise AssertionError(f"a marker of {message_id} was written with id_time {wrong}")
