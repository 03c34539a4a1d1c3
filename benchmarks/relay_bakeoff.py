"""Both relays on the same outbox in one run: the built-in relay and Debezium (RELAY=debezium).

One database of its own, read by a Kafka Connect worker rendered from the launcher's templates
(workbench/cdc.py), and the built-in relay on the same rows:

- throughput: the same N rows, written while the connector is paused, sent by each relay in turn,
  counted as they reach a consumer (broker-confirmed events/s);
- latency at a fixed rate: commit to consumed, p50/p99, each relay alone;
- a crash of each in the middle of the flow (SIGKILL of the Connect worker, SIGKILL of the relay
  process): how many events reached the topic twice;
- what is left afterwards: the write-ahead log the slot retains, and the outbox's bytes per row.

`make bench` runs it; `python -m benchmarks.relay_bakeoff` runs it alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
from confluent_kafka import Consumer

from benchmarks.own_system import default_infrastructure
from benchmarks.rows import Row, save_figure, table, write_json
from effectively_once.envelope import decode
from effectively_once.kafka_client import client_config
from effectively_once.outbox import add_to_outbox
from infra.launcher.kafka_broker import ensure_topics
from services.kafka_access import ADMIN
from services.settings import PROJECT_ROOT, Settings
from workbench.cdc import Cdc, cdc_database
from workbench.ledger import entry
from workbench.network import free_port

RESULTS = PROJECT_ROOT / "artifacts" / "bench" / "relay-bakeoff.json"
CHART = PROJECT_ROOT / "artifacts" / "bench" / "relay-bakeoff.png"
RELAYS = ("built-in", "Debezium")


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


@dataclass
class Reader:
    """Reads a topic from its beginning in a thread: each message id, when it arrived, and the
    latency from its event's occurred_at (the row's commit, within a millisecond) to arrival."""

    settings: Settings
    topic: str
    arrivals: list[tuple[str, float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Reader:
        consumer = Consumer(
            {
                **client_config(self.settings.kafka_bootstrap_servers),
                "group.id": f"bakeoff-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 5,
            }
        )
        consumer.subscribe([self.topic])

        def read() -> None:
            while not self._stop.is_set():
                # poll returns the moment a message is there; consume(n, 0) takes what else is
                # buffered without waiting (waiting for n would add its timeout to every latency)
                first = consumer.poll(0.1)
                for message in [first, *consumer.consume(1000, 0)] if first is not None else []:
                    if message.error() is None:
                        now = time.time()
                        event = decode(message.value())
                        self.arrivals.append((event.message_id, now, now - event.occurred_at.timestamp()))
            consumer.close()

        self._thread = threading.Thread(target=read, daemon=True)
        self._thread.start()
        return self

    def wait_for(self, ids: set[str], timeout: float) -> tuple[float, float]:
        """Wait until every id arrived; when the first and the last of them arrived."""
        deadline = time.monotonic() + timeout
        seen: dict[str, float] = {}
        while time.monotonic() < deadline:
            seen = {message_id: at for message_id, at, _ in list(self.arrivals) if message_id in ids}
            if len(seen) == len(ids):
                return min(seen.values()), max(seen.values())
            time.sleep(0.05)
        raise TimeoutError(f"{self.topic}: {len(ids) - len(seen)} of {len(ids)} events never arrived")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def _write(url: str, topic: str, count: int, per_transaction: int = 100) -> list[str]:
    """`count` rows on 500 keys, `per_transaction` to a transaction, as fast as they go."""
    ids = []
    with psycopg.connect(url) as connection:
        for start in range(0, count, per_transaction):
            with connection.transaction():
                for n in range(start, min(count, start + per_transaction)):
                    event = entry(f"order-{n % 500}", sequence=n)
                    add_to_outbox(connection, event, topic)
                    ids.append(event.message_id)
    return ids


def _write_at(url: str, topic: str, rate: float, seconds: float) -> list[str]:
    """One row per transaction at `rate` a second, for `seconds`."""
    ids = []
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as connection:
        for n in range(int(rate * seconds)):
            pause = started + n / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            event = entry(f"order-{n % 100}", sequence=n)
            with connection.transaction():
                add_to_outbox(connection, event, topic)
            ids.append(event.message_id)
    return ids


def _write_into(ids: list[str], url: str, topic: str, rate: float, seconds: float) -> None:
    ids.extend(_write_at(url, topic, rate, seconds))


def _mark_all(url: str) -> None:
    """What the other relay sent already: not the next phase's work."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("UPDATE outbox SET published_at = now() WHERE published_at IS NULL")


def _topic(settings: Settings, label: str) -> str:
    name = f"bakeoff.{label}.{uuid.uuid4().hex[:8]}"
    ensure_topics(settings.kafka_bootstrap_servers, (name,))
    return name


class BuiltIn:
    """The built-in relay on the bench's database, as a process of its own as it runs (the
    bench's reader and writer threads would otherwise share its interpreter lock)."""

    def __init__(self, settings: Settings, url: str) -> None:
        self.settings, self.url = settings, url
        self.process: subprocess.Popen[bytes] | None = None

    def start_process(self) -> None:
        """Start the relay process and return once it serves its control endpoint (it relays by then)."""
        port = free_port()
        environment = {
            **os.environ,
            **self.settings.kafka_principal(ADMIN).environment(),
            "OUTBOX_DATABASE_URLS": json.dumps({"bakeoff": self.url}),
            "KAFKA_BOOTSTRAP_SERVERS": self.settings.kafka_bootstrap_servers,
            "CONTROL_PORT": str(port),
            "RELAY_POLL_INTERVAL_SECONDS": "0.2",
            "PYTHONPATH": str(PROJECT_ROOT),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "effectively_once.relay"],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise TimeoutError("the relay process did not start within 30 s")

    def kill_process(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None


@dataclass
class Figures:
    throughput: dict[str, float] = field(default_factory=dict)
    latency: dict[str, tuple[float, float]] = field(default_factory=dict)
    republished: dict[str, int] = field(default_factory=dict)
    retained_peak_bytes: int = 0
    retained_after_bytes: int = 0
    outbox_bytes_per_row: float = 0.0


def _throughput(settings: Settings, cdc: Cdc, relay: BuiltIn, count: int, figures: Figures) -> None:
    cdc.connector("pause")
    time.sleep(1)  # a pause takes effect at the task's next poll
    topic = _topic(settings, "throughput")
    ids = set(_write(cdc.url, topic, count))
    figures.retained_peak_bytes = _retained(cdc)
    reader = Reader(settings, topic).start()
    cdc.connector("resume")
    first, last = reader.wait_for(ids, 600)
    figures.throughput["Debezium"] = (count - 1) / (last - first)  # from the first event on: no start-up
    reader.stop()

    second = _topic(settings, "throughput")
    with psycopg.connect(cdc.url, autocommit=True) as connection:
        connection.execute("UPDATE outbox SET topic = %s WHERE topic = %s", (second, topic))
    reader = Reader(settings, second).start()
    relay.start_process()
    first, last = reader.wait_for(ids, 600)
    relay.kill_process()
    figures.throughput["built-in"] = (count - 1) / (last - first)
    reader.stop()


@contextmanager
def _alone(name: str, cdc: Cdc, relay: BuiltIn) -> Iterator[None]:
    """`name` relays alone: what the other sent before is marked; for the built-in relay's turn,
    Debezium is paused and the relay process runs."""
    _mark_all(cdc.url)
    if name == "built-in":
        cdc.connector("pause")
        relay.start_process()
    try:
        yield
    finally:
        if name == "built-in":
            relay.kill_process()
            cdc.connector("resume")


def _latency(settings: Settings, cdc: Cdc, relay: BuiltIn, rate: float, seconds: float, figures: Figures) -> None:
    for name in RELAYS:
        topic = _topic(settings, "latency")
        with _alone(name, cdc, relay):
            reader = Reader(settings, topic).start()
            ids = set(_write_at(cdc.url, topic, rate, seconds))
            reader.wait_for(ids, 120)
            reader.stop()
        latencies = sorted(latency for message_id, _, latency in reader.arrivals if message_id in ids)
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        figures.latency[name] = (statistics.median(latencies) * 1000, p99 * 1000)


def _crash(settings: Settings, cdc: Cdc, relay: BuiltIn, rate: float, seconds: float, figures: Figures) -> None:
    for name in RELAYS:
        topic = _topic(settings, "crash")
        with _alone(name, cdc, relay):
            reader = Reader(settings, topic).start()
            written: list[str] = []
            writer = threading.Thread(target=_write_into, args=(written, cdc.url, topic, rate, seconds))
            writer.start()
            time.sleep(seconds / 2)  # the middle of the flow: the writer paces itself
            if name == "Debezium":
                cdc.kill()
                cdc.start()
            else:
                relay.kill_process()
                relay.start_process()
            writer.join()
            reader.wait_for(set(written), 180)
            time.sleep(2)  # anything sent twice after the last first copy
            reader.stop()
        arrived = [message_id for message_id, _, _ in reader.arrivals]
        figures.republished[name] = len(arrived) - len(set(arrived))


def _retained(cdc: Cdc) -> int:
    with psycopg.connect(cdc.url) as connection:
        row = connection.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (cdc.slot,),
        ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _outbox_bytes_per_row(cdc: Cdc) -> float:
    with psycopg.connect(cdc.url) as connection:
        row = connection.execute(
            "SELECT sum(pg_total_relation_size(relid)), (SELECT count(*) FROM outbox)"
            " FROM pg_partition_tree('outbox') WHERE isleaf"
        ).fetchone()
    return float(row[0]) / max(1, int(row[1])) if row and row[0] else 0.0


def measure(
    count: int = 20_000, rate: float = 200, seconds: float = 15, say: Callable[[str], None] = _say
) -> tuple[list[Row], Figures]:
    settings = default_infrastructure(say)
    figures = Figures()
    with tempfile.TemporaryDirectory() as directory, cdc_database(settings, Path(directory), heap="384m") as cdc:
        relay = BuiltIn(settings, cdc.url)
        say(f"throughput: the same {count:,} rows through each relay")
        _throughput(settings, cdc, relay, count, figures)
        say(f"latency: {rate:g} events/s for {seconds:g} s through each relay")
        _latency(settings, cdc, relay, rate, seconds, figures)
        say("a crash of each in the middle of the flow")
        _crash(settings, cdc, relay, rate * 2, seconds, figures)
        deadline = time.monotonic() + 30  # heartbeats: the idle slot catches up
        while _retained(cdc) > 1_000_000 and time.monotonic() < deadline:
            time.sleep(0.5)
        figures.retained_after_bytes = _retained(cdc)
        figures.outbox_bytes_per_row = _outbox_bytes_per_row(cdc)
    return rows(figures, count, rate), figures


def rows(figures: Figures, count: int, rate: float) -> list[Row]:
    result = []
    for name in RELAYS:
        p50, p99 = figures.latency[name]
        result += [
            Row("relays", f"{name}: throughput", figures.throughput[name], "events/s", detail=f"{count:,} rows"),
            Row("relays", f"{name}: commit → consumed p50", p50, "ms", detail=f"at {rate:g} events/s"),
            Row("relays", f"{name}: commit → consumed p99", p99, "ms", detail=f"at {rate:g} events/s"),
            Row("relays", f"{name}: sent twice after a crash", figures.republished[name], "events"),
        ]
    result += [
        Row("relays", "Debezium: slot's log, paused", figures.retained_peak_bytes / 1e6, "MB", detail="peak"),
        Row("relays", "Debezium: slot's log, idle after", figures.retained_after_bytes / 1e3, "kB", detail="≤ 30 s"),
        Row("relays", "outbox bytes per row", figures.outbox_bytes_per_row, "bytes", detail="both relays"),
    ]
    return result


def draw(figures: Figures, path: Path = CHART) -> Path:
    """Throughput and latency side by side, one bar per relay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = ["#1f6feb", "#e36209"]  # blue and orange: told apart without colour vision too
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(12, 3.6))
    left.bar(RELAYS, [figures.throughput[name] for name in RELAYS], color=colours)
    left.set_title("throughput (events/s)")
    width = 0.38
    for offset, (index, label) in zip((-width / 2, width / 2), enumerate(("p50", "p99")), strict=True):
        middle.bar(
            [n + offset for n in range(len(RELAYS))],
            [figures.latency[name][index] for name in RELAYS],
            width,
            label=label,
            color=colours,
            alpha=1.0 if label == "p50" else 0.55,
        )
    middle.set_xticks(range(len(RELAYS)), RELAYS)
    middle.set_title("commit → consumed (ms): p50, p99 (lighter)")
    right.bar(RELAYS, [figures.republished[name] for name in RELAYS], color=colours)
    right.set_title("events sent twice after a crash")
    return save_figure(figure, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000, help="rows for the throughput case")
    parser.add_argument("--rate", type=float, default=200, help="events/s for the latency case")
    parser.add_argument("--seconds", type=float, default=15, help="length of the latency and crash cases")
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(f"relay bake-off: the built-in relay and Debezium on the same outbox ({datetime.now():%Y-%m-%d %H:%M})")
    result, figures = measure(arguments.rows, arguments.rate, arguments.seconds)
    print("\n".join(["", *table(result)]))
    written = (write_json(result, RESULTS), draw(figures))
    print(f"\nwritten to {', '.join(str(path.relative_to(PROJECT_ROOT)) for path in written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
