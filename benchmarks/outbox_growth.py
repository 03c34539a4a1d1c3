"""Costs as the outbox keeps published rows: the relay's claim (which rows to publish next) with
1,000 rows waiting among 1 M and 10 M published ones, and the purge of published rows: cost per
expired row with the vacuum it leaves, bytes and dead tuples. Two designs side by side:

- "batched DELETE": the outbox before migration 0006, purged 1,000 rows a transaction;
- "partitioned by day": the runtime's outbox today (every migration applied) and the relay's
  purge (`purge_published`), which drops a published day whole.

Published rows are spread over 40 days; the purge expires the oldest day, three days one after
another (the median counts), as benchmarks/table_growth.py does for markers.
Run alone: `python -m benchmarks.outbox_growth [SIZES]`, e.g. `1000000`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.rows import Row
from benchmarks.table_growth import (
    DAYS,
    SCHEMA,
    PurgeCost,
    day_start,
    fresh_schema,
    percentile,
    purge_cost,
    run_alone,
)
from effectively_once import schema
from effectively_once.relay.claim import ADVISORY_LOCK_CLASS, LOCKED_KEYS_WITH_WORK, purge_published

WAITING = 1_000
SAMPLES = 500


DELETE, PARTITIONED = "batched DELETE", "partitioned by day"
DESIGNS = (DELETE, PARTITIONED)
BEFORE_0006 = """
DELETE FROM outbox
 WHERE ctid = ANY(ARRAY(
       SELECT ctid FROM outbox WHERE published_at < %(cutoff)s LIMIT 1000 FOR UPDATE SKIP LOCKED))
"""
"""The purge statement before the outbox was partitioned."""


@dataclass(frozen=True)
class Measured:
    design: str
    published: int
    claim_p50_ms: float
    claim_p99_ms: float
    purge: PurgeCost


def _fill(connection: psycopg.Connection[Any], design: str, published: int, base: datetime) -> None:
    fresh_schema(connection)
    if design == DELETE:
        connection.execute((schema.MIGRATIONS / "0002_outbox.sql").read_text())
    else:
        for migration in sorted(schema.MIGRATIONS.glob("*.sql")):
            connection.execute(migration.read_text())
        for days_ago in range(DAYS + 1, -2, -1):  # each day's partition, as the relay's upkeep made it
            connection.execute("SELECT day_partition('outbox', 'created_at', %s)", (day_start(base, days_ago).date(),))
    at = "%(base)s - make_interval(secs => n * %(step)s)"
    connection.execute(
        f"""INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, topic, payload,
                                created_at, published_at, attempts)
            SELECT md5(n::text), 'order', 'order-' || (n %% 5000), 'OrderPlaced', 'orders.events',
                   jsonb_build_object('order_id', 'order-' || (n %% 5000), 'lines', jsonb_build_array()),
                   {at}, {at} + interval '1 second', 1
              FROM generate_series(1, %(published)s) AS n""",
        {"base": base, "step": DAYS * 86400 / published, "published": published},
    )
    connection.execute(
        """INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, topic, payload)
           SELECT 'waiting-' || n, 'order', 'order-' || n, 'OrderPlaced', 'orders.events', '{}'::jsonb
             FROM generate_series(1, %s) AS n""",
        (WAITING,),
    )
    connection.execute("VACUUM ANALYZE outbox")


def _purge(connection: psycopg.Connection[Any], design: str, base: datetime, days_ago: int) -> int:
    """Expire the day `days_ago` (every older one went already); return how many rows went."""
    cutoff = day_start(base, days_ago - 1)
    if design == PARTITIONED:  # its last rows were published a second after the day ended
        return purge_published(connection, datetime.now(UTC) - cutoff - timedelta(seconds=2))
    total = 0
    while True:
        with connection.transaction():
            deleted = connection.execute(BEFORE_0006, {"cutoff": cutoff}).rowcount
        total += deleted
        if deleted < 1000:
            return total


def measure_one(url: str, design: str, published: int, say: Callable[[str], None]) -> Measured:
    base = day_start(datetime.now(UTC), 0)
    with psycopg.connect(url, autocommit=True) as connection:
        started = time.perf_counter()
        _fill(connection, design, published, base)
        say(f"outbox, {design}: {published:,} published rows filled in {time.perf_counter() - started:.0f} s")
        claims = []
        for _ in range(SAMPLES):
            started = time.perf_counter()
            found = connection.execute(
                LOCKED_KEYS_WITH_WORK, {"scan": 500, "keys": 50, "class": ADVISORY_LOCK_CLASS}
            ).fetchall()  # autocommit: each key's lock goes with the statement
            claims.append((time.perf_counter() - started) * 1000)
        assert len(found) == 50, found

        purged = purge_cost(connection, "outbox", lambda days_ago: _purge(connection, design, base, days_ago))
        connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(SCHEMA)))
    return Measured(
        design,
        published,
        percentile(claims, 50),
        percentile(claims, 99),
        purged,
    )


def measure(url: str, sizes: Sequence[int], say: Callable[[str], None] = print) -> list[Measured]:
    return [measure_one(url, design, size, say) for size in sizes for design in DESIGNS]


def rows(results: Sequence[Measured]) -> list[Row]:
    out: list[Row] = []
    for design in DESIGNS:
        ordered = sorted((m for m in results if m.design == design), key=lambda m: m.published)
        if len(ordered) < 2:
            continue
        small, large = ordered[0], ordered[-1]
        claim = large.claim_p99_ms / small.claim_p99_ms
        purge = large.purge.us_per_row / small.purge.us_per_row
        sizes = f"{large.published / 1e6:g} M vs {small.published / 1e6:g} M published"
        out += [
            Row("growth", f"outbox, {design}: relay claim p99", claim, "×", "≤ 1.5×", claim <= 1.5, sizes, 1.5 / claim),
            Row("growth", f"outbox, {design}: purge/row", purge, "×", "≤ 1.5×", purge <= 1.5, sizes, 1.5 / purge),
        ]
    return out


def describe(results: Sequence[Measured]) -> list[str]:
    lines = [f"{'design':<20}{'published':>12}{'claim p50/p99 ms':>20}{PurgeCost.HEADER}"]
    for m in results:
        lines.append(
            f"{m.design:<20}{m.published:>12,}{m.claim_p50_ms:>9.3f}/{m.claim_p99_ms:<10.3f}{m.purge.columns()}"
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(run_alone(sys.argv[1:], "1000000,10000000", measure, describe, rows))
