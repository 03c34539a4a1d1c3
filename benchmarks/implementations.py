"""The inventory consumer in Python, TypeScript and Java, side by side on the same work.

Each implementation runs as the process a user runs (the contract's environment, the JVM with the
launcher's options), on a schema of its own holding the runtime's tables and inventory's, and
drains a pre-filled topic of OrderPlaced events twice: first every message is applied (a claim,
a reservation, a stock update and an outbox row in one transaction), then the same messages again
under the same consumer name, every one a duplicate (the claim finds the marker, an empty COMMIT).

The applied rate comes from the markers' own commit times (processed_at: the transaction's start),
so no polling resolution is in it; the duplicate rate from the process's outcome counter, read
every 20 ms. Every row of one run shares the machine's weather: compare ratios, not rates.
"""

from __future__ import annotations

import argparse
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from urllib.parse import quote

import psycopg
from confluent_kafka import Producer
from psycopg import sql

from benchmarks.consumer_throughput import database_url
from benchmarks.own_system import default_infrastructure
from benchmarks.rows import Row, table, write_json
from effectively_once import schema
from effectively_once.contract import ProcessSubject
from effectively_once.contract.running import RunningConsumer, wait_for
from effectively_once.envelope import Envelope
from effectively_once.kafka_client import client_config
from infra.launcher import inventory_implementations, kafka_broker
from services import saga_contract
from services.settings import PROJECT_ROOT

IMPLEMENTATIONS = ("python", "node", "java")
INVENTORY_MIGRATIONS = sorted((PROJECT_ROOT / "services" / "inventory" / "migrations").glob("*.sql"))


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


def _schema_url(url: str) -> str:
    """A new schema holding the runtime's tables and inventory's; a URL whose search_path is it."""
    name = f"bench_inventory_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        connection.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(name)))
        for migration in [*sorted(schema.MIGRATIONS.glob("*.sql")), *INVENTORY_MIGRATIONS]:
            connection.execute(migration.read_text())
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-c search_path={name}')}"


def _placed(order_id: str) -> Envelope:
    return Envelope.new(
        saga_contract.ORDER_PLACED,
        order_id,
        {
            "order_id": order_id,
            "customer_email": "ada@example.com",
            "payment_method": "pm_card_visa",
            "amount_cents": 1200,
            "lines": [{"sku": "sku-espresso", "quantity": 1}],
        },
    )


def _prefill(servers: str, topic: str, events: Sequence[Envelope]) -> None:
    kafka_broker.ensure_topics(servers, (topic,))
    producer = Producer({**client_config(servers), "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    for event in events:
        producer.produce(topic, key=event.key, value=event.to_json())
        producer.poll(0)
    assert producer.flush(60) == 0


def _applied_rate(url: str, consumer_name: str, count: int) -> float:
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT count(*), extract(epoch FROM max(processed_at) - min(processed_at))"
            " FROM processed_message WHERE consumer_name = %s",
            (consumer_name,),
        ).fetchone()
    assert row is not None and row[0] == count, f"{row} markers, not {count}"
    return (count - 1) / float(row[1])


def _duplicate_rate(consumer: RunningConsumer, count: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    first: float | None = None
    while True:
        duplicates = consumer.outcomes()["duplicate"]
        now = time.perf_counter()
        if duplicates and first is None:
            first, seen_first = now, duplicates
        if duplicates >= count and first is not None:
            return (count - seen_first) / (now - first)
        if time.monotonic() > deadline:
            raise AssertionError(f"{duplicates} of {count} duplicates after {timeout:.0f} s\n{consumer.tail()}")
        time.sleep(0.02)


def _measure_one(
    implementation: str, servers: str, base_url: str, count: int, say: Callable[[str], None]
) -> tuple[float, float]:
    """(applied/s, duplicate/s) of one implementation."""
    url = _schema_url(base_url)
    run = uuid.uuid4().hex[:8]
    name = f"bench-inventory-{implementation}-{run}-v1"
    events = [_placed(f"order-{run}-{n}") for n in range(count)]
    first, again = f"bench.{implementation}.{run}.applied", f"bench.{implementation}.{run}.again"
    for topic in (first, again):
        _prefill(servers, topic, events)
    subject = ProcessSubject(
        database_url=url,
        bootstrap_servers=servers,
        command=inventory_implementations.command(implementation),
        cwd=PROJECT_ROOT,
        environment={"PYTHONPATH": str(PROJECT_ROOT), "LOG_LEVEL": "WARNING"},
        make_event=_placed,
        effects=lambda connection, event: 0,
    )
    say(f"{implementation}: {count} messages applied, then the same {count} again (duplicates)")
    with RunningConsumer(subject, name, [first], f"dlq.{name}", "applied") as consumer:
        wait_for(lambda: consumer.acknowledged() >= count, 600, f"{implementation} to apply {count}", consumer.tail)
    applied = _applied_rate(url, name, count)
    with RunningConsumer(subject, name, [again], f"dlq.{name}", "again") as consumer:
        duplicate = _duplicate_rate(consumer, count, 600)
    return applied, duplicate


def measure(count: int = 3_000, say: Callable[[str], None] = _say) -> list[Row]:
    """Every implementation's applied and duplicate rates, in one run."""
    settings = default_infrastructure(say)
    url = database_url(settings)
    for implementation in IMPLEMENTATIONS:
        inventory_implementations.build(implementation, say)
    rates = {impl: _measure_one(impl, settings.kafka_bootstrap_servers, url, count, say) for impl in IMPLEMENTATIONS}
    python_applied = rates["python"][0]
    rows = []
    for implementation, (applied, duplicate) in rates.items():
        detail = f"{count:,} msgs; {applied / python_applied:.2f}× Python's"
        rows.append(Row("stacks", f"{implementation}: applied", applied, "msg/s", detail=detail))
        rows.append(
            Row(
                "stacks",
                f"{implementation}: duplicate path",
                duplicate,
                "msg/s",
                detail=f"{count:,} msgs; {duplicate / applied:.2f}× its applied rate",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=3_000)
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print("the inventory consumer in three stacks: applied and duplicate rates")
    rows = measure(arguments.messages)
    print("\n".join(["", *table(rows)]))
    written = write_json(rows, PROJECT_ROOT / "artifacts" / "bench" / "stacks.json")
    print(f"\nwritten to {written.relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
