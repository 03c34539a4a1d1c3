"""The marker purge row by row: expired markers of untimed ids (a foreign producer's, which carry
no time to partition them by) deleted in batches of 1,000, as the runtime's purger does. Timed
ids' markers go a whole day at a time (benchmarks/table_growth.py measures that)."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import psycopg

from benchmarks.rows import Row
from effectively_once.retention import purge_markers


def measure(url: str, markers: int = 200_000) -> float:
    """Markers purged per second."""
    name = f"bench-purge-{uuid.uuid4().hex[:8]}-v1"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            """INSERT INTO processed_message (consumer_name, message_id, id_time, processed_at)
               SELECT %s, 'purge-' || n, '-infinity', now() - interval '40 days'
                 FROM generate_series(1, %s) AS n""",
            (name, markers),
        )
        started = time.perf_counter()
        purged = purge_markers(connection, timedelta(days=30), batch_size=1000, consumer_name=name)
        elapsed = time.perf_counter() - started
    assert purged == markers, (purged, markers)
    return markers / elapsed


def row(rate: float, correct_rate: float, markers: int) -> Row:
    """Its target: ≥ 10× the one-at-a-time consumer rate of the same run (a purge must outpace the
    markers the consumer writes, with room for every consumer sharing the table)."""
    toward = rate / correct_rate / 10
    return Row(
        "retention",
        "marker purge, untimed ids",
        rate,
        "rows/s",
        "≥ 10× correct",
        toward >= 1,
        f"{markers:,} markers, row by row",
        toward,
    )
