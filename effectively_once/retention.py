"""Marker retention: markers older than the horizon go, never when the horizon is shorter than
what could still be delivered again (safe_horizon.py).

Markers are partitioned by the UTC day their message id carries (a UUIDv7's time, migration
0008). A day that ended before the horizon is dropped whole when it holds no other consumer's
markers: no dead tuples, no vacuum, the bytes returned at once. Otherwise, and for the default
partition, rows go in small batches, each its own short transaction that skips rows another
transaction holds (SKIP LOCKED). Within a day not yet over, markers wait for the day to end (so
they are kept for the horizon plus at most a day), unless the horizon is shorter than a day (a
lab), when they go row by row. Markers of untimed ids (a foreign producer's) have a partition of
their own, purged row by row by when they were processed. The same horizon makes the processor
refuse messages older than it (dead-lettered as beyond the dedup horizon): their markers may be
gone.

The consumers' role does not own the markers: it creates and drops days through the owner's two
SECURITY DEFINER functions (processed_message_day, processed_message_drop_day).

`upkeep` creates the partitions of today and the next two days ahead of the claims that need
them; a day without one falls into the default partition, and moves out when its day is created.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.abc import Params

from . import metrics
from .safe_horizon import OLDEST_DEAD_LETTER, HorizonUnknown, Verdict

log = logging.getLogger(__name__)

DAYS_AHEAD = 2
"""Day partitions made ready beyond today."""
BUSY = -1
"""What processed_message_drop_day answers when the table stayed locked past its lock timeout."""
UNTIMED = "processed_message_untimed"
"""The partition of markers whose ids carry no time, purged by processed_at."""

BATCH_DELETE = """
DELETE FROM {table}
 WHERE ctid = ANY(ARRAY(
       SELECT ctid FROM {table}
        WHERE {time} < %(cutoff)s
          AND (%(consumer)s::text IS NULL OR consumer_name = %(consumer)s)
        LIMIT %(batch)s
          FOR UPDATE SKIP LOCKED))
"""

RECORD = """
INSERT INTO marker_retention (consumer_name, purged_through) VALUES (%(consumer)s, %(cutoff)s)
ON CONFLICT (consumer_name) DO UPDATE
   SET purged_through = greatest(marker_retention.purged_through, excluded.purged_through), updated_at = now()
"""

DAYS = """
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = %s::regclass ORDER BY c.relname
"""


def upkeep(connection: psycopg.Connection[Any], days_ahead: int = DAYS_AHEAD) -> None:
    """Create the day partitions of today and `days_ahead` days after it (UTC), where missing."""
    with connection.transaction():
        connection.execute(
            "SELECT processed_message_day((now() AT TIME ZONE 'UTC')::date + ahead) FROM generate_series(0, %s) ahead",
            (days_ahead,),
        )


def day_partitions(connection: psycopg.Connection[Any], parent: str = "processed_message") -> list[tuple[str, date]]:
    """The day partitions (name, UTC day) of `parent` (the markers, or the outbox), oldest first;
    the default partition is none of them."""
    named = re.compile(rf"^{re.escape(parent)}_(\d{{8}})$")
    found = []
    for (name,) in connection.execute(DAYS, (parent,)):
        match = named.match(name)
        if match:
            found.append((name, datetime.strptime(match.group(1), "%Y%m%d").replace(tzinfo=UTC).date()))
    return found


def purge_markers(
    connection: psycopg.Connection[Any],
    horizon: timedelta,
    batch_size: int = 1000,
    consumer_name: str | None = None,
) -> int:
    """Purge markers older than `horizon` (every consumer's, or one's); return how many went.

    For one consumer, how far its markers were purged is recorded first (`marker_retention`), so
    the auditor can tell an effect whose marker retention removed from one whose marker is missing.
    The connection must be in autocommit mode: each step is its own short transaction.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if not connection.autocommit:
        raise ValueError("purge_markers needs an autocommit connection: each batch is its own transaction")
    cutoff = _fetch(connection, "SELECT now() - %s::interval", (horizon,))
    if consumer_name is not None:
        with connection.transaction():
            connection.execute(RECORD, {"consumer": consumer_name, "cutoff": cutoff})
    upkeep(connection)
    total = 0
    for name, day in day_partitions(connection):
        ends = datetime.combine(day + timedelta(days=1), datetime.min.time(), UTC)
        if ends <= cutoff:
            total += _expire_day(connection, name, day, consumer_name, cutoff, batch_size)
        elif horizon < timedelta(days=1) and ends - timedelta(days=1) < cutoff:
            total += _in_batches(connection, name, "id_time", cutoff, consumer_name, batch_size)
    total += _in_batches(connection, "processed_message_default", "id_time", cutoff, consumer_name, batch_size)
    total += _in_batches(connection, UNTIMED, "processed_at", cutoff, consumer_name, batch_size)
    return total


def _fetch(connection: psycopg.Connection[Any], query: str | sql.Composed, params: Params = ()) -> Any:
    row = connection.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _expire_day(
    connection: psycopg.Connection[Any], name: str, day: date, consumer: str | None, cutoff: datetime, batch_size: int
) -> int:
    """Drop a day that ended before the horizon when no other consumer's markers are in it (their
    horizon may be longer) and the table is not busy for long; else delete this consumer's rows of
    it in batches."""
    dropped = _fetch(connection, "SELECT processed_message_drop_day(%s, %s, %s)", (day, cutoff, consumer))
    if dropped == BUSY:
        log.info("the markers of %s wait for the next round: the table was busy", name)
        return 0
    if dropped is not None:
        return int(dropped)
    return _in_batches(connection, name, "id_time", cutoff, consumer, batch_size)


def _in_batches(
    connection: psycopg.Connection[Any], name: str, column: str, cutoff: datetime, consumer: str | None, batch: int
) -> int:
    statement = sql.SQL(BATCH_DELETE).format(table=sql.Identifier(name), time=sql.Identifier(column))
    total = 0
    while True:
        with connection.transaction():
            deleted = connection.execute(statement, {"cutoff": cutoff, "consumer": consumer, "batch": batch}).rowcount
        total += deleted
        if deleted < batch:
            return total


class MarkerPurger:
    """Purges one consumer's expired markers every `interval`, on a connection of its own, and
    keeps the day partitions of the next days ready (`upkeep`), whether it purges or not.

    With `check` (the consumer's wiring gives it one that reads Kafka), each round first weighs the horizon
    against what could still be delivered again, and purges nothing when the horizon is shorter or
    the check could not say (HorizonUnknown): markers kept too long cost disk; markers purged too
    early turn redeliveries into refusals."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        consumer_name: str,
        horizon: timedelta,
        interval: timedelta,
        batch_size: int = 1000,
        check: Callable[[timedelta], Verdict] | None = None,
    ) -> None:
        self._connect = connect
        self._check = check
        self.last_verdict: Verdict | None = None
        self.rounds = 0
        """Rounds done (each weighed, then purged or refused)."""
        self._consumer_name = consumer_name
        self._horizon = horizon
        self._interval = interval.total_seconds()
        self._batch_size = batch_size
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"purge-{consumer_name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def safe_to_purge(self) -> bool:
        """Weigh the horizon (always true without a check); publish the figures either way."""
        metrics.DEDUP_HORIZON_SECONDS.labels(self._consumer_name).set(self._horizon.total_seconds())
        refused = metrics.MARKER_PURGE_REFUSED.labels(self._consumer_name)
        if self._check is None:
            return True
        try:
            verdict = self._check(self._horizon)
        except HorizonUnknown as error:
            refused.set(1)
            log.warning(
                "marker purge refused: what could be delivered again is unknown (%s)",
                error,
                extra={"consumer": self._consumer_name},
            )
            return False
        self.last_verdict = verdict
        shortest = verdict.shortest_safe_seconds
        metrics.SAFE_HORIZON_SECONDS.labels(self._consumer_name).set(float("inf") if shortest is None else shortest)
        dead_letters = [window.seconds or 0.0 for window in verdict.windows if window.source == OLDEST_DEAD_LETTER]
        metrics.OLDEST_DEAD_LETTER_SECONDS.labels(self._consumer_name).set(max(dead_letters, default=0.0))
        refused.set(0 if verdict.safe else 1)
        if not verdict.safe:
            log.warning("marker purge refused: %s", verdict.reason(), extra={"consumer": self._consumer_name})
        return verdict.safe

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # logged below, at the first round, if it persists
            self.safe_to_purge()  # the figures from the start, not after the first interval
        while not self._stopping.wait(self._interval):
            try:
                self._round()
            except Exception:  # a bug in one round must not end retention for good
                log.exception("marker purge round failed", extra={"consumer": self._consumer_name})
            finally:
                self.rounds += 1

    def _round(self) -> None:
        if not self.safe_to_purge():
            try:  # the days ahead are made ready even while the purge is refused
                with self._connect() as connection:
                    connection.autocommit = True
                    upkeep(connection)
            except psycopg.Error as error:
                log.warning("marker partition upkeep failed: %s", error, extra={"consumer": self._consumer_name})
        else:
            try:
                with self._connect() as connection:
                    connection.autocommit = True
                    purged = purge_markers(connection, self._horizon, self._batch_size, self._consumer_name)
                if purged:
                    log.info(
                        "purged %d markers older than %s",
                        purged,
                        self._horizon,
                        extra={"consumer": self._consumer_name},
                    )
            except psycopg.Error as error:
                log.warning("marker purge failed, will try again: %s", error, extra={"consumer": self._consumer_name})
