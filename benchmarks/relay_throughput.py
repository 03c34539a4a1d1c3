"""Relay throughput (broker-confirmed rows per second) and latency from commit to confirmation.

Throughput: a pre-filled outbox drained by one relay. Latency: writers commit one event per
transaction at a steady rate while the relay runs; each row's latency is the time from its
insert to the relay's mark, which comes after the broker's confirmation.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from datetime import UTC, datetime

import psycopg
from confluent_kafka import Producer
from psycopg.conninfo import make_conninfo

from benchmarks.consumer_throughput import _say
from benchmarks.consumer_throughput import database_url as _database
from benchmarks.rows import Row as BenchRow
from benchmarks.rows import table, write_json
from effectively_once import schema as runtime_schema
from effectively_once.faults import FaultPoints
from effectively_once.outbox import add_to_outbox
from effectively_once.relay import claim
from effectively_once.relay.publish import producer_settings
from effectively_once.relay.settings import RelaySettings
from effectively_once.relay.worker import DatabaseRelay
from infra.launcher import kafka_broker, stack
from services.settings import PROJECT_ROOT, Settings
from workbench.ledger import entry

RESULTS = PROJECT_ROOT / "artifacts" / "bench" / "relay.json"


def _outbox_schema(url: str) -> str:
    schema = f"bench_outbox_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
        connection.execute(f"SET search_path = {schema}")
        for migration in sorted(runtime_schema.MIGRATIONS.glob("*.sql")):  # the outbox as it is today
            connection.execute(migration.read_text())
    return make_conninfo(url, options=f"-c search_path={schema}")


def _relay(url: str, bootstrap: str) -> DatabaseRelay:
    settings = RelaySettings(KAFKA_BOOTSTRAP_SERVERS=bootstrap, RELAY_POLL_INTERVAL_SECONDS=0.5)
    producer = Producer(producer_settings(bootstrap, settings.RELAY_DELIVERY_TIMEOUT_SECONDS))
    return DatabaseRelay("bench", lambda: psycopg.connect(url), producer, settings, FaultPoints())


def _unpublished(url: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone()
    return int(row[0]) if row else 0


def _prefill(url: str, topic: str, rows: int) -> None:
    with psycopg.connect(url) as connection:
        connection.execute(
            """INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, topic, payload)
               SELECT gen_random_uuid()::text, 'order', 'order-' || (n %% 1000), 'LedgerEntry', %s,
                      jsonb_build_object('sequence', n, 'amount', 1)
                 FROM generate_series(1, %s) AS n""",
            (topic, rows),
        )


def sql_only_throughput(url: str, topic: str, rows: int) -> float:
    """The relay's SQL-only twin: the same claim and mark statements on the same rows, in the
    same transactions of RELAY_BATCH_SIZE, without Kafka: what the relay's rate is bounded by."""
    _prefill(url, topic, rows)
    settings = RelaySettings(KAFKA_BOOTSTRAP_SERVERS="unused:9092")
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as work:
        while True:
            with work.transaction():
                claimed = claim.claim(work, settings.RELAY_KEYS_PER_BATCH, settings.RELAY_BATCH_SIZE)
                if not claimed:
                    break
                claim.mark_published(work, [row.message_id for row in claimed], claim.span(claimed))
    elapsed = time.perf_counter() - started
    assert _unpublished(url) == 0
    return rows / elapsed


def throughput(url: str, bootstrap: str, topic: str, rows: int) -> float:
    """Rows per second, broker-confirmed and marked, draining a pre-filled outbox."""
    _prefill(url, topic, rows)
    relay = _relay(url, bootstrap)
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as work:
        while relay.relay_once(work):
            pass
    elapsed = time.perf_counter() - started
    assert _unpublished(url) == 0
    return rows / elapsed


def latency(url: str, bootstrap: str, topic: str, rate: int, seconds: float) -> dict[str, float]:
    """p50 and p99 (ms) from insert to broker-confirmed mark at a steady `rate` events/s."""
    relay = _relay(url, bootstrap)
    runner = threading.Thread(target=relay.run, daemon=True)
    runner.start()
    writers, stop_at = 2, time.monotonic() + seconds

    def write(offset: int) -> None:
        interval = writers / rate
        next_at = time.monotonic() + offset * interval / writers
        with psycopg.connect(url) as connection:
            n = 0
            while time.monotonic() < stop_at:
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # pacing the load, not waiting for a result
                event = entry(f"order-{offset}-{n % 200}", sequence=n)
                object.__setattr__(event, "occurred_at", datetime.now(UTC))
                with connection.transaction():
                    add_to_outbox(connection, event, topic)
                n += 1
                next_at += interval

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    deadline = time.monotonic() + 60
    while _unpublished(url) and time.monotonic() < deadline:
        time.sleep(0.1)
    relay.stop()
    runner.join(30)
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT extract(epoch FROM published_at - created_at) * 1000 FROM outbox "
            "WHERE published_at IS NOT NULL ORDER BY 1"
        ).fetchall()
    values = [float(row[0]) for row in rows]
    quantiles = statistics.quantiles(values, n=100)
    return {
        "events": len(values),
        "achieved_rate": len(values) / seconds,
        "p50_ms": statistics.median(values),
        "p99_ms": quantiles[98],
    }


def measure(rows: int, rate: int, seconds: float, system: Settings | None = None) -> list[BenchRow]:
    """On `system` (default: the one `make up` runs, started if need be)."""
    endpoints = stack.up(system or Settings(), _say, with_platform=False)
    settings = Settings(
        DATABASE_URL=endpoints.admin_database_url, KAFKA_BOOTSTRAP_SERVERS=endpoints.kafka_bootstrap_servers
    )
    bootstrap = settings.kafka_bootstrap_servers
    url = _database(settings)
    topic = f"bench.relay.{uuid.uuid4().hex[:8]}"
    kafka_broker.ensure_topics(bootstrap, (topic,))
    _say(f"relay throughput: draining {rows} rows")
    drained = throughput(_outbox_schema(url), bootstrap, topic, rows)
    _say(f"relay's SQL-only twin: the same claims and marks on {rows} rows, without Kafka")
    twin = sql_only_throughput(_outbox_schema(url), topic, rows)
    _say(f"relay latency: {rate} events/s for {seconds:.0f} s")
    steady = latency(_outbox_schema(url), bootstrap, topic, rate, seconds)
    at = f"at {steady['achieved_rate']:,.0f} events/s"
    return [
        BenchRow(
            "relay",
            "throughput",
            drained,
            "rows/s",
            "≥ 10,000/s",
            drained >= 10_000,
            f"{rows:,} rows, broker-confirmed and marked",
            drained / 10_000,
        ),
        BenchRow(
            "relay",
            "throughput ÷ SQL-only twin",
            drained / twin,
            "×",
            "≥ 0.8×",
            drained / twin >= 0.8,
            f"twin {twin:,.0f} rows/s: the same claim and mark statements, no Kafka",
            drained / twin / 0.8,
        ),
        BenchRow("relay", "latency p50", steady["p50_ms"], "ms", detail=f"commit to confirmed mark, {at}"),
        BenchRow(
            "relay", "latency p99", steady["p99_ms"], "ms", "≤ 50 ms", steady["p99_ms"] <= 50, at, 50 / steady["p99_ms"]
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--rate", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=10)
    arguments = parser.parse_args(argv)
    print("outbox relay: throughput and latency")
    rows = measure(arguments.rows, arguments.rate, arguments.seconds)
    print("\n".join(["", *table(rows)]))
    print(f"\nwritten to {write_json(rows, RESULTS).relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
