"""The relay's SQL: which rows to publish next, and how to record what the broker said.

Per-key order with any number of relays: a relay publishes a key's rows only while it holds
that key's transaction-scoped advisory lock (`pg_try_advisory_xact_lock`). Keys whose lock
another relay holds are skipped, never waited for. The rows are read in a statement *after* the
locks were taken, so that statement's snapshot sees everything the previous holder committed
before it released the lock: no row is published by two relays at once, and within a key the
rows go out in `position` order, stopping at the first row that is still backing off after a
failure (the rows after it wait for it). The locks go with COMMIT, after the marks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

import psycopg

from ..retention import day_partitions

Connection = psycopg.Connection[Any]
ADVISORY_LOCK_CLASS = 7301

LOCKED_KEYS_WITH_WORK = """
SELECT aggregate_key, upto
  FROM (SELECT aggregate_key, max(position) AS upto, min(position) AS first
          FROM (SELECT aggregate_key, position
                  FROM outbox
                 WHERE published_at IS NULL AND next_attempt_at <= now()
                 ORDER BY position
                 LIMIT %(scan)s) AS oldest
         GROUP BY aggregate_key
         ORDER BY min(position)
         LIMIT %(keys)s) AS candidates
 WHERE pg_try_advisory_xact_lock(%(class)s, hashtext(aggregate_key))
 ORDER BY first
"""
"""The keys with the oldest due rows, up to `keys` of them, that this transaction could lock, each
with its last row among the oldest `scan`. A subquery with a LIMIT takes no condition from outside
it, so only the candidates are tried: a key is locked only where it is returned."""

ENVELOPE = """coalesce(envelope, json_build_object('message_id', message_id, 'type', event_type,
                         'version', event_version, 'key', aggregate_key, 'occurred_at', created_at,
                         'trace_id', headers->>'trace_id', 'payload', payload)::text)"""
"""An outbox row as the envelope consumers decode: the text its insert wrote (migration 0007, which
Debezium sends too), or for a row from before that migration, the same built here. The panel's
republish uses it too."""

ROWS_OF_KEYS = f"""
SELECT message_id, aggregate_key, topic, headers->>'trace_id', created_at, extract(epoch FROM created_at),
       {ENVELOPE},
       next_attempt_at <= now() AS due
  FROM outbox
 WHERE published_at IS NULL AND position <= %(upto)s AND aggregate_key = ANY(%(keys)s)
 ORDER BY position
 LIMIT %(rows)s
"""

MARK_PUBLISHED = """
UPDATE outbox SET published_at = clock_timestamp(), attempts = attempts + 1, last_error = NULL
 WHERE message_id = ANY(%(ids)s) AND created_at BETWEEN %(first)s AND %(last)s
"""
"""Each id is looked up only in the day partitions its batch's rows were created in: without
the bounds, in every partition's index."""

MARK_FAILED = """
UPDATE outbox
   SET attempts = attempts + 1,
       last_error = failure.error,
       next_attempt_at = now() + make_interval(secs => least(%(cap)s, %(base)s * 2 ^ outbox.attempts))
  FROM unnest(%(ids)s::text[], %(errors)s::text[]) AS failure(message_id, error)
 WHERE outbox.message_id = failure.message_id AND outbox.created_at BETWEEN %(first)s AND %(last)s
"""

BACKLOG = """
SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)
  FROM outbox WHERE published_at IS NULL
"""

PURGE_PUBLISHED = """
DELETE FROM outbox
 USING (SELECT message_id, created_at FROM outbox
         WHERE published_at < %(cutoff)s AND created_at < %(created_before)s
         LIMIT %(batch)s
           FOR UPDATE SKIP LOCKED) AS expired
 WHERE outbox.message_id = expired.message_id AND outbox.created_at = expired.created_at
"""
"""Published rows past the horizon that a dropped day did not take: those of a day that kept a row
not yet published, and of the default partition. By key, not by ctid: a ctid is unique only
within one partition."""


@dataclass(frozen=True)
class OutboxRow:
    """One row to publish: its envelope is built by PostgreSQL, exactly as consumers decode it."""

    message_id: str
    key: str
    topic: str
    trace_id: str | None
    created: datetime
    """The row's created_at, which partitions the outbox by day."""
    created_at: float
    """The same in epoch seconds, for the latency metric."""
    envelope: str


Span = tuple[datetime, datetime]
EVER: Span = (datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC))


def span(rows: list[OutboxRow]) -> Span:
    """The first and last created_at of a batch's rows: where its marks need to look."""
    return (min(row.created for row in rows), max(row.created for row in rows)) if rows else EVER


def claim(connection: Connection, keys: int, rows: int) -> list[OutboxRow]:
    """Lock keys with work and return their publishable rows, in order (inside the caller's
    transaction, which must stay open until the rows are marked)."""
    # Only the oldest rows are looked at, so a claim costs the same whatever the backlog.
    window = dict(
        connection.execute(
            LOCKED_KEYS_WITH_WORK, {"keys": keys, "scan": 2 * rows, "class": ADVISORY_LOCK_CLASS}
        ).fetchall()
    )
    if not window:
        return []
    claimed: list[OutboxRow] = []
    blocked: set[str] = set()
    for message_id, key, topic, trace_id, created, created_at, envelope, due in connection.execute(
        ROWS_OF_KEYS, {"keys": list(window), "rows": rows, "upto": max(window.values())}
    ):
        if key in blocked:
            continue
        if not due:  # backing off after a failure: this key's later rows wait behind it
            blocked.add(key)
            continue
        claimed.append(OutboxRow(message_id, key, topic, trace_id, created, float(created_at), envelope))
    return claimed


def mark_published(connection: Connection, message_ids: list[str], created: Span = EVER) -> None:
    """Mark the rows published; `created` bounds their created_at (`span` of the claimed rows)."""
    if message_ids:
        connection.execute(MARK_PUBLISHED, {"ids": message_ids, "first": created[0], "last": created[1]})


def mark_failed(
    connection: Connection, failures: dict[str, str], base: float, cap: float, created: Span = EVER
) -> None:
    """Count a failed attempt on each row and back it off; `created` as for mark_published."""
    if failures:
        connection.execute(
            MARK_FAILED,
            {
                "ids": list(failures),
                "errors": list(failures.values()),
                "base": base,
                "cap": cap,
                "first": created[0],
                "last": created[1],
            },
        )


def backlog(connection: Connection) -> tuple[int, float]:
    """Unpublished rows, and the age in seconds of the oldest."""
    row = connection.execute(BACKLOG).fetchone()
    return (int(row[0]), float(row[1])) if row else (0, 0.0)


def purge_published(connection: Connection, horizon: timedelta, batch_size: int = 1000) -> int:
    """Purge rows published longer ago than `horizon`; return how many went. Unpublished rows are
    never touched. The outbox is partitioned by the day rows were created (migration 0006):

    - each day that ended before the horizon, every row of it published before, is dropped whole;
    - the rest past the horizon go `batch_size` per transaction (each skipping rows another holds):
      rows of the default partition, and of a day still there a day after its turn came (it kept
      a row not yet published). A day's rows wait for its turn, and a day whose last rows were
      published after its end waits for those to pass the horizon too, so days are dropped, not
      deleted row by row. A horizon under a day (a lab) deletes every row past it at once.

    First, the partitions of today and the next two days are made ready (`outbox_upkeep`)."""
    with connection.transaction():
        connection.execute("SELECT outbox_upkeep()")
    row = connection.execute("SELECT now() - %s::interval", (horizon,)).fetchone()
    assert row is not None
    cutoff: datetime = row[0]
    total = 0
    for _, day in day_partitions(connection, "outbox"):
        if datetime.combine(day + timedelta(days=1), time(0), UTC) <= cutoff:
            with connection.transaction():
                dropped = connection.execute("SELECT outbox_drop_day(%s, %s)", (day, cutoff)).fetchone()
            total += (dropped[0] if dropped else None) or 0
    day_of_cutoff = cutoff.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    created_before = cutoff if horizon < timedelta(days=1) else day_of_cutoff - timedelta(days=1)
    while True:
        with connection.transaction():
            deleted = connection.execute(
                PURGE_PUBLISHED, {"cutoff": cutoff, "created_before": created_before, "batch": batch_size}
            ).rowcount
        total += deleted
        if deleted < batch_size:
            return total
