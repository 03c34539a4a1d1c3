"""Marker retention: markers older than the horizon are purged in small batches, never when the
horizon is shorter than what could still be delivered again (safe_horizon.py).

Each batch is its own short transaction and skips rows another transaction holds (SKIP LOCKED),
so a purge never makes a consumer wait for long. The same horizon makes the processor refuse
messages older than it (dead-lettered as beyond the dedup horizon): their markers may be gone.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

from . import metrics
from .safe_horizon import OLDEST_DEAD_LETTER, HorizonUnknown, Verdict

log = logging.getLogger(__name__)

PURGE = """
DELETE FROM processed_message
 WHERE ctid = ANY(ARRAY(
       SELECT ctid FROM processed_message
        WHERE processed_at < now() - %(horizon)s
          AND (%(consumer)s::text IS NULL OR consumer_name = %(consumer)s)
        LIMIT %(batch)s
          FOR UPDATE SKIP LOCKED))
"""

RECORD = """
INSERT INTO marker_retention (consumer_name, purged_through) VALUES (%(consumer)s, now() - %(horizon)s)
ON CONFLICT (consumer_name) DO UPDATE
   SET purged_through = greatest(marker_retention.purged_through, excluded.purged_through), updated_at = now()
"""


def purge_markers(
    connection: psycopg.Connection[Any],
    horizon: timedelta,
    batch_size: int = 1000,
    consumer_name: str | None = None,
) -> int:
    """Delete markers older than `horizon`, `batch_size` at a time; return how many went.

    For one consumer, how far its markers were purged is recorded first (`marker_retention`), so
    the auditor can tell an effect whose marker retention removed from one whose marker is missing.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if consumer_name is not None:
        with connection.transaction():
            connection.execute(RECORD, {"consumer": consumer_name, "horizon": horizon})
    total = 0
    while True:
        with connection.transaction():
            deleted = connection.execute(
                PURGE, {"horizon": horizon, "consumer": consumer_name, "batch": batch_size}
            ).rowcount
        total += deleted
        if deleted < batch_size:
            return total


class MarkerPurger:
    """Purges one consumer's expired markers every `interval`, on a connection of its own.

    With `check` (the runner gives it one that reads Kafka), each round first weighs the horizon
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
        if self.safe_to_purge():
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
