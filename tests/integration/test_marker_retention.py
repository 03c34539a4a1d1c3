"""Markers older than the horizon are purged in bounded batches, without waiting on locked rows."""

from __future__ import annotations

from datetime import timedelta

import psycopg

from effectively_once.retention import MarkerPurger, purge_markers
from tests.support.markers import backdated_markers, marker_count
from tests.support.waiting import wait_for


def test_only_markers_past_the_horizon_are_purged_in_bounded_batches(runtime_db: str, name: str) -> None:
    backdated_markers(runtime_db, name, 250, days_old=40)
    backdated_markers(runtime_db, name, 30, days_old=5)
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        purged = purge_markers(connection, timedelta(days=30), batch_size=100, consumer_name=name)
    assert purged == 250
    assert marker_count(runtime_db, name) == 30


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
