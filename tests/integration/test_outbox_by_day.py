"""The outbox partitioned by day (migration 0006): the relay's purge drops a published day whole,
keeps a day with a row not yet published, and the rows of an outbox from before move over."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, date, datetime, time, timedelta

import psycopg

from effectively_once import schema
from effectively_once.envelope import decode
from effectively_once.relay.claim import MARK_PUBLISHED, claim, mark_published, purge_published, span
from effectively_once.retention import day_partitions
from tests.integration.conftest import isolated_schema

RUNTIME = sorted(schema.MIGRATIONS.glob("*.sql"))


def _days(connection: psycopg.Connection) -> set[date]:
    return {day for _, day in day_partitions(connection, "outbox")}


def _rows_on(connection: psycopg.Connection, day: date, count: int, published: bool, key: str = "k") -> list[str]:
    """`count` rows created at noon of `day` (its partition made first), published an hour later or not."""
    connection.execute("SELECT day_partition('outbox', 'created_at', %s)", (day,))
    created = datetime.combine(day, time(12), UTC)
    ids = [str(uuid.uuid4()) for _ in range(count)]
    for message_id in ids:
        connection.execute(
            "INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, topic, payload, created_at, "
            "published_at) VALUES (%s, 'order', %s, 'Test', 't', '{}', %s, %s)",
            (message_id, key, created, created + timedelta(hours=1) if published else None),
        )
    return ids


def test_a_published_day_past_the_horizon_is_dropped_whole_and_a_day_with_a_row_unpublished_stays(
    runtime_db: str,
) -> None:
    url = isolated_schema(runtime_db, *RUNTIME)
    today = datetime.now(UTC).date()
    done, stuck, recent = today - timedelta(days=9), today - timedelta(days=8), today - timedelta(days=1)
    with psycopg.connect(url, autocommit=True) as connection:
        _rows_on(connection, done, 50, published=True)
        _rows_on(connection, stuck, 30, published=True)
        waiting = _rows_on(connection, stuck, 1, published=False, key="stuck")
        _rows_on(connection, recent, 5, published=True)
        assert purge_published(connection, timedelta(days=3)) == 80
        days = _days(connection)
        assert done not in days, "a day wholly published before the horizon is dropped whole"
        assert stuck in days, "a day holding a row not yet published stays"
        left = connection.execute("SELECT message_id FROM outbox WHERE created_at < %s", (recent,)).fetchall()
        assert left == [(waiting[0],)], "its published rows went row by row; the unpublished one is never touched"
        assert connection.execute("SELECT count(*) FROM outbox").fetchone() == (6,)
        assert {today + timedelta(days=n) for n in range(3)} <= days, "today and two days ahead are ready"


def test_a_day_whose_last_rows_were_published_after_it_ended_waits_for_them_and_is_then_dropped(
    runtime_db: str,
) -> None:
    url = isolated_schema(runtime_db, *RUNTIME)
    day = datetime.now(UTC).date() - timedelta(days=10)
    with psycopg.connect(url, autocommit=True) as connection:
        _rows_on(connection, day, 20, published=True)
        late = _rows_on(connection, day, 1, published=False)
        ended = datetime.combine(day + timedelta(days=1), time(0), UTC)
        connection.execute(
            "UPDATE outbox SET published_at = %s WHERE message_id = %s", (ended + timedelta(hours=6), late[0])
        )
        horizon_ending_between = datetime.now(UTC) - (ended + timedelta(hours=3))
        assert purge_published(connection, horizon_ending_between) == 0, "not row by row while the day may drop"
        assert day in _days(connection)
        assert purge_published(connection, datetime.now(UTC) - (ended + timedelta(hours=7))) == 21
        assert day not in _days(connection)


def test_an_outbox_from_before_moves_over_with_its_positions_and_its_unpublished_rows_still_go_out(
    runtime_db: str,
) -> None:
    url = isolated_schema(runtime_db, *[m for m in RUNTIME if m.name < "0006"])
    with psycopg.connect(url, autocommit=True) as connection:
        for n, (days_ago, published) in enumerate([(5, True), (5, True), (2, False), (0, False)]):
            connection.execute(
                "INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, topic, payload, created_at,"
                " published_at) VALUES (%s, 'order', 'k', 'Test', 't', '{}', now() - make_interval(days => %s),"
                " CASE WHEN %s THEN now() END)",
                (f"before-{n}", days_ago, published),
            )
        before = connection.execute("SELECT message_id, position FROM outbox ORDER BY position").fetchall()
        connection.execute((schema.MIGRATIONS / "0006_outbox_by_day.sql").read_text())
        connection.execute((schema.MIGRATIONS / "0007_outbox_envelope.sql").read_text())
        after = connection.execute("SELECT message_id, position FROM outbox ORDER BY position").fetchall()
        assert after == before
        kind = connection.execute("SELECT relkind FROM pg_class WHERE oid = 'outbox'::regclass").fetchone()
        assert kind == ("p",)
        assert connection.execute("SELECT to_regclass('outbox_before_partitioning')").fetchone() == (None,)
        five_days_ago = (datetime.now(UTC) - timedelta(days=5)).date()
        assert five_days_ago in _days(connection), "each day of the old rows has its partition"
        connection.execute(
            "INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, topic, payload)"
            " VALUES ('after', 'order', 'k', 'Test', 't', '{}')"
        )
        with connection.transaction():
            rows = claim(connection, keys=10, rows=10)
        assert [row.message_id for row in rows] == ["before-2", "before-3", "after"], "in position order"
        # A row from before 0007 has no envelope column of its own: the relay builds the same one.
        assert [decode(row.envelope.encode()).message_id for row in rows] == ["before-2", "before-3", "after"]


def test_a_batchs_marks_look_only_in_the_days_its_rows_were_created_in(runtime_db: str) -> None:
    url = isolated_schema(runtime_db, *RUNTIME)
    today = datetime.now(UTC).date()
    with psycopg.connect(url, autocommit=True) as connection:
        _rows_on(connection, today - timedelta(days=2), 3, published=False, key="old")
        _rows_on(connection, today, 3, published=False, key="new")
        with connection.transaction():
            rows = claim(connection, keys=10, rows=10)
            todays = [row for row in rows if row.key == "new"]
            between = span(todays)
            plan = connection.execute(
                "EXPLAIN (COSTS OFF) " + MARK_PUBLISHED,
                {"ids": [row.message_id for row in todays], "first": between[0], "last": between[1]},
            ).fetchall()
            mark_published(connection, [row.message_id for row in todays], between)
        scanned = {name for (line,) in plan for name in re.findall(r"outbox_\d{8}|outbox_default", line)}
        assert scanned == {f"outbox_{today:%Y%m%d}"}, plan
        published = connection.execute(
            "SELECT aggregate_key, count(*) FROM outbox WHERE published_at IS NOT NULL GROUP BY 1"
        )
        assert published.fetchall() == [("new", 3)]
