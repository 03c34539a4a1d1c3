"""Marker retention: markers older than the horizon are purged in small batches.

Each batch is its own short transaction and skips rows another transaction holds (SKIP LOCKED),
so a purge never makes a consumer wait for long. The same horizon makes the processor refuse
messages older than it (dead-lettered as beyond the dedup horizon): their markers may be gone.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

PURGE = """
DELETE FROM processed_message
 WHERE ctid = ANY(ARRAY(
       SELECT ctid FROM processed_message
        WHERE processed_at < now() - %(horizon)s
          AND (%(consumer)s::text IS NULL OR consumer_name = %(consumer)s)
        LIMIT %(batch)s
          FOR UPDATE SKIP LOCKED))
"""


def purge_markers(
    connection: psycopg.Connection[Any],
    horizon: timedelta,
    batch_size: int = 1000,
    consumer_name: str | None = None,
) -> int:
    """Delete markers older than `horizon`, `batch_size` at a time; return how many went."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    total = 0
    while True:
        with connection.transaction():
            deleted = connection.execute(
                PURGE, {"horizon": horizon, "consumer": consumer_name, "batch": batch_size}
            ).rowcount
        total += deleted
        if deleted < batch_size:
            return total
