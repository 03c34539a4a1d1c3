"""Costs as the marker table grows: claim latency (applied and duplicate), purge cost per expired
row, bytes, dead tuples and the vacuum a purge leaves, at 10 k, 1 M and 10 M markers, for two
retention designs side by side:

- "batched DELETE": the table before migration 0005 (primary key (consumer, message id), an
  index on processed_at) and its purge statement, 1,000 rows a transaction;
- "partitioned by day": the runtime's table today (every migration applied), its CLAIM and its
  purge (`purge_markers`), which drops an expired day whole. A unique key on a partitioned table
  must hold the partition column, so its key is (consumer, message id, occurred_at).

Markers are spread evenly over 40 days; each purge expires the oldest day (1/40 of them), three
days one after another. A purge's cost per expired row counts the VACUUM it leaves to do (dead
tuples, and each index scanned whole to remove them), the median of the three.
Run alone: `python -m benchmarks.table_growth [SIZES]`, e.g. `10000,1000000`.
"""

from __future__ import annotations

import hashlib
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
from effectively_once.correct_path import CLAIM
from effectively_once.retention import BATCH_DELETE, purge_markers

T = TypeVar("T")
DAYS = 40
SAMPLES = 2_000
PURGED_DAYS = 3
"""Days expired one after another, each followed by the VACUUM it calls for; the median counts."""
CONSUMER = "bench-growth-v1"
SCHEMA = "bench_growth"


@dataclass(frozen=True)
class Design:
    name: str
    table: str
    create: str
    index: str
    claim: str
    """Parameters: %(id)s, %(at)s (the message's occurred_at)."""


DELETE = Design(
    "batched DELETE",
    "m_delete",
    """CREATE TABLE m_delete (consumer_name text NOT NULL, message_id text NOT NULL,
                              processed_at timestamptz NOT NULL DEFAULT now())""",
    """ALTER TABLE m_delete ADD PRIMARY KEY (consumer_name, message_id);
       CREATE INDEX ON m_delete (processed_at)""",
    "INSERT INTO m_delete (consumer_name, message_id) VALUES ('" + CONSUMER + "', %(id)s) ON CONFLICT DO NOTHING",
)
_RUNTIME_CLAIM = CLAIM.replace(
    "VALUES (%s, %s, %s::timestamptz)", f"VALUES ('{CONSUMER}', %(id)s, %(at)s::timestamptz)"
)
assert _RUNTIME_CLAIM != CLAIM, "the runtime's CLAIM changed shape: adapt the bench's copy"
PARTITIONED = Design(
    "partitioned by day",
    "processed_message",
    ";".join(path.read_text() for path in sorted(schema.MIGRATIONS.glob("*.sql"))),
    "",
    _RUNTIME_CLAIM,
)
DESIGNS = (DELETE, PARTITIONED)


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


def _fill(connection: psycopg.Connection[Any], design: Design, markers: int, base: datetime) -> None:
    """`markers` rows over DAYS days before `base`: row n occurred at base - n·step."""
    fresh_schema(connection)
    connection.execute(design.create)
    step = DAYS * 86400 / markers
    if design is PARTITIONED:  # each day's partition, as the upkeep made it on the day
        for days_ago in range(DAYS + 1, -2, -1):
            connection.execute("SELECT processed_message_day(%s)", (day_start(base, days_ago).date(),))
    at = "%(base)s - make_interval(secs => n * %(step)s)"
    if design is PARTITIONED:
        columns, values = (
            "consumer_name, message_id, occurred_at, processed_at",
            f"%(consumer)s, md5(n::text), {at}, {at}",
        )
    else:
        columns, values = "consumer_name, message_id, processed_at", f"%(consumer)s, md5(n::text), {at}"
    connection.execute(
        f"INSERT INTO {design.table} ({columns}) SELECT {values} FROM generate_series(1, %(markers)s) AS n",
        {"consumer": CONSUMER, "base": base, "step": step, "markers": markers},
    )
    for statement in filter(str.strip, design.index.split(";")):
        connection.execute(statement)
    connection.execute(f"VACUUM ANALYZE {design.table}")


def latencies(connection: psycopg.Connection[Any], statement: str, parameters: list[dict[str, Any]]) -> list[float]:
    """Each claim's statement round trip in milliseconds, 100 claims a transaction (the commit's
    fsync does not grow with the table, and would only add noise)."""
    seconds = []
    with connection.cursor() as cursor:
        for chunk in range(0, len(parameters), 100):
            with connection.transaction():
                for parameter in parameters[chunk : chunk + 100]:
                    started = time.perf_counter()
                    cursor.execute(statement, parameter)
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
    horizon = datetime.now(UTC) - cutoff
    if design is PARTITIONED:
        return purge_markers(connection, horizon, consumer_name=CONSUMER)
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
    step = DAYS * 86400 / markers
    with psycopg.connect(url, autocommit=True) as connection:
        started = time.perf_counter()
        _fill(connection, design, markers, base)
        say(f"{design.name}: {markers:,} markers filled in {time.perf_counter() - started:.0f} s")
        applied = latencies(
            connection, design.claim, [{"id": f"new-{n}", "at": datetime.now(UTC)} for n in range(SAMPLES)]
        )
        picks = [1 + (n * 7919) % markers for n in range(SAMPLES)]  # spread over the whole table
        duplicate = latencies(
            connection,
            design.claim,
            [{"id": _md5(n), "at": base - timedelta(seconds=n * step)} for n in picks],
        )
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


def _md5(n: int) -> str:
    return hashlib.md5(str(n).encode()).hexdigest()  # the fill's md5(n::text): an id, not a secret


def measure(url: str, sizes: Sequence[int], say: Callable[[str], None] = print) -> list[Measured]:
    return [measure_one(url, design, markers, say) for markers in sizes for design in DESIGNS]


def rows(results: Sequence[Measured]) -> list[Row]:
    """The targets for the shipped design, the other beside it; the smallest and largest sizes."""
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
        out += [
            Row("growth", f"{design.name}: claim p99", claim, "×", "≤ 1.5×", claim <= 1.5, size, 1.5 / claim),
            Row("growth", f"{design.name}: dup p99", duplicate, "×", "≤ 1.5×", duplicate <= 1.5, size, 1.5 / duplicate),
            Row(
                "growth",
                f"{design.name}: purge/row",
                purge,
                "×",
                "≤ 1.5×",
                purge <= 1.5,
                f"{large.markers / 1e6:g} M vs {mid.markers / 1e6:g} M",
                1.5 / purge,
            ),
        ]
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
