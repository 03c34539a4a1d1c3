"""Marks for an outbox that Debezium publishes (RELAY=debezium): what its slot has confirmed.

Debezium reads the outbox's inserts from the write-ahead log, so nothing marks them published,
and the purge, the backlog and the auditor all read `published_at`. Here the relay marks them
instead, exactly: a row is marked once Debezium has confirmed the commit that wrote it.

How it knows, without reading the log: each round takes a watermark, first the oldest transaction
still running anywhere (the snapshot's xmin), then the write-ahead log's insert position. Every
transaction below that xmin had ended before the position was read, so its commit lies below the
position. Once the slot's confirmed position passes a watermark's, every row whose inserting
transaction (`xact`, written by migration 0007's trigger) is below its xmin has been sent to
Kafka and confirmed by the broker: Debezium confirms a position to its slot only after the
records before it are flushed. So a row is never marked before it is on its topic; switching back
to the built-in relay publishes whatever is not marked yet.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import psycopg

Connection = psycopg.Connection[Any]

XMIN = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text"
INSERT_POSITION = "SELECT pg_current_wal_insert_lsn()::text"
SLOT = """
SELECT confirmed_flush_lsn::text, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint
  FROM pg_replication_slots WHERE slot_name = %s
"""
"""The slot's confirmed position, and the bytes of write-ahead log it keeps the server from removing."""
MARK_READ = """
UPDATE outbox SET published_at = clock_timestamp(), attempts = attempts + 1, last_error = NULL
 WHERE published_at IS NULL AND xact < %s::text::xid8
"""


def lsn(text: str) -> int:
    """A write-ahead log position ('16/B374D848') as a number that orders as positions do."""
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


@dataclass
class ReadMarks:
    """One database's watermarks, oldest first, and what the slot has confirmed of them."""

    slot: str
    watermarks: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=1000))
    """(log position, transaction id) pairs not yet passed by the slot's confirmed position."""
    retained_bytes: int | None = None
    """The write-ahead log the slot retains, as last read; None while there is no such slot."""

    def mark(self, connection: Connection) -> int:
        """Take a watermark, mark the rows below the newest one the slot has passed; how many.
        `connection` is in autocommit: the two readings must be two statements, in this order."""
        xmin = int(_one(connection, XMIN))
        self.watermarks.append((lsn(_one(connection, INSERT_POSITION)), xmin))
        slot = connection.execute(SLOT, (self.slot,)).fetchone()
        self.retained_bytes = int(slot[1]) if slot and slot[1] is not None else None
        confirmed_text = slot[0] if slot else None
        if confirmed_text is None:
            return 0  # no such slot yet, or it confirmed nothing
        confirmed = lsn(confirmed_text)
        passed = None
        while self.watermarks and self.watermarks[0][0] <= confirmed:
            passed = self.watermarks.popleft()
        if passed is None:
            return 0
        return connection.execute(MARK_READ, (str(passed[1]),)).rowcount


def _one(connection: Connection, query: str, parameters: tuple[Any, ...] = ()) -> Any:
    row = connection.execute(query, parameters).fetchone()
    return row[0] if row else None
