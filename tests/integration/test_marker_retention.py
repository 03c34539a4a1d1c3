"""Markers older than the horizon are purged in bounded batches, without waiting on locked rows."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import psycopg

from effectively_once import schema
from effectively_once.consumer.transaction import claim
from effectively_once.envelope import Envelope
from effectively_once.retention import MarkerPurger, day_partitions, purge_markers, upkeep
from effectively_once.safe_horizon import HorizonUnknown, Verdict
from tests.integration.conftest import isolated_schema
from tests.support.markers import backdated_markers, marker_count, markers_at
from tests.support.waiting import wait_for


def test_only_markers_past_the_horizon_are_purged_in_bounded_batches(runtime_db: str, name: str) -> None:
    backdated_markers(runtime_db, name, 250, days_old=40)
    backdated_markers(runtime_db, name, 30, days_old=5)
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        purged = purge_markers(connection, timedelta(days=30), batch_size=100, consumer_name=name)
    assert purged == 250
    assert marker_count(runtime_db, name) == 30


def test_markers_of_untimed_ids_are_purged_by_when_they_were_processed(runtime_db: str, name: str) -> None:
    """Ids that carry no time (a foreign producer's) keep their markers in a partition of their own,
    which retention purges row by row by processed_at."""
    backdated_markers(runtime_db, name, 12, days_old=40, untimed=True)
    fresh = backdated_markers(runtime_db, name, 3, days_old=2, untimed=True)
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        assert purge_markers(connection, timedelta(days=30), batch_size=5, consumer_name=name) == 12
        where = connection.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM processed_message WHERE consumer_name = %s", (name,)
        ).fetchall()
    assert where == [("processed_message_untimed",)]
    assert marker_count(runtime_db, name) == len(fresh)


def test_a_purge_records_how_far_it_went_and_never_moves_that_back(runtime_db: str, name: str) -> None:
    """The auditor reads `marker_retention` to tell a purged marker from a missing one."""
    query = "SELECT now() - purged_through FROM marker_retention WHERE consumer_name = %s"
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        purge_markers(connection, timedelta(days=30), consumer_name=name)
        first = connection.execute(query, (name,)).fetchone()
        purge_markers(connection, timedelta(days=60), consumer_name=name)  # a longer horizon purges less
        second = connection.execute(query, (name,)).fetchone()
    assert first is not None and timedelta(days=30) <= first[0] < timedelta(days=30, minutes=1)
    assert second is not None and second[0] < timedelta(days=30, minutes=1)


def test_a_purge_skips_a_marker_another_transaction_holds_instead_of_waiting(
    runtime_db: str,
    name: str,
) -> None:
    held, *_ = backdated_markers(runtime_db, name, 10, days_old=40)
    with psycopg.connect(runtime_db) as holder:
        holder.execute(
            "SELECT 1 FROM processed_message WHERE consumer_name = %s AND message_id = %s FOR UPDATE",
            (name, held),
        )
        with psycopg.connect(runtime_db, autocommit=True) as purger:
            purger.execute("SET lock_timeout = '2s'")  # a wait would fail the test, not hang it
            assert purge_markers(purger, timedelta(days=30), batch_size=3, consumer_name=name) == 9
        holder.rollback()
    assert marker_count(runtime_db, name) == 1


def test_the_purger_thread_purges_expired_markers_on_its_own(runtime_db: str, name: str) -> None:
    backdated_markers(runtime_db, name, 20, days_old=40)
    fresh = backdated_markers(runtime_db, name, 5, days_old=1)
    purger = MarkerPurger(
        lambda: psycopg.connect(runtime_db), name, timedelta(days=30), interval=timedelta(milliseconds=50)
    )
    purger.start()
    try:
        wait_for(lambda: marker_count(runtime_db, name) == len(fresh), 30, "the purger's first round")
    finally:
        purger.stop()


RUNTIME = sorted(schema.MIGRATIONS.glob("*.sql"))


def _day_partitions(url: str) -> list[date]:
    with psycopg.connect(url) as connection:
        return [day for _, day in day_partitions(connection)]


def _on_day(url: str, consumer: str, day: date, count: int) -> list[str]:
    """`count` markers of `consumer` for messages whose ids were minted at noon (UTC) of `day`, the
    day's partition created first (as the upkeep would have, that day)."""
    with psycopg.connect(url) as connection:
        connection.execute("SELECT processed_message_day(%s)", (day,))
    return markers_at(url, consumer, datetime.combine(day, time(12), UTC), count)


def test_a_day_past_the_horizon_is_dropped_whole_and_a_day_shared_loses_only_this_consumers_rows(
    runtime_db: str, name: str
) -> None:
    url = isolated_schema(runtime_db, *RUNTIME)
    today = datetime.now(UTC).date()
    mine, shared, kept = today - timedelta(days=40), today - timedelta(days=39), today - timedelta(days=5)
    _on_day(url, name, mine, 300)
    _on_day(url, name, shared, 20)
    other = _on_day(url, "another-consumer-v1", shared, 7)
    _on_day(url, name, kept, 4)
    with psycopg.connect(url, autocommit=True) as connection:
        assert purge_markers(connection, timedelta(days=30), batch_size=8, consumer_name=name) == 320
    days = _day_partitions(url)
    assert mine not in days, "a day holding only this consumer's expired markers is dropped whole"
    assert shared in days and kept in days
    assert marker_count(url, name) == 4
    assert marker_count(url, "another-consumer-v1") == len(other), "another consumer's horizon may be longer"
    assert {today + timedelta(days=n) for n in range(3)} <= set(days), "today and two days ahead are ready"


def test_markers_past_a_long_horizon_wait_for_their_day_to_end_and_a_labs_short_horizon_takes_them_at_once(
    runtime_db: str, name: str
) -> None:
    url = isolated_schema(runtime_db, *RUNTIME)
    now = datetime.now(UTC)
    with psycopg.connect(url, autocommit=True) as connection:
        upkeep(connection)
        month_ago = now - timedelta(days=30, minutes=1)
        connection.execute("SELECT processed_message_day(%s)", (month_ago.date(),))
        markers_at(url, name, month_ago, 1)
        if month_ago.date() == (now - timedelta(days=30)).date():  # its day goes on past the horizon
            assert purge_markers(connection, timedelta(days=30), consumer_name=name) == 0
            assert marker_count(url, name) == 1, "kept until its whole day is past the horizon"
        markers_at(url, name, now - timedelta(minutes=10), 1)
        assert purge_markers(connection, timedelta(minutes=5), consumer_name=name) == 2
    assert marker_count(url, name) == 0


def test_creating_a_day_moves_its_markers_out_of_the_default_partition_and_they_still_count(
    runtime_db: str, name: str
) -> None:
    url = isolated_schema(runtime_db, *RUNTIME)
    later = datetime.now(UTC) + timedelta(days=9)  # no partition yet: the default one takes it
    event = Envelope.new("Test", "k", {}, at=later)
    with psycopg.connect(url) as connection:
        assert claim(connection, name, event, b"BEGIN")
        connection.commit()
        assert connection.execute("SELECT count(*) FROM processed_message_default").fetchone() == (1,)
        connection.execute("SELECT processed_message_day(%s)", (later.date(),))
        connection.commit()
        assert connection.execute("SELECT count(*) FROM processed_message_default").fetchone() == (0,)
        assert not claim(connection, name, event, b"BEGIN"), "the moved marker still makes a duplicate"
        connection.commit()


def test_a_purger_refused_by_its_check_still_makes_the_days_ahead_ready(runtime_db: str, name: str) -> None:
    url = isolated_schema(runtime_db, *RUNTIME)
    ahead = datetime.now(UTC).date() + timedelta(days=2)
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"DROP TABLE processed_message_{ahead:%Y%m%d}")
    backdated_markers(url, name, 3, days_old=40)

    def unknown(horizon: timedelta) -> Verdict:
        raise HorizonUnknown("the broker cannot be reached")

    purger = MarkerPurger(
        lambda: psycopg.connect(url), name, timedelta(days=30), timedelta(milliseconds=50), check=unknown
    )
    purger.start()
    try:
        wait_for(lambda: ahead in _day_partitions(url), 30, "the upkeep's day two days ahead")
    finally:
        purger.stop()
    assert marker_count(url, name) == 3, "refused: nothing purged"
