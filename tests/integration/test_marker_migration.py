"""Markers from before the partitioning by day (migration 0005) go on counting until retention
empties them; then their table becomes an empty view and the claims go on unchanged."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import psycopg

from effectively_once import schema
from effectively_once.correct_path import CLAIM, CLAIM_BESIDE_LEGACY, CLAIM_MANY, claim
from effectively_once.duplicates_ahead import committed_markers
from effectively_once.envelope import Envelope
from effectively_once.retention import legacy_markers_remain, purge_markers
from tests.integration.conftest import isolated_schema

BEFORE = [m for m in sorted(schema.MIGRATIONS.glob("*.sql")) if m.name < "0005"]
BY_DAY = schema.MIGRATIONS / "0005_markers_by_day.sql"


def _legacy_kind(connection: psycopg.Connection) -> str:
    row = connection.execute(
        "SELECT relkind FROM pg_class WHERE oid = to_regclass('processed_message_legacy')"
    ).fetchone()
    assert row is not None
    return str(row[0])


OCCURRED = datetime.now(UTC)


def _event(message_id: str) -> Envelope:
    """Every delivery of a message carries the same id and occurred_at."""
    return replace(Envelope.new("Test", "k", {}), message_id=message_id, occurred_at=OCCURRED)


def test_markers_written_before_partitioning_still_make_duplicates_until_retention_retires_them(
    runtime_db: str,
) -> None:
    url = isolated_schema(runtime_db, *BEFORE)
    consumer = f"migrating-{uuid.uuid4().hex[:8]}-v1"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO processed_message (consumer_name, message_id, processed_at) "
            "VALUES (%s, 'month-old', now() - interval '40 days'), (%s, 'recent', now())",
            (consumer, consumer),
        )
        connection.execute(BY_DAY.read_text())
        assert _legacy_kind(connection) == "r", "markers remain: the table stays"
        connection.autocommit = False
        assert legacy_markers_remain(connection), "the processor claims beside them"
        beside = CLAIM_BESIDE_LEGACY
        assert not claim(connection, consumer, _event("recent"), b"BEGIN", beside), "a legacy marker is a duplicate"
        assert claim(connection, consumer, _event("new"), b"BEGIN", beside)
        connection.commit()
        claimed = connection.execute(CLAIM_MANY, (consumer, ["recent", "new-2"], [OCCURRED] * 2)).fetchall()
        assert claimed == [("new-2",)], "the batched claim consults the legacy markers too"
        connection.commit()
        found = committed_markers(connection, consumer, [_event("recent"), _event("new"), _event("unseen")])
        assert found == {"recent", "new"}, "the read ahead of a run of redeliveries finds both kinds of marker"
        connection.autocommit = True

        assert purge_markers(connection, timedelta(days=30), consumer_name=consumer) == 1
        assert _legacy_kind(connection) == "r"
        later = connection.execute("SELECT now() + interval '1 second'").fetchone()
        connection.execute("SELECT pg_sleep_until(%s)", later)  # every marker is now in the past
        assert purge_markers(connection, timedelta(0), consumer_name=consumer) == 3
        assert _legacy_kind(connection) == "v", "emptied, the legacy table is retired"
        connection.autocommit = False
        assert not legacy_markers_remain(connection), "the processor's claim no longer consults it"
        for statement in (CLAIM, CLAIM_BESIDE_LEGACY):  # a connection made before goes on with the other
            event = _event(f"after-{len(statement)}")
            assert claim(connection, consumer, event, b"BEGIN", statement)
            connection.commit()
            assert not claim(connection, consumer, event, b"BEGIN", statement)
            connection.commit()


def test_applying_the_partitioning_again_changes_nothing(runtime_db: str) -> None:
    """The test and bench tiers apply the migration files as they are, more than once."""
    url = isolated_schema(runtime_db, *sorted(schema.MIGRATIONS.glob("*.sql")))
    consumer = f"again-{uuid.uuid4().hex[:8]}-v1"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.autocommit = False
        assert claim(connection, consumer, _event("m"), b"BEGIN")
        connection.commit()
        connection.autocommit = True
        for migration in sorted(schema.MIGRATIONS.glob("*.sql")):
            connection.execute(migration.read_text())
        indexes = connection.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'processed_message' AND schemaname = current_schema()"
        ).fetchall()
        assert indexes == [("processed_message_pkey",)]
        assert _legacy_kind(connection) == "v"
        connection.autocommit = False
        assert not claim(connection, consumer, _event("m"), b"BEGIN")
        connection.commit()
