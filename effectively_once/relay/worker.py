"""One service database's relay loop: wake, claim, publish, mark, commit; purge now and then.

It wakes on the outbox trigger's NOTIFY, with a polling fallback, so an idle relay costs one
cheap query a poll interval and a busy one publishes within milliseconds of a commit. When the
database or the broker goes away it backs off and tries again; unconfirmed rows stay unpublished.
Where Debezium publishes the outbox (a `cdc_slot`, RELAY=debezium), it publishes nothing: each
round marks what Debezium's slot has confirmed (cdc.py), and the purge runs as for any other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
from confluent_kafka import Producer

from ..connection_pools import RECONNECT_TIMEOUT
from ..faults import FaultPoints
from ..telemetry import NoTelemetry, Telemetry, ids
from . import claim, metrics
from .cdc import ReadMarks
from .publish import publish
from .settings import RelaySettings

log = logging.getLogger(__name__)

Connection = psycopg.Connection[Any]
RELAY_POINTS = ("relay.before_publish", "relay.after_publish_before_mark")
BACKLOG_INTERVAL_SECONDS = 1.0
"""How often the backlog gauges (rows waiting, the oldest one's age) are read again."""


class DatabaseRelay:
    """Publishes the outbox of one service database until stopped."""

    def __init__(
        self,
        name: str,
        connect: Callable[[], Connection],
        producer: Producer,
        settings: RelaySettings,
        faults: FaultPoints,
        telemetry: Telemetry | None = None,
        cdc_slot: str | None = None,
    ) -> None:
        self.name = name
        self._read_marks = ReadMarks(cdc_slot) if cdc_slot else None
        """Set when Debezium publishes this outbox: the relay only marks what the slot confirmed."""
        self._connect = connect
        self._producer = producer
        self._settings = settings
        self._faults = faults
        self._telemetry: Telemetry = telemetry or NoTelemetry()
        for series in (metrics.PUBLISHED, metrics.FAILURES, metrics.PURGED, metrics.PUBLISH_LATENCY_SECONDS):
            series.labels(name)  # at zero from the start: no dashboard panel starts empty
        self._stopping = threading.Event()
        self._last_purge = 0.0
        self._last_backlog = 0.0
        self.published = 0
        self.idle = threading.Event()
        """Set while the relay waits for a notification (or the poll interval)."""

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Loop until stop(), reconnecting with backoff whenever the database goes away."""
        failures = 0
        while not self._stopping.is_set():
            try:
                with self._connect() as work, self._connect() as listen:
                    work.autocommit = True  # each step opens its own transaction block
                    listen.autocommit = True
                    listen.execute("LISTEN outbox")
                    failures = 0
                    self._serve(work, listen)
            except psycopg.OperationalError as error:
                failures += 1
                # Bounded as the pools' tries are: back within seconds of the database (connection_pools).
                pause = min(RECONNECT_TIMEOUT, 0.2 * 2**failures)
                log.warning(
                    "database %s unavailable (%s); retrying in %.1f s",
                    self.name,
                    str(error).strip().splitlines()[0] if str(error).strip() else error,
                    pause,
                )
                self._stopping.wait(pause)

    def _serve(self, work: Connection, listen: Connection) -> None:
        full = min(self._settings.RELAY_BATCH_SIZE, self._settings.RELAY_KEYS_PER_BATCH)
        while not self._stopping.is_set():
            if self._read_marks is not None:
                self.mark_read(work)
            else:
                # A batch smaller than its limits took every row then claimable: rows committed
                # since have notified, and the wait below returns at once for them. Claiming again
                # would be a transaction finding nothing.
                while self.relay_once(work) >= full and not self._stopping.is_set():
                    pass
            self._maybe_purge(work)
            self._maybe_observe_backlog(work)
            # Sleep until a commit notifies us, or the poll interval passes (rows in backoff
            # become due without a notification).
            self.idle.set()
            self._wait_for_notification(listen)
            self.idle.clear()

    def _wait_for_notification(self, listen: Connection) -> None:
        """Return on a notification, at the poll interval, or (within half a second) on stop().
        The notifications already received go with the first: one claim serves every commit
        before it, where taking them one at a time cost a wake-up (and a claim) each."""
        deadline = time.monotonic() + self._settings.RELAY_POLL_INTERVAL_SECONDS
        while not self._stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            # Each generator is run to its end before the next: one holds the connection's lock.
            if list(listen.notifies(timeout=min(remaining, 0.5), stop_after=1)):
                list(listen.notifies(timeout=0))
                return

    def relay_once(self, work: Connection) -> int:
        """One transaction: claim, publish, mark. Returns how many rows it handled."""
        settings = self._settings
        with work.transaction():
            rows = claim.claim(work, settings.RELAY_KEYS_PER_BATCH, settings.RELAY_BATCH_SIZE)
            if not rows:
                return 0
            self._faults.context = {
                "database": self.name,
                "keys": ids([row.key for row in rows]),
                "message_ids": ids([row.message_id for row in rows]),
            }
            self._faults.hit("relay.before_publish")
            deliveries = publish(self._producer, rows, settings.RELAY_DELIVERY_TIMEOUT_SECONDS + 5)
            self._faults.hit("relay.after_publish_before_mark")
            between = claim.span(rows)
            claim.mark_published(work, deliveries.confirmed, between)
            claim.mark_failed(
                work, deliveries.failed, settings.RELAY_RETRY_BASE_SECONDS, settings.RELAY_RETRY_CAP_SECONDS, between
            )
        # Committed: only now do the marks (and the end of the key locks) count.
        created = {row.message_id: row.created_at for row in rows}
        by_id = {row.message_id: row for row in rows}
        for message_id in deliveries.confirmed:
            row = by_id[message_id]
            self._telemetry.emit("published", database=self.name, message_id=message_id, key=row.key, topic=row.topic)
        latency = metrics.PUBLISH_LATENCY_SECONDS.labels(self.name)
        for message_id, confirmed_at in deliveries.confirmed_at.items():
            latency.observe(max(0.0, confirmed_at - created[message_id]))
        metrics.PUBLISHED.labels(self.name).inc(len(deliveries.confirmed))
        metrics.BATCH_SIZE.labels(self.name).observe(len(rows))
        self.published += len(deliveries.confirmed)
        if deliveries.failed:
            metrics.FAILURES.labels(self.name).inc(len(deliveries.failed))
            first = next(iter(deliveries.failed.values()))
            log.warning(
                "%s: %d of %d rows not confirmed by the broker (%s); they will be retried",
                self.name,
                len(deliveries.failed),
                len(rows),
                first,
            )
            return 0  # back off: wait for the poll interval instead of spinning
        return len(rows)

    def mark_read(self, work: Connection) -> int:
        """Under CDC: mark the rows Debezium's slot has confirmed (relay/cdc.py); how many."""
        assert self._read_marks is not None
        marked = self._read_marks.mark(work)
        if self._read_marks.retained_bytes is not None:
            metrics.RETAINED_WAL_BYTES.labels(self.name, self._read_marks.slot).set(self._read_marks.retained_bytes)
        if marked:
            metrics.PUBLISHED.labels(self.name).inc(marked)
            self.published += marked
        return marked

    def _maybe_purge(self, work: Connection) -> None:
        if time.monotonic() - self._last_purge >= self._settings.RELAY_PURGE_INTERVAL_SECONDS:
            self._last_purge = time.monotonic()
            self.purge(work)

    def purge(self, work: Connection) -> int:
        """Purge rows published longer ago than the retention horizon (claim.purge_published)."""
        total = claim.purge_published(work, timedelta(hours=self._settings.OUTBOX_RETENTION_HOURS))
        if total:
            metrics.PURGED.labels(self.name).inc(total)
        return total

    def _maybe_observe_backlog(self, work: Connection) -> None:
        """The backlog gauges at most once per BACKLOG_INTERVAL_SECONDS: read after every wake-up,
        they cost a transaction each time a commit notified."""
        if time.monotonic() - self._last_backlog >= BACKLOG_INTERVAL_SECONDS:
            self._last_backlog = time.monotonic()
            self._observe_backlog(work)

    def _observe_backlog(self, work: Connection) -> None:
        with work.transaction():
            count, oldest = claim.backlog(work)
        metrics.BACKLOG.labels(self.name).set(count)
        metrics.OLDEST_UNPUBLISHED_SECONDS.labels(self.name).set(oldest)
