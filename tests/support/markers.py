"""Markers written straight into a consumer's table, as old as a test needs, and counted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from effectively_once.message_ids import new_message_id

INSERT = (
    "INSERT INTO processed_message (consumer_name, message_id, id_time, processed_at) "
    "VALUES (%s, %s, message_id_time(%s), %s)"
)
"""A marker as a claim would have left it (its id's time in id_time; no content digest)."""


def minted_at(when: datetime) -> str:
    """A UUIDv7 message id carrying `when`."""
    return new_message_id(int(when.timestamp() * 1_000_000) * 1000)


def markers_at(url: str, consumer: str, when: datetime, count: int, untimed: bool = False) -> list[str]:
    """`count` markers of `consumer` for messages minted (and processed) at `when`; with `untimed`,
    under ids that carry no time (a foreign producer's). Their message ids."""
    ids = [f"foreign-{minted_at(when)}" if untimed else minted_at(when) for _ in range(count)]
    with psycopg.connect(url) as connection, connection.cursor() as cursor:
        cursor.executemany(INSERT, [(consumer, message_id, message_id, when) for message_id in ids])
    return ids


def backdated_markers(url: str, consumer: str, count: int, days_old: int, untimed: bool = False) -> list[str]:
    """`count` markers of `consumer` for messages minted, and processed, `days_old` days ago."""
    return markers_at(url, consumer, datetime.now(UTC) - timedelta(days=days_old), count, untimed)


def marker_count(url: str, consumer: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM processed_message WHERE consumer_name = %s", (consumer,)
        ).fetchone()
    return int(row[0]) if row else 0
