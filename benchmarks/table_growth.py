"""Costs as the marker table grows: claim latency (applied and duplicate), purge cost per expired
row, bytes, dead tuples and the vacuum a purge leaves, at 10 k, 1 M and 10 M markers, for three
retention designs side by side:

- "batched DELETE": the table before migration 0005 (primary key (consumer, message id), an
  index on processed_at) and its purge statement, 1,000 rows a transaction;
- "by occurred_at": migration 0005's table, partitioned by the day the message occurred. A unique
  key on a partitioned table must hold the partition column, so its key was (consumer, message
  id, occurred_at): a copy with another occurred_at was claimed again. Its purge dropped a day;
- "by id time": the runtime's table today (every migration applied), partitioned by the day its
  UUIDv7 message id carries, a CHECK tying that column to the id, so the key is (consumer,
  message id) in effect; its CLAIM with the content digest, a duplicate's comparison of content,
  and its purge (`purge_markers`), which drops an expired day whole.

Markers are spread evenly over 40 days; each purge expires the oldest day (1/40 of them), three
days one after another. A purge's cost per expired row counts the VACUUM it leaves to do (dead
tuples, and each index scanned whole to remove them), the median of the three.
Run alone: `python -m benchmarks.table_growth [SIZES]`, e.g. `10000,1000000`.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar

import psycopg
from psycopg import sql

from benchmarks.rows import Row
from effectively_once import schema
from effectively_once.consumer.transaction import CLAIM, DIFFERENCES
from effectively_once.message_ids import new_message_id
from effectively_once.retention import BATCH_DELETE, purge_markers

T = TypeVar("T")
DAYS = 40
SAMPLES = 2_000
PURGED_DAYS = 3
"""Days expired one after another, each followed by the VACUUM it calls for; the median counts."""
CONSUMER = "bench-growth-v1"
SCHEMA = "bench_growth"
BODY = json.dumps(
    {
        "type": "OrderPlaced",
        "version": 1,
        "key": "order-bench",
        "occurred_at": "2026-12-05T12:00:00.000000+00:00",
        "trace_id": "0123456789abcdef0123456789abcdef",
        "payload": {
            "order_id": "order-bench",
            "customer_email": "ada@example.com",
            "payment_method": "pm_card_visa",
            "amount_cents": 1200,
            "lines": [{"sku": "sku-filter", "quantity": 1}, {"sku": "sku-kettle", "quantity": 2}],
        },
    }
)
"""A body of the saga's size, for the claim's content digest."""
DELIVERY = json.dumps({"key": b"order-bench".hex(), "headers": {"eo-trace-id": ["30313233"]}})

RUNTIME = sorted(schema.MIGRATIONS.glob("*.sql"))
Claim = Callable[[psycopg.Cursor[Any], str, datetime], None]
"""Claims one marker (id, occurred_at), as the design's consumer would, duplicates included."""


def _claim_deleted(cursor: psycopg.Cursor[Any], message_id: str, occurred: datetime) -> None:
    cursor.execute(
        "INSERT INTO m_delete (consumer_name, message_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (CONSUMER, message_id),
    )


def _claim_by_occurred_at(cursor: psycopg.Cursor[Any], message_id: str, occurred: datetime) -> None:
    cursor.execute(
        "INSERT INTO processed_message (consumer_name, message_id, occurred_at) VALUES (%s, %s, %s) "
        "ON CONFLICT DO NOTHING RETURNING message_id",
        (CONSUMER, message_id, occurred),
    )


def _claim_by_id_time(cursor: psycopg.Cursor[Any], message_id: str, occurred: datetime) -> None:
    cursor.execute(CLAIM, (CONSUMER, message_id, message_id, BODY, DELIVERY))
    if cursor.fetchone() is None:  # a duplicate compares its content with the marker's
        cursor.execute(DIFFERENCES, (BODY, DELIVERY, CONSUMER, message_id, message_id))


@dataclass(frozen=True)
class Design:
    name: str
    table: str
    create: list[str]
    """Statements that make the table (the migrations of its time)."""
    index: str
    claim: Claim
    time_column: str
    """Its partition column (or, unpartitioned, processed_at)."""


DELETE = Design(
    "batched DELETE",
    "m_delete",
    [
        """CREATE TABLE m_delete (consumer_name text NOT NULL, message_id text NOT NULL,
                                  processed_at timestamptz NOT NULL DEFAULT now())"""
    ],
    """ALTER TABLE m_delete ADD PRIMARY KEY (consumer_name, message_id);
       CREATE INDEX ON m_delete (processed_at)""",
    _claim_deleted,
    "processed_at",
)
BY_OCCURRED_AT = Design(
    "by occurred_at",
    "processed_message",
    [path.read_text() for path in RUNTIME if path.name < "0008"],
    "",
    _claim_by_occurred_at,
    "occurred_at",
)
BY_ID_TIME = Design(
    "by id time",
    "processed_message",
    [path.read_text() for path in RUNTIME],
    "",
    _claim_by_id_time,
    "id_time",
)
DESIGNS = (DELETE, BY_OCCURRED_AT, BY_ID_TIME)
SHIPPED = BY_ID_TIME
"""The design the runtime ships: the one the targets are for."""


@dataclass(frozen=True)
class Measured:
    design: str
    markers: int
    applied_p50_ms: float
    applied_p99_ms: float
    duplicate_p50_ms: float
    duplicate_p99_ms: float
    purge: PurgeCost


def day_start(base: datetime, days_ago: int) -> datetime:
    return (base - timedelta(days=days_ago)).replace(hour=0, minute=0, second=0, microsecond=0)


def fresh_schema(connection: psycopg.Connection[Any]) -> None:
    """An empty SCHEMA, first on the search path."""
    connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
    connection.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(SCHEMA)))


@dataclass(frozen=True)
class PurgeRound:
    rows: int
    purge_seconds: float
    dead_tuples: int
    vacuum_seconds: float

    @property
    def seconds_per_row(self) -> float:
        return (self.purge_seconds + self.vacuum_seconds) / self.rows


def purge_rounds(connection: psycopg.Connection[Any], table: str, purge: Callable[[int], int]) -> list[PurgeRound]:
    """Expire the PURGED_DAYS oldest days one after another (`purge(days_ago)` returns the rows
    it removed), each followed by the VACUUM it leaves autovacuum to do."""
    rounds = []
    for days_ago in range(DAYS, DAYS - PURGED_DAYS, -1):
        started = time.perf_counter()
        removed = purge(days_ago)
        purge_seconds = time.perf_counter() - started
        dead = dead_tuples(connection, table)
        started = time.perf_counter()
        connection.execute(sql.SQL("VACUUM {}").format(sql.Identifier(table)))
        rounds.append(PurgeRound(removed, purge_seconds, dead, time.perf_counter() - started))
    assert all(r.rows > 0 for r in rounds), rounds
    return rounds


@dataclass(frozen=True)
class PurgeCost:
    """Expiring one day: the median of PURGED_DAYS rounds, and the table's bytes before and after."""

    rows: int
    us_per_row: float
    """Purge and the vacuum it calls for, per expired row."""
    bytes_before: int
    bytes_after: int
    dead_tuples: int
    """Left by the purge, for the vacuum to remove."""
    vacuum_seconds: float

    HEADER: ClassVar[str] = f"{'purged':>10}{'µs/row':>9}{'MB before→after':>20}{'dead':>10}{'vacuum s':>10}"

    def columns(self) -> str:
        return (
            f"{self.rows:>10,}{self.us_per_row:>9.2f}{self.bytes_before / 1e6:>11.0f}→{self.bytes_after / 1e6:<8.0f}"
            f"{self.dead_tuples:>10,}{self.vacuum_seconds:>10.2f}"
        )


def purge_cost(connection: psycopg.Connection[Any], table: str, purge: Callable[[int], int]) -> PurgeCost:
    """The PURGED_DAYS oldest days expired one after another; the median round by cost per row."""
    bytes_before = table_bytes(connection, table)
    rounds = purge_rounds(connection, table, purge)
    median = sorted(rounds, key=lambda r: r.seconds_per_row)[len(rounds) // 2]
    return PurgeCost(
        median.rows,
        median.seconds_per_row * 1e6,
        bytes_before,
        table_bytes(connection, table),
        median.dead_tuples,
        median.vacuum_seconds,
    )


def run_alone(
    argv: Sequence[str],
    default_sizes: str,
    measure: Callable[[str, list[int]], list[T]],
    describe: Callable[[list[T]], list[str]],
    rows: Callable[[list[T]], list[Row]],
) -> int:
    """`python -m benchmarks.<growth bench> [SIZES]` against the bench database."""
    from benchmarks.consumer_throughput import database_url
    from services.settings import Settings

    sizes = [int(size) for size in (argv[0] if argv else default_sizes).split(",")]
    results = measure(database_url(Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None)), sizes)
    print("\n".join([*describe(results), *(str(row) for row in rows(results))]))
    return 0


BENCH_FUNCTIONS = """
CREATE FUNCTION bench_at(base timestamptz, step double precision, n bigint) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE AS $$ SELECT base - make_interval(secs => n * step) $$;
CREATE FUNCTION bench_id(at timestamptz, n bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT substr(t, 1, 8) || '-' || substr(t, 9, 4) || '-7' || substr(h, 1, 3) || '-8' || substr(h, 4, 3)
           || '-' || substr(h, 7, 12)
      FROM (SELECT lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') AS t, md5(n::text) AS h) AS parts
$$;
"""
"""Marker n of a fill: its message's time, and its UUIDv7 id carrying that time (the id minted then)."""


def _fill(connection: psycopg.Connection[Any], design: Design, markers: int, base: datetime) -> None:
    """`markers` rows over DAYS days before `base`: row n's message was minted at base - n·step."""
    fresh_schema(connection)
    for statement in design.create:
        connection.execute(statement)
    connection.execute(BENCH_FUNCTIONS)
    step = DAYS * 86400 / markers
    if design is not DELETE:  # each day's partition, as the upkeep made it on the day
        for days_ago in range(DAYS + 1, -2, -1):
            connection.execute("SELECT processed_message_day(%s)", (day_start(base, days_ago).date(),))
    at = "bench_at(%(base)s, %(step)s, n)"
    columns, values = {
        DELETE.name: ("consumer_name, message_id, processed_at", f"%(consumer)s, bench_id({at}, n), {at}"),
        BY_OCCURRED_AT.name: (
            "consumer_name, message_id, occurred_at, processed_at",
            f"%(consumer)s, bench_id({at}, n), {at}, {at}",
        ),
        BY_ID_TIME.name: (
            "consumer_name, message_id, id_time, content_digest, processed_at",
            f"%(consumer)s, bench_id({at}, n), message_id_time(bench_id({at}, n)), "
            f"message_content_digest(%(body)s::jsonb, %(delivery)s::jsonb), {at}",
        ),
    }[design.name]
    connection.execute(
        f"INSERT INTO {design.table} ({columns}) SELECT {values} FROM generate_series(1, %(markers)s) AS n",
        {"consumer": CONSUMER, "base": base, "step": step, "markers": markers, "body": BODY, "delivery": DELIVERY},
    )
    for statement in filter(str.strip, design.index.split(";")):
        connection.execute(statement)
    connection.execute(f"VACUUM ANALYZE {design.table}")


def _fill_rows(
    connection: psycopg.Connection[Any], base: datetime, markers: int, picks: list[int]
) -> list[tuple[str, datetime]]:
    """The id and time of the markers numbered `picks`, as the fill made them."""
    step = DAYS * 86400 / markers
    rows = connection.execute(
        "SELECT bench_id(bench_at(%s, %s, n), n), bench_at(%s, %s, n) FROM unnest(%s::bigint[]) AS n",
        (base, step, base, step, picks),
    ).fetchall()
    return [(row[0], row[1]) for row in rows]


def latencies(connection: psycopg.Connection[Any], claim: Claim, markers: list[tuple[str, datetime]]) -> list[float]:
    """Each claim's round trips in milliseconds (a duplicate's comparison of content included),
    100 claims a transaction (the commit's fsync does not grow with the table, and would only add
    noise)."""
    seconds = []
    with connection.cursor() as cursor:
        for chunk in range(0, len(markers), 100):
            with connection.transaction():
                for message_id, occurred in markers[chunk : chunk + 100]:
                    started = time.perf_counter()
                    claim(cursor, message_id, occurred)
                    seconds.append((time.perf_counter() - started) * 1000)
    return seconds


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


_TREE = "SELECT %(table)s::regclass AS relid UNION SELECT relid FROM pg_partition_tree(%(table)s::regclass)"
"""The table and, when it is partitioned, its partitions."""


def table_bytes(connection: psycopg.Connection[Any], table: str) -> int:
    row = connection.execute(
        f"SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM ({_TREE}) AS tree",
        {"table": f"{SCHEMA}.{table}"},
    ).fetchone()
    return int(row[0]) if row else 0


def dead_tuples(connection: psycopg.Connection[Any], table: str) -> int:
    connection.execute("SELECT pg_stat_force_next_flush()")
    row = connection.execute(
        f"SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relid IN ({_TREE})",
        {"table": f"{SCHEMA}.{table}"},
    ).fetchone()
    return int(row[0]) if row else 0


def _purge(connection: psycopg.Connection[Any], design: Design, base: datetime, days_ago: int) -> int:
    """Expire the day `days_ago` (every older one went already); return how many markers went."""
    cutoff = day_start(base, days_ago - 1)
    if design is BY_ID_TIME:
        return purge_markers(connection, datetime.now(UTC) - cutoff, consumer_name=CONSUMER)
    if design is BY_OCCURRED_AT:  # what its purge did with a day of one consumer's markers: drop it
        day = sql.Identifier(f"processed_message_{day_start(base, days_ago):%Y%m%d}")
        with connection.transaction():
            connection.execute("LOCK TABLE processed_message IN ACCESS EXCLUSIVE MODE")
            row = connection.execute(sql.SQL("SELECT count(*) FROM {}").format(day)).fetchone()
            connection.execute(sql.SQL("DROP TABLE {}").format(day))
        return int(row[0]) if row else 0
    statement = sql.SQL(BATCH_DELETE).format(table=sql.Identifier(design.table), time=sql.Identifier("processed_at"))
    total = 0
    while True:
        with connection.transaction():
            deleted = connection.execute(statement, {"cutoff": cutoff, "consumer": CONSUMER, "batch": 1000}).rowcount
        total += deleted
        if deleted < 1000:
            return total


def measure_one(url: str, design: Design, markers: int, say: Callable[[str], None]) -> Measured:
    base = day_start(datetime.now(UTC), 0)  # midnight: each day's partition holds a whole day
    with psycopg.connect(url, autocommit=True) as connection:
        started = time.perf_counter()
        _fill(connection, design, markers, base)
        say(f"{design.name}: {markers:,} markers filled in {time.perf_counter() - started:.0f} s")
        fresh = [(new_message_id(), datetime.now(UTC)) for _ in range(SAMPLES)]
        applied = latencies(connection, design.claim, fresh)
        picks = [1 + (n * 7919) % markers for n in range(SAMPLES)]  # spread over the whole table
        duplicate = latencies(connection, design.claim, _fill_rows(connection, base, markers, picks))
        purged = purge_cost(connection, design.table, lambda days_ago: _purge(connection, design, base, days_ago))
        connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(SCHEMA)))
    assert len(applied) == SAMPLES
    return Measured(
        design.name,
        markers,
        percentile(applied, 50),
        percentile(applied, 99),
        percentile(duplicate, 50),
        percentile(duplicate, 99),
        purged,
    )


def measure(url: str, sizes: Sequence[int], say: Callable[[str], None] = print) -> list[Measured]:
    return [measure_one(url, design, markers, say) for markers in sizes for design in DESIGNS]


def rows(results: Sequence[Measured]) -> list[Row]:
    """Growth from the smallest size to the largest, for every design (the targets are the shipped
    design's: its claims and purges stay flat as the table grows)."""
    out: list[Row] = []
    for design in DESIGNS:
        mine = sorted((m for m in results if m.design == design.name), key=lambda m: m.markers)
        if len(mine) < 2:
            continue
        small, large = mine[0], mine[-1]
        claim = large.applied_p99_ms / small.applied_p99_ms
        duplicate = large.duplicate_p99_ms / small.duplicate_p99_ms
        mid = next((m for m in mine if m.markers == 1_000_000), mine[-2] if len(mine) > 2 else small)
        purge = large.purge.us_per_row / mid.purge.us_per_row
        size = f"{large.markers / 1e6:g} M vs {small.markers / 1e3:g} k"
        grown = f"{large.markers / 1e6:g} M vs {mid.markers / 1e6:g} M"
        for case, ratio, detail in (
            ("claim p99", claim, size),
            ("dup p99", duplicate, size),
            ("purge/row", purge, grown),
        ):
            if design is SHIPPED:
                out.append(
                    Row("growth", f"{design.name}: {case}", ratio, "×", "≤ 1.5×", ratio <= 1.5, detail, 1.5 / ratio)
                )
            else:  # beside it, for comparison
                out.append(Row("growth", f"{design.name}: {case}", ratio, "×", "", None, detail))
    return out


def describe(results: Sequence[Measured]) -> list[str]:
    lines = [f"{'design':<20}{'markers':>12}{'applied p50/p99 ms':>22}{'dup p50/p99 ms':>20}{PurgeCost.HEADER}"]
    for m in results:
        lines.append(
            f"{m.design:<20}{m.markers:>12,}{m.applied_p50_ms:>11.3f}/{m.applied_p99_ms:<10.3f}"
            f"{m.duplicate_p50_ms:>9.3f}/{m.duplicate_p99_ms:<10.3f}{m.purge.columns()}"
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(run_alone(sys.argv[1:], "10000,1000000,10000000", measure, describe, rows))
