"""Markers written straight into a consumer's table, as old as a test needs, and counted."""

from __future__ import annotations

import uuid

import psycopg


def backdated_markers(url: str, consumer: str, count: int, days_old: int) -> list[str]:
    """`count` markers of `consumer` for messages that occurred, and were processed, `days_old`
    days ago; their message ids."""
    ids = [str(uuid.uuid4()) for _ in range(count)]
    with psycopg.connect(url) as connection, connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO processed_message (consumer_name, message_id, occurred_at, processed_at) "
            "SELECT %s, %s, at, at FROM (SELECT now() - make_interval(days => %s)) AS t (at)",
            [(consumer, message_id, days_old) for message_id in ids],
        )
    return ids


def marker_count(url: str, consumer: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM processed_message WHERE consumer_name = %s", (consumer,)
        ).fetchone()
    return int(row[0]) if row else 0
