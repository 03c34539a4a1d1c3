"""The marker gauges read what they report without reading the marker table whole: the oldest
marker comes from one index probe per partition, the rows from the planner's statistics. Each
claim of theirs is checked here against the exact reading over the same rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from effectively_once.marker_stats import ESTIMATE, READING, MarkerTableCollector
from effectively_once.message_ids import new_message_id

# Ids minted over this year (most of their days have no partition: those go to the default one),
# and a few from before 2000 and after 2100, whose times have other leading hex digits.
TIMES = st.one_of(
    st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2026, 12, 31), timezones=st.just(UTC)),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(1999, 12, 31), timezones=st.just(UTC)),
    st.datetimes(min_value=datetime(2100, 1, 1), max_value=datetime(2200, 12, 31), timezones=st.just(UTC)),
)


def _mark(runtime_db: str, consumer: str, times: list[datetime]) -> None:
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        for at in times:
            message_id = new_message_id(int(at.timestamp() * 1_000_000) * 1000)
            connection.execute(
                """INSERT INTO processed_message (consumer_name, message_id, id_time)
                   VALUES (%s, %s, message_id_time(%s))""",
                (consumer, message_id, message_id),
            )


def _exact(runtime_db: str, consumer: str) -> tuple[int, float]:
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        row = connection.execute(
            """SELECT count(*), extract(epoch FROM now() - min(id_time))
                 FROM processed_message WHERE consumer_name = %s AND id_time > '-infinity'""",
            (consumer,),
        ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


@hypothesis_settings(max_examples=25)
@given(times=st.lists(TIMES, min_size=1, max_size=12))
def test_the_oldest_marker_is_the_one_whose_id_sorts_first(runtime_db: str, times: list[datetime]) -> None:
    consumer = f"stats-{uuid.uuid4().hex[:12]}"
    _mark(runtime_db, consumer, times)
    read_at = datetime.now(UTC)
    reading = MarkerTableCollector(runtime_db, consumer)._read()
    assert reading is not None
    _, exact_oldest = _exact(runtime_db, consumer)
    assert reading[2] == pytest.approx(exact_oldest, abs=1.0)  # the two readings are a moment apart
    assert reading[2] == pytest.approx((read_at - min(times)).total_seconds(), abs=5)


def test_the_rows_are_the_planners_estimate_close_to_the_count(runtime_db: str) -> None:
    consumer = f"stats-{uuid.uuid4().hex[:12]}"
    _mark(runtime_db, consumer, [datetime.now(UTC) - timedelta(minutes=n) for n in range(2000)])
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        connection.execute("ANALYZE processed_message")
    reading = MarkerTableCollector(runtime_db, consumer)._read()
    assert reading is not None
    count, _ = _exact(runtime_db, consumer)
    assert count == 2000
    assert reading[0] == pytest.approx(count, rel=0.2)
    assert reading[1] > 0


def test_a_consumer_with_no_marker_reads_no_age(runtime_db: str) -> None:
    reading = MarkerTableCollector(runtime_db, f"stats-{uuid.uuid4().hex[:12]}")._read()
    assert reading is not None and reading[2] == 0


def _scanned(node: dict[str, Any]) -> Iterator[int]:
    """The rows each scan in an EXPLAIN ANALYZE plan (JSON) read, over all its loops."""
    if "Scan" in node["Node Type"]:
        yield int(node["Actual Rows"]) * int(node["Actual Loops"])
    for child in node.get("Plans", []):
        yield from _scanned(child)


def test_a_reading_reads_a_few_rows_however_many_markers_there_are(runtime_db: str) -> None:
    """Counting and taking the least time read every marker of the consumer: 93 ms a reading at
    120,000 markers, every 15 s in every consumer."""
    consumer = f"stats-{uuid.uuid4().hex[:12]}"
    _mark(runtime_db, consumer, [datetime.now(UTC) - timedelta(seconds=n) for n in range(3000)])
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        row = connection.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {READING}", {"c": consumer}).fetchone()
    assert row is not None
    read = sum(_scanned(row[0][0]["Plan"]))
    assert read <= 20, f"{read} rows read for a reading of 3,000 markers"
    assert ESTIMATE.startswith("EXPLAIN (FORMAT JSON) SELECT"), "the estimate is planned, never run"
