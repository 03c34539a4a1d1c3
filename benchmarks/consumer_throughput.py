"""How fast one consumer drains a pre-filled topic, beside the same SQL run without Kafka.

`make bench` runs it. Every row of one run shares the machine's weather, so the ratios in the
last columns are what to compare between machines, not the absolute rates.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
from confluent_kafka import Producer
from psycopg import sql

from benchmarks.own_system import default_infrastructure
from benchmarks.process_cpu import servers_cpu_seconds
from benchmarks.rows import Row as BenchRow
from benchmarks.rows import table, write_json
from effectively_once import lab, schema
from effectively_once.consumer import wiring
from effectively_once.consumer.processor import MessageProcessor, ProcessorConfig, path_for
from effectively_once.envelope import Envelope
from effectively_once.kafka_client import client_config
from effectively_once.outcomes import Strategy
from effectively_once.telemetry import KafkaTelemetry
from infra.launcher import kafka_broker
from services.settings import PROJECT_ROOT, Settings, with_credentials, with_database
from workbench.ledger import LEDGER_ENTRY, SCHEMA, entry, ledger_bulk_handler, ledger_handler

DATABASE = "benchmarks"
RESULTS = PROJECT_ROOT / "artifacts" / "bench" / "consumer.json"


@dataclass(frozen=True)
class KafkaCase:
    """What one consumer draining its topic cost, per message, from its first message on."""

    rate: float
    user_us: float
    """This process's CPU in user mode (its Kafka client's threads included)."""
    system_us: float
    """This process's CPU in the kernel: mostly sending and receiving, a round trip at a time."""
    postgres_us: float
    """The PostgreSQL server's, all its processes' (its sessions, the WAL writer, ...)."""
    kafka_us: float
    """The broker's."""
    busy_cores: float
    """The whole machine's, on average."""

    @property
    def cpu_us(self) -> float:
        return self.user_us + self.system_us


@dataclass
class Row:
    case: str
    messages: int
    kafka: KafkaCase
    sql_only_rate: float
    sql_only_cpu_us: float

    @property
    def kafka_rate(self) -> float:
        return self.kafka.rate

    @property
    def ratio(self) -> float:
        return self.kafka_rate / self.sql_only_rate if self.sql_only_rate else 0.0


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


def database_url(settings: Settings) -> str:
    with psycopg.connect(settings.admin_database_url, autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    user = "postgres"
    url = with_credentials(settings.admin_database_url, user, settings.POSTGRES_PASSWORD, DATABASE)
    if settings.DATABASE_URL:
        url = with_database(settings.DATABASE_URL, DATABASE)
    with psycopg.connect(url, autocommit=True) as connection:
        schema.migrate(connection)
        connection.execute(SCHEMA)
    return url


def _cpu_seconds() -> float:
    """This process's user + system CPU so far, every thread's (the Kafka client's included)."""
    user, system = _user_and_system_seconds()
    return user + system


def _user_and_system_seconds() -> tuple[float, float]:
    """This process's user and system CPU so far, every thread's."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _machine_jiffies() -> tuple[int, int]:
    """(busy, all) CPU jiffies of the whole machine so far, every core's, from /proc/stat."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


def _busy_cores(before: tuple[int, int], after: tuple[int, int]) -> float:
    """How many cores were busy on average between two readings of _machine_jiffies."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return busy / total * (os.cpu_count() or 1) if total else 0.0


def prefill(settings: Settings, topic: str, events: Sequence[Envelope]) -> None:
    """Create `topic` (and its dead-letter topic) and publish `events` on it, all confirmed."""
    kafka_broker.ensure_topics(settings.kafka_bootstrap_servers, (topic, f"{topic}.dlq"))
    producer = Producer(
        {
            **client_config(settings.kafka_bootstrap_servers),
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for event in events:
        producer.produce(topic, key=event.key, value=event.to_json())
        producer.poll(0)
    assert producer.flush(60) == 0


def _kafka_case(
    settings: Settings,
    url: str,
    name: str,
    topic: str,
    count: int,
    strategy: Strategy,
    batch_size: int,
    telemetry: bool = False,
    workers: int = 1,
) -> KafkaCase:
    """What one consumer draining `count` messages of `topic` cost, counted from the first message."""
    consumer_settings = wiring.ConsumerSettings(
        DATABASE_URL=url,
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        CONSUMER_STRATEGY=strategy,
        CONSUMER_BATCH_SIZE=batch_size,
        CONSUMER_WORKERS=workers,
    )
    loop = wiring.build(
        name,
        (topic,),
        {LEDGER_ENTRY: ledger_handler(name)},
        consumer_settings,
        dead_letter_topic=f"{topic}.dlq",
        bulk_handlers={LEDGER_ENTRY: ledger_bulk_handler(name)},
        telemetry=KafkaTelemetry(settings.kafka_bootstrap_servers, name) if telemetry else None,
        paths=lab.PATHS,
    )
    started: list[_Reading] = []

    def done() -> bool:
        if loop.handled and not started:
            started.append(_Reading.now(settings, starting=True))
        return loop.handled >= count

    loop.run(until=done)
    return started[0].until(_Reading.now(settings), count - 1)  # the clocks start after the first message


@dataclass(frozen=True)
class _Reading:
    """The clocks a Kafka case is measured with, read at one moment."""

    at: float
    user: float
    system: float
    servers: tuple[float, float]  # PostgreSQL's and Kafka's CPU seconds
    machine: tuple[int, int]

    @classmethod
    def now(cls, settings: Settings, starting: bool = False) -> _Reading:
        """The clocks now. Reading the servers' costs this process a little CPU: when `starting`,
        they are read before this process's clocks, else after, so that it is never counted."""
        servers = servers_cpu_seconds(settings.EO_STATE_DIR) if starting else (0.0, 0.0)
        user, system = _user_and_system_seconds()
        at, machine = time.perf_counter(), _machine_jiffies()
        if not starting:
            servers = servers_cpu_seconds(settings.EO_STATE_DIR)
        return cls(at, user, system, servers, machine)

    def until(self, end: _Reading, messages: int) -> KafkaCase:
        """What the `messages` handled between this reading and `end` cost, per message."""

        def per_message(seconds: float) -> float:
            return seconds / messages * 1e6

        return KafkaCase(
            rate=messages / (end.at - self.at),
            user_us=per_message(end.user - self.user),
            system_us=per_message(end.system - self.system),
            postgres_us=per_message(end.servers[0] - self.servers[0]),
            kafka_us=per_message(end.servers[1] - self.servers[1]),
            busy_cores=_busy_cores(self.machine, end.machine),
        )


def _telemetry_cost(settings: Settings, records: int = 50_000) -> float:
    """Microseconds one telemetry record costs the thread that tells it."""
    telemetry = KafkaTelemetry(
        settings.kafka_bootstrap_servers, "bench", topic=f"bench.telemetry.{uuid.uuid4().hex[:8]}"
    )
    started = time.perf_counter()
    for n in range(records):
        telemetry.emit(
            "delivery",
            consumer="bench-v1",
            strategy="correct",
            message_id=f"00000000-0000-4000-8000-{n:012d}",
            key=f"order-{n % 1000}",
            event_type=LEDGER_ENTRY,
            outcome="applied",
        )
    elapsed = time.perf_counter() - started
    telemetry.flush(30)
    return elapsed / records * 1e6


def _sql_only_rate(
    url: str, name: str, events: Sequence[Envelope], strategy: Strategy, batch_size: int
) -> tuple[float, float]:
    """(messages/s, CPU µs per message) of the same processor fed parsed events, without Kafka."""
    processor = MessageProcessor(
        ProcessorConfig(consumer_name=name, strategy=strategy),
        connect=lambda: psycopg.connect(url, autocommit=True),
        handlers={LEDGER_ENTRY: ledger_handler(name)},
        bulk_handlers={LEDGER_ENTRY: ledger_bulk_handler(name)},
        path=path_for(strategy, lab.PATHS),
    )
    processor.session.connection  # connect before the clock starts  # noqa: B018
    started, cpu = time.perf_counter(), _cpu_seconds()
    for start in range(0, len(events), batch_size):
        processor.process_batch(events[start : start + batch_size])
    elapsed, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
    processor.close()
    return len(events) / elapsed, cpu / len(events) * 1e6


def _case(
    settings: Settings,
    url: str,
    label: str,
    count: int,
    strategy: Strategy = Strategy.CORRECT,
    batch_size: int = 1,
    duplicates: bool = False,
    telemetry: bool = False,
    workers: int = 1,
) -> Row:
    _say(f"{label}: {count} messages")
    run = uuid.uuid4().hex[:8]
    events = [entry(f"order-{n % 1000}") for n in range(count)]
    topic = f"bench.{run}"
    prefill(settings, topic, events)
    kafka_name, sql_name = f"bench-kafka-{run}-v1", f"bench-sql-{run}-v1"
    if duplicates:  # every marker exists already: each delivery takes the duplicate path
        for name in (kafka_name, sql_name):
            _sql_only_rate(url, name, events, Strategy.CORRECT, 500)
    kafka = _kafka_case(settings, url, kafka_name, topic, count, strategy, batch_size, telemetry, workers)
    sql_only, sql_only_cpu = _sql_only_rate(url, sql_name, events, strategy, batch_size)
    return Row(label, count, kafka, sql_only, sql_only_cpu)


def _where_it_went(case: KafkaCase) -> str:
    """A Kafka case's CPU per message, by who spent it (the servers' only where the launcher runs them)."""
    spent = f"this process {case.cpu_us:.1f} µs (user {case.user_us:.1f}, system {case.system_us:.1f})"
    if case.postgres_us or case.kafka_us:
        spent += f", PostgreSQL {case.postgres_us:.1f} µs, the broker {case.kafka_us:.1f} µs"
    return spent


def _target(case: str, rows: dict[str, Row]) -> tuple[str, bool | None, float | None]:
    """(target, met, value ÷ target) for the cases that have one; ratios within this run."""
    correct = rows["correct"].kafka_rate
    if case == "correct":
        return "≥ 0.8× its SQL-only rate", rows[case].ratio >= 0.8, rows[case].ratio / 0.8
    if case == "batched 100":
        rate = rows[case].kafka_rate
        toward = min(rate / 15_000, rate / correct / 10, rows[case].ratio / 0.9)
        return "≥ 15,000/s, ≥ 10× correct, ≥ 0.9× SQL only", toward >= 1, toward
    if case == "correct, 8 workers":
        toward = rows[case].kafka_rate / correct / 3
        return "≥ 3× correct (one worker)", toward >= 1, toward
    if case == "duplicate path":
        toward = rows[case].kafka_rate / correct / 3
        return "≥ 3× correct", toward >= 1, toward
    return "", None, None


def measure(messages: int, batched_messages: int, say: Callable[[str], None] = _say) -> list[BenchRow]:
    """Every consumer case, through Kafka and SQL-only, in one run; and telemetry's cost."""
    settings = default_infrastructure(say)
    url = database_url(settings)
    n, b = messages, batched_messages
    rows = {
        row.case: row
        for row in (
            _case(settings, url, "correct", n),
            _case(settings, url, "correct, 8 workers", n, workers=8),
            _case(settings, url, "no_dedup", n, Strategy.NO_DEDUP),
            _case(settings, url, "duplicate path", n, duplicates=True),
            _case(settings, url, "batched 10", b, batch_size=10),
            _case(settings, url, "batched 100", b, batch_size=100),
            _case(settings, url, "correct + telemetry", n, telemetry=True),
            _case(settings, url, "batched 100 + telemetry", b, batch_size=100, telemetry=True),
        )
    }
    result = []
    for case, row in rows.items():
        target, met, toward = _target(case, rows)
        result.append(
            BenchRow(
                "consumer",
                case,
                row.kafka_rate,
                "msg/s",
                target,
                met,
                f"{row.messages:,} msgs; SQL-only {row.sql_only_rate:,.0f}/s, ratio {row.ratio:.2f}; "
                f"CPU per message: {_where_it_went(row.kafka)} (this process SQL-only {row.sql_only_cpu_us:.1f}); "
                f"machine {row.kafka.busy_cores:.2f} of {os.cpu_count()} cores busy",
                toward,
            )
        )
    cost = _telemetry_cost(settings)
    result.append(BenchRow("consumer", "telemetry record", cost, "µs", detail="told per message, or per batch"))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=10_000, help="per one-at-a-time case")
    parser.add_argument("--batched-messages", type=int, default=50_000, help="per batched case")
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print("consumer throughput: one consumer draining a pre-filled topic")
    rows = measure(arguments.messages, arguments.batched_messages)
    print("\n".join(["", *table(rows)]))
    print(f"\nwritten to {write_json(rows, RESULTS).relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
